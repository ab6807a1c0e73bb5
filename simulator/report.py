"""Simulator outputs: per-request / per-step CSV, summary JSON, seaborn plots, and the batch-size
crossover study (at which batch size speculative decoding stops paying).

Every file goes through `common.atomic`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from simulator.serving import Cluster, simulate_serving
from simulator.workload import Workload
from common import atomic


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    sns.set_theme(style="whitegrid")
    return plt, sns


def latency_cdf_plot(requests: pd.DataFrame, path: Path, hue: str = "label") -> Path:
    """ECDFs of TTFT, TPOT and end-to-end latency, one line per `hue` value."""
    plt, sns = _plt()
    done = requests[requests["status"] == "done"]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for ax, col, title in zip(axes, ("ttft_s", "tpot_s", "e2e_s"), ("TTFT (s)", "TPOT (s)", "end-to-end (s)")):
        sns.ecdfplot(data=done, x=col, hue=hue if hue in done else None, ax=ax)
        ax.set_xlabel(title)
        ax.set_xscale("log")
    fig.suptitle("latency CDFs")
    atomic.save_figure(path, fig)
    plt.close(fig)
    return path


def load_plot(summaries: pd.DataFrame, path: Path, hue: str = "label") -> Path:
    """Throughput and p99 end-to-end latency against offered load."""
    plt, sns = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    sns.lineplot(data=summaries, x="offered_rate", y="throughput_tok_s", hue=hue, marker="o", ax=axes[0])
    axes[0].set(xlabel="offered load (requests/s)", ylabel="throughput (tokens/s)")
    sns.lineplot(data=summaries, x="offered_rate", y="e2e_s_p99", hue=hue, marker="o", ax=axes[1])
    axes[1].set(xlabel="offered load (requests/s)", ylabel="p99 end-to-end latency (s)", yscale="log")
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
def batch_crossover(profile, methods: Sequence[tuple[str, str, dict]], batches: Sequence[int], *,
                    prompt_len: int = 256, output_len: int = 256, waves: int = 3, seed: int = 0) -> pd.DataFrame:
    """For each batch limit B: `waves * B` requests arrive at once and are served with batch limit B
    (continuous batching keeps B running); throughput and TPOT for every (label, method, config)."""
    rows = []
    for b in batches:
        workload = Workload(rate=1e9, n_requests=waves * int(b), prompt_len=prompt_len, output_len=output_len)
        for label, method, config in methods:
            s = simulate_serving(profile, method, config, workload, Cluster(max_batch=int(b)), seed, per_step=True).summary
            rows.append({"label": label, "batch": int(b), "throughput_tok_s": s["throughput_tok_s"],
                         "tpot_ms": 1000 * s["tpot_s_mean"], "tpot_p99_ms": 1000 * s["tpot_s_p99"],
                         "mean_batch": s.get("mean_batch", np.nan), "oom": s["oom"], "preemptions": s["preemptions"]})
    return pd.DataFrame(rows)


def crossover_batch(table: pd.DataFrame, baseline: str, label: str) -> int | None:
    """The smallest batch at which `label`'s throughput falls to or below `baseline`'s (None if never)."""
    pivot = table.pivot(index="batch", columns="label", values="throughput_tok_s").sort_index()
    worse = pivot.index[pivot[label] <= pivot[baseline]]
    return int(worse[0]) if len(worse) else None


def write_crossover_report(out: Path, table: pd.DataFrame, baseline: str, profile_name: str,
                           command: str) -> list[Path]:
    """crossover.csv, crossover.png (throughput and speedup against batch) and README.md."""
    plt, sns = _plt()
    out = Path(out)
    pivot = table.pivot(index="batch", columns="label", values="throughput_tok_s").sort_index()
    speed = pivot.div(pivot[baseline], axis=0).drop(columns=[baseline])
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    sns.lineplot(data=table, x="batch", y="throughput_tok_s", hue="label", marker="o", ax=axes[0])
    axes[0].set(xscale="log", xlabel="batch size (running sequences)", ylabel="throughput (tokens/s)")
    long = speed.reset_index().melt(id_vars="batch", var_name="label", value_name="speedup")
    sns.lineplot(data=long, x="batch", y="speedup", hue="label", marker="o", ax=axes[1])
    axes[1].axhline(1.0, color="k", lw=1, ls="--")
    axes[1].set(xscale="log", xlabel="batch size (running sequences)", ylabel=f"throughput / {baseline}")
    fig.suptitle(f"speculative decoding against batch size: {profile_name}")
    written = [atomic.write_csv(out / "crossover.csv", table)]
    written.append(atomic.save_figure(out / "crossover.png", fig))
    plt.close(fig)
    lines = [f"# Batch-size crossover: {profile_name}", "",
             "Generated by the discrete-event simulator (`simulator.report.batch_crossover`):", "",
             f"    {command}", "",
             "Each point serves `waves x B` requests that arrive together with batch limit B, so that B",
             "sequences decode at once (iteration-level continuous batching); each iteration's draft and",
             "verify forwards are priced by the Profile's fitted latency model at the batch's size,",
             "tokens per sequence and mean context.", "", "![crossover](crossover.png)", "",
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


