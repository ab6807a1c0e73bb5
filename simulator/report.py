"""Simulator outputs: per-request / per-step CSV, summary JSON, plots, and the batch-size
crossover study (at which batch size speculative decoding stops paying).

Every file goes through `common.atomic`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from simulator.batch_load import BatchLoad, serve_at_batch
from simulator.costs import Parallelism
from common import atomic
from common.plotting import error_band, palette, pyplot, readable_ticks, reference_line
from common.progress import progress_bar


def latency_cdf_plot(requests: pd.DataFrame, path: Path, hue: str = "label") -> Path:
    """ECDFs of TTFT, TPOT and end-to-end latency, one line per `hue` value (the offered load),
    one colour per load in every panel and one legend."""
    plt = pyplot()
    done = requests[requests["status"] == "done"].assign(ttft_ms=lambda f: 1000 * f["ttft_s"],
                                                         tpot_ms=lambda f: 1000 * f["tpot_s"])
    labels = list(dict.fromkeys(done[hue])) if hue in done else []
    colours = palette(labels)
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    panels = (("ttft_ms", "TTFT (ms, wait in the queue included)", True),
              ("tpot_ms", "TPOT (ms per output token)", False), ("e2e_s", "end-to-end (s)", True))
    for ax, (col, title, log) in zip(axes, panels):
        for label in labels or [None]:
            rows = done if label is None else done[done[hue] == label]
            values = np.sort(rows[col].to_numpy(float))
            ax.step(values, np.arange(1, len(values) + 1) / max(len(values), 1), where="post",
                    color=colours.get(label, "C0"), label=label)
        if log:
            ax.set_xscale("log")
        readable_ticks(ax.xaxis)
        ax.tick_params(axis="x", labelrotation=30, labelsize=7)
        ax.set(xlabel=title, ylabel="share of requests at or below")
    if labels:
        fig.legend(*axes[0].get_legend_handles_labels(), title="offered load", loc="upper left",
                   bbox_to_anchor=(1.0, 0.9), fontsize=8, frameon=False)
    fig.suptitle("latency CDFs per offered load")
    fig.tight_layout()
    atomic.save_figure(path, fig)
    plt.close(fig)
    return path


def load_plot(summaries: pd.DataFrame, path: Path, hue: str = "config") -> Path:
    """Throughput and p99 end-to-end latency against offered load: one connected line per
    configuration (`hue`), a point per load simulated."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    groups = summaries.groupby(hue, sort=False) if hue in summaries else [("", summaries)]
    colours = palette([k for k, _ in groups])
    for key, group in groups:
        group = group.sort_values("offered_rate")
        axes[0].plot(group["offered_rate"], group["throughput_tok_s"], marker="o", color=colours[key], label=key)
        axes[1].plot(group["offered_rate"], group["e2e_s_p99"], marker="o", color=colours[key], label=key)
    axes[0].set(xlabel="offered load (requests/s)", ylabel="throughput (tokens/s)")
    axes[1].set(xlabel="offered load (requests/s)", ylabel="p99 end-to-end latency (s, queueing included)",
                yscale="log")
    for ax in axes:
        readable_ticks(ax.xaxis, summaries["offered_rate"])
        readable_ticks(ax.yaxis)
    axes[0].legend(fontsize=8, title=hue, frameon=False)
    fig.tight_layout()
    atomic.save_figure(path, fig)
    plt.close(fig)
    return path


def write_run(out: Path, requests: pd.DataFrame, summaries: list[dict[str, Any]],
              steps: pd.DataFrame | None = None) -> list[Path]:
    """requests.csv, summary.json (+ summary.csv), optional steps.csv, and the plots."""
    out = Path(out)
    written = [atomic.write_csv(out / "requests.csv", requests),
               atomic.write_json(out / "summary.json", summaries),
               atomic.write_csv(out / "summary.csv", pd.DataFrame(summaries))]
    if steps is not None:
        written.append(atomic.write_csv(out / "steps.csv", steps))
    written.append(latency_cdf_plot(requests, out / "latency_cdf.png"))
    frame = pd.DataFrame(summaries)
    if "offered_rate" in frame and frame["offered_rate"].nunique() > 1:
        written.append(load_plot(frame, out / "throughput_vs_load.png"))
    return written


# ---- batch-size crossover ------------------------------------------------------------------------
def batch_crossover(profile, methods: Sequence[tuple[str, str, dict]], batches: Sequence[int], load: BatchLoad, *,
                    seed: int = 0, progress: bool = False, parallel: Parallelism | None = None) -> pd.DataFrame:
    """For each batch limit B: `load` served at B (`simulator.batch_load`: `waves x B` requests arrive
    at once, B decode together) on one replica spread as `parallel` (default one GPU); throughput and
    TPOT for every (label, method, config)."""
    rows = []
    with progress_bar(len(batches) * len(methods), "batch sizes", progress, unit="run") as bar:
        for b in batches:
            for label, method, config in methods:
                s = serve_at_batch(profile, method, config, int(b), load, seed, parallel).summary
                rows.append({"label": label, "batch": int(b), "throughput_tok_s": s["throughput_tok_s"],
                             "tpot_ms": 1000 * s["tpot_s_mean"], "tpot_p99_ms": 1000 * s["tpot_s_p99"],
                             "mean_batch": s.get("mean_batch", np.nan), "oom": s["oom"],
                             "preemptions": s["preemptions"]})
                bar.update()
    return pd.DataFrame(rows)


def crossover_batch(table: pd.DataFrame, baseline: str, label: str) -> int | None:
    """The smallest batch at which `label`'s throughput falls to or below `baseline`'s (None if never)."""
    pivot = table.pivot(index="batch", columns="label", values="throughput_tok_s").sort_index()
    worse = pivot.index[pivot[label] <= pivot[baseline]]
    return int(worse[0]) if len(worse) else None


def write_crossover_report(out: Path, table: pd.DataFrame, baseline: str, profile_name: str,
                           command: str, load: BatchLoad, heldout: float | None = None) -> list[Path]:
    """crossover.csv, crossover.png (throughput and speedup against batch, each speedup shaded within
    the Profile's held-out error `heldout` where it has one) and README.md."""
    plt = pyplot()
    out = Path(out)
    pivot = table.pivot(index="batch", columns="label", values="throughput_tok_s").sort_index()
    speed = pivot.div(pivot[baseline], axis=0).drop(columns=[baseline])
    colours = palette([baseline] + [c for c in dict.fromkeys(table["label"]) if c != baseline])
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    banded = False
    for label in colours:
        one = table[table["label"] == label].sort_values("batch")
        axes[0].plot(one["batch"], one["throughput_tok_s"], marker="o", color=colours[label], label=label)
        if label in speed:
            axes[1].plot(speed.index, speed[label], marker="o", color=colours[label], label=label)
            banded |= error_band(axes[1], speed.index, speed[label], heldout, colours[label])
    axes[0].set(xlabel="batch size (running sequences)", ylabel="throughput (tokens/s)")
    axes[1].set(xlabel="batch size (running sequences)", ylabel=f"throughput / {baseline} (plain decoding)"
                + (f"\nshaded: within the held-out error ({heldout:.1%})" if banded else ""))
    for ax in axes:
        readable_ticks(ax.xaxis, table["batch"])
        readable_ticks(ax.yaxis)
    reference_line(axes[1], 1.0, f"{baseline} = 1.0 (below: speculation loses)")
    axes[0].legend(fontsize=8, frameon=False)
    fig.suptitle(f"speculative decoding against batch size: {profile_name}")
    fig.tight_layout()
    written = [atomic.write_csv(out / "crossover.csv", table)]
    written.append(atomic.save_figure(out / "crossover.png", fig))
    plt.close(fig)
    lines = [f"# Batch-size crossover: {profile_name}", "",
             "Generated by the discrete-event simulator (`simulator.report.batch_crossover`):", "",
             f"    {command}", "",
             f"Each point is served under the load of every batch size in this project (`simulator.batch_load`): "
             f"{load.describe()}. Continuous batching at the iteration level; each iteration's draft and verify "
             "forwards are priced by the Profile's fitted latency model at the batch's size, tokens per sequence "
             "and mean context." + (f" Shaded: each speedup within the Profile's held-out error ({heldout:.1%}): "
                                    "a crossing inside it is undecided." if banded else ""),
             "", "![crossover](crossover.png)", "",
             "| batch | " + " | ".join(f"{c} tok/s" for c in pivot.columns) + " | "
             + " | ".join(f"{c} / {baseline}" for c in speed.columns) + " |",
             "|" + "---|" * (1 + len(pivot.columns) + len(speed.columns))]
    for b in pivot.index:
        lines.append(f"| {b} | " + " | ".join(f"{pivot.loc[b, c]:.0f}" for c in pivot.columns) + " | "
                     + " | ".join(f"{speed.loc[b, c]:.2f}" for c in speed.columns) + " |")
    lines.append("")
    for c in speed.columns:
        b = crossover_batch(table, baseline, c)
        lines.append(f"- **{c}** stops paying (throughput <= {baseline}) at batch **{b}**." if b else
                     f"- **{c}** pays at every batch size simulated.")
    written.append(atomic.write_text(out / "README.md", "\n".join(lines) + "\n"))
    return written


