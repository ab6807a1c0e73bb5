"""The capacity plan as a report a person reads: `README.md` with its tables, curves and crossover."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from methods import BASELINE
from common import atomic
from common.plotting import palette, pyplot, readable_ticks, reference_line

from capacity.plan import KEEP_UP, CapacityOptions
from simulator.report import crossover_batch, write_crossover_report


def curves_plot(curves: pd.DataFrame, opts: CapacityOptions, profile: str, path: Path) -> Path:
    """Throughput against TPOT p50 / p99 and TTFT p99, one colour per configuration in every panel,
    each SLO limit drawn and named, one legend."""
    plt, sns = pyplot()
    colours = palette(curves["label"], sns)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    panels = (("tpot_s_p50", "TPOT p50 (ms)", opts.slo.tpot_p50), ("tpot_s_p99", "TPOT p99 (ms)", opts.slo.tpot_p99),
              ("ttft_s_p99", "TTFT p99 (ms)", opts.slo.ttft_p99))
    for ax, (col, name, limit) in zip(axes, panels):
        for label, colour in colours.items():
            one = curves[curves["label"] == label].sort_values("rate")
            ax.plot(one["throughput_tok_s"], 1000 * one[col], marker="o", color=colour, label=label)
        ax.set(xlabel="throughput (tokens/s, one GPU)", ylabel=name, yscale="log")
        if limit:
            reference_line(ax, 1000 * limit, f"SLO {1000 * limit:g} ms", color="crimson")
        readable_ticks(ax.xaxis)
        readable_ticks(ax.yaxis)
    fig.legend(*axes[0].get_legend_handles_labels(), title="configuration", loc="upper center",
               bbox_to_anchor=(0.5, 0.0), ncol=min(4, len(colours)), fontsize=8, frameon=False)
    fig.suptitle(f"throughput against latency as the load grows: {profile}")
    fig.tight_layout()
    atomic.save_figure(path, fig)
    plt.close(fig)
    return path


def write_report(result: dict[str, Any], opts: CapacityOptions, out: Path, command: str) -> Path:
    out = Path(out)
    best, curves = result["best"], result["curves"]
    atomic.write_csv(out / "capacity.csv", best.assign(config=best.config.map(json.dumps)))
    atomic.write_csv(out / "candidates.csv", result["all"].assign(config=result["all"].config.map(json.dumps)))
    atomic.write_csv(out / "curves.csv", curves)
    curves_plot(curves, opts, result["profile"], out / "curves.png")
    write_crossover_report(out / "crossover", result["crossover"], "no speculation", result["profile"], command)
    ar = best[best.method == BASELINE].iloc[0]
    lines = [
        f"# Capacity plan: {result['profile']}", "",
        f"Regenerate with `{command}`.", "",
        f"Hardware {result['hardware']}; workload: {opts.load.workload(opts.target_rate).describe('each rate tried')}; batch limit "
        f"{opts.load.max_batch}, {opts.load.duration_s:g} s of arrivals per simulated run, seed {opts.seed}. SLO: "
        f"{opts.slo.describe()}. Target load **{opts.target_rate:g} req/s**.", "",
        "## Per method: best configuration, highest load one GPU sustains, GPUs for the target", "",
        "| method | configuration | max req/s per GPU | tok/s at max | TPOT p50 / p99 ms | TTFT p99 ms | "
        "GPUs for target | vs no speculation |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in best.itertuples():
        lines.append(f"| {row.method} | {row.label} | {row.max_rate:.2f} | {row.throughput_tok_s:.0f} | "
                     f"{1000 * row.tpot_s_p50:.1f} / {1000 * row.tpot_s_p99:.1f} | {1000 * row.ttft_s_p99:.0f} | "
                     f"{'n/a' if pd.isna(row.gpus) else int(row.gpus)} | {row.max_rate / ar.max_rate:.2f}x load |")
    lines += ["", "Max load: bracketing from the closed form's estimate, then bisection of the arrival rate on `simulator.simulate_serving`; a rate "
              f"passes when no request runs out of memory, the SLO holds and the served rate is at least "
              f"{KEEP_UP:.0%} of the arrival rate drawn over {opts.load.duration_s:g} s of arrivals. GPUs: the smallest number of replicas (least-loaded routing) "
              "whose simulated cluster meets the SLO at the target load, starting from ceil(target / max load).",
              "", "![curves](curves.png)", "", "## Where speculative decoding stops paying", "",
              "![crossover](crossover/crossover.png)", ""]
    for row in best.itertuples():
        if row.method == BASELINE:
            continue
        b = crossover_batch(result["crossover"], "no speculation", row.label)
        lines.append(f"- {row.label}: throughput at or below plain decoding from batch **{b}** on." if b else
                     f"- {row.label}: still ahead of plain decoding at batch {max(opts.batches)}.")
    lines += ["", "Every candidate tried: [candidates.csv](candidates.csv); curves: [curves.csv](curves.csv); "
              "crossover: [crossover/crossover.csv](crossover/crossover.csv).", "",
              "Timings (s): " + ", ".join(f"{k} {v:.1f}" for k, v in result["timings"].items()), ""]
    return atomic.write_text(out / "README.md", "\n".join(lines))
