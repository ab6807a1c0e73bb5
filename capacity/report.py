"""The capacity plan as a report a person reads: `README.md` with its tables, curves and crossover."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from methods import BASELINE
from common import atomic
from common.plotting import error_band, palette, pyplot, readable_ticks, reference_line

from capacity.plan import KEEP_UP, CapacityOptions
from simulator.report import crossover_batch, write_crossover_report


def curves_plot(curves: pd.DataFrame, opts: CapacityOptions, profile: str, path: Path,
                error: float | None = None) -> Path:
    """Throughput against TPOT p50 / p99 and TTFT p99, one colour per configuration in every panel,
    each SLO limit drawn and named, one legend; each curve's throughput shaded over the 90% interval
    of the Profile's held-out `error` where one is known (the deployment table's interval)."""
    plt = pyplot()
    colours = palette(curves["label"])
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    banded = False
    panels = (("tpot_s_p50", "TPOT p50 (ms)", opts.slo.tpot_p50), ("tpot_s_p99", "TPOT p99 (ms)", opts.slo.tpot_p99),
              ("ttft_s_p99", "TTFT p99 (ms)", opts.slo.ttft_p99))
    for ax, (col, name, limit) in zip(axes, panels):
        for label, colour in colours.items():
            one = curves[curves["label"] == label].sort_values("rate")
            per_gpu = one["throughput_tok_s"] / (one["tp"] if "tp" in one else 1)
            ax.plot(per_gpu, 1000 * one[col], marker="o", color=colour, label=label)
            banded |= error_band(ax, per_gpu, 1000 * one[col], error, colour, along="x")
        ax.set(xlabel="output throughput per GPU (tokens/s; a replica's over its TP GPUs)", ylabel=name, yscale="log")
        if limit:
            reference_line(ax, 1000 * limit, f"SLO {1000 * limit:g} ms", color="crimson")
        readable_ticks(ax.xaxis)
        readable_ticks(ax.yaxis)
    fig.legend(*axes[0].get_legend_handles_labels(), title="configuration", loc="upper center",
               bbox_to_anchor=(0.5, 0.0), ncol=min(4, len(colours)), fontsize=8, frameon=False)
    band = f"; shaded: the 90% interval of the held-out error {error:.0%}" if banded else ""
    fig.suptitle(f"throughput against latency as the load grows: {profile}{band}")
    fig.tight_layout()
    atomic.save_figure(path, fig)
    plt.close(fig)
    return path


def _n(value, fmt: str = "d") -> str:
    """A number for a table cell; n/a where there is none."""
    if value is None or pd.isna(value):
        return "n/a"
    return format(int(value), fmt) if fmt == "d" else format(value, fmt)


def _ms(row, metric: str, prefix: str = "target_") -> str:
    return " / ".join(_n(1000 * getattr(row, f"{prefix}{metric}_s_{q}"), ".1f") for q in ("mean", "p50", "p99"))


def deployment_table(best: pd.DataFrame) -> list[str]:
    """Per method: configuration, TP x replicas = GPUs, load per replica, cost, saving, batch cap."""
    lines = ["| method | configuration | TP | replicas | GPUs (90%) | max req/s per replica (90%; per GPU) | "
             "USD / M output tok at target | at max load | saving vs no speculation | batch cap (peak at max load) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in best.itertuples():
        saving = "-" if row.method == BASELINE else "n/a" if pd.isna(row.saving) else f"{100 * row.saving:+.0f}%"
        rates = f" ({row.max_rate_lo:.2f}-{row.max_rate_hi:.2f})" if row.max_rate_lo == row.max_rate_lo else ""
        gpus = f" ({_n(row.gpus_lo)}-{_n(row.gpus_hi)})" if pd.notna(row.gpus_lo) else ""
        lines.append(f"| {row.method} | {row.label} | {int(row.tp)} | {_n(row.replicas)} | {_n(row.gpus)}{gpus} | "
                     f"{row.max_rate:.2f}{rates}; {row.rate_per_gpu:.2f} | {_n(row.usd_per_m_tok, '.3f')} | "
                     f"{_n(row.usd_per_m_tok_at_max, '.3f')} | {saving} | "
                     f"{int(row.batch_cap)} {row.cap_source} ({_n(row.peak_batch)}) |")
    return lines


def cap_note(best: pd.DataFrame) -> str:
    """One line naming the rows whose running batch reached its cap at max load ('' for none)."""
    reached = [f"{row.method} ({int(row.batch_cap)}, {row.cap_source})" for row in best.itertuples()
               if row.peak_batch == row.peak_batch and row.peak_batch >= row.batch_cap]
    return ("Batch cap reached at max load by " + ", ".join(reached) + ": the cap may have bounded that load "
            "(a larger --max-batch, where memory allows, would show whether it did)." if reached else "")


def served_table(best: pd.DataFrame) -> list[str]:
    """At the target load on the planned GPUs, in `vllm bench serve`'s terms."""
    lines = ["| method | request throughput (req/s) | output token throughput (tok/s) | TTFT mean / median / p99 (ms) | "
             "TPOT mean / median / p99 (ms) | ITL mean / median / p99 (ms) |", "| --- | --- | --- | --- | --- | --- |"]
    for row in best.itertuples():
        lines.append(f"| {row.method} | {_n(row.target_throughput_req_s, '.2f')} | {_n(row.target_throughput_tok_s, '.0f')} | "
                     f"{_ms(row, 'ttft')} | {_ms(row, 'tpot')} | {_ms(row, 'itl')} |")
    return lines


def tp_table(per_tp: pd.DataFrame) -> list[str]:
    """Every method's best at every TP that fits: what the choice was made from."""
    lines = ["| method | configuration | TP | max req/s per replica | per GPU | replicas for target | GPUs |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for row in per_tp.sort_values(["method", "tp"], kind="stable").itertuples():
        lines.append(f"| {row.method} | {row.label} | {int(row.tp)} | {row.max_rate:.2f} | {row.rate_per_gpu:.2f} | "
                     f"{_n(row.replicas)} | {_n(row.gpus)} |")
    return lines


def write_report(result: dict[str, Any], opts: CapacityOptions, out: Path, command: str) -> Path:
    out = Path(out)
    best, curves = result["best"], result["curves"]
    atomic.write_csv(out / "capacity.csv", best.assign(config=best.config.map(json.dumps)))
    atomic.write_csv(out / "per_tp.csv", result["per_tp"].assign(config=result["per_tp"].config.map(json.dumps)))
    atomic.write_csv(out / "candidates.csv", result["all"].assign(config=result["all"].config.map(json.dumps)))
    atomic.write_csv(out / "curves.csv", curves)
    curves_plot(curves, opts, result["profile"], out / "curves.png", result["heldout_error"])
    write_crossover_report(out / "crossover", result["crossover"], "no speculation", result["profile"], command,
                           result["crossover_load"], result.get("heldout_error"))
    cap = (f"batch cap {opts.load.max_batch} running sequences per replica (--max-batch)" if opts.load.max_batch else
           "batch cap per replica: the sequences of the workload's mean prompt + mean output (+ a step's reserved "
           "slots) that fit in its KV memory (each row's cap below; --max-batch sets one)")
    lines = [
        f"# Capacity plan: {result['profile']}", "",
        f"Regenerate with `{command}`.", "",
        f"Hardware {result['hardware']}; workload: {opts.load.workload(opts.target_rate).describe('each rate tried')}; "
        f"{cap}; tensor parallelism tried: {', '.join(map(str, opts.tp))}; {opts.load.duration_s:g} s of arrivals per "
        f"simulated run, seed {opts.seed}. SLO: {opts.slo.describe()}. Target load **{opts.target_rate:g} req/s**; "
        f"GPU price {opts.gpu_hour_price:.2f} USD per GPU-hour.", "",
        "## Per method: the fewest GPUs that serve the target within the SLO, and their cost", "",
        *deployment_table(best), "",
        *[f"{method}: no rate met the SLO at any TP tried (candidates.csv has the closest).\n" for method
          in dict.fromkeys(result["all"]["method"]) if method not in set(best["method"])],
        "A replica is TP GPUs (tensor parallel, `simulator.costs.Parallelism`); GPUs = TP x replicas, the fewest over "
        "the TPs tried (ties: the smaller TP). The 90% intervals: the highest rate divided by 1 +/- the Profile's "
        "held-out error (`costmodel.uncertainty`), and the GPUs the target takes at either end, replicas estimated "
        "from the per-replica rate (the plan's own count is found by simulating the cluster). USD per million output tokens at the target: GPUs x price over the "
        "target's output tokens in an hour (target req/s x mean output length); at max load: one replica's GPUs at its "
        "highest rate within the SLO. Plain decoding is the `ar` row (no speculation). Batch cap (peak): the running "
        "sequences a replica admits, where that cap comes from, and the most that ran at once at max load; a peak "
        "below the cap means the SLO, not the cap, bounded the load.", "",
        *([cap_note(best), ""] if cap_note(best) else []),
        "## At the target load, as `vllm bench serve` reports it", "",
        *served_table(best), "",
        "Each row's planned cluster at the target rate, one simulated run. Request and output token throughput: "
        "completed requests and their output tokens over the time from the first arrival to the last completion. "
        "TTFT: arrival to first token, queueing included. TPOT per request: (last token - first token) / (output "
        "tokens - 1). ITL: the gap between successive output chunks over all requests; a speculation step emits its "
        "accepted tokens as one chunk, so ITL is per step and TPOT per token.", "",
    ]
    if len(opts.tp) > 1:
        lines += ["## Every TP tried", "", *tp_table(result["per_tp"]), ""]
    lines += ["## How", "",
              "Max load: bracketing from the closed form's estimate, then bisection of the arrival rate on "
              "`simulator.simulate_serving`; a rate passes when no request runs out of memory, the SLO holds and the "
              f"served rate is at least {KEEP_UP:.0%} of the arrival rate drawn over {opts.load.duration_s:g} s of "
              "arrivals. Replicas: the smallest number (least-loaded routing) whose simulated cluster meets the SLO at "
              "the target load, from ceil(target / max load) to one more.",
              "", "![curves](curves.png)", "", "## Where speculative decoding stops paying", "",
              f"Not the load above: the load every command serves a batch size under (`simulator.batch_load`, as "
              f"the sweep's deployments), at this workload's mean lengths: {result['crossover_load'].describe()}; "
              f"one replica of TP {int(best['tp'].max())}, throughput compared.", "",
              "![crossover](crossover/crossover.png)", ""]
    for row in best.itertuples():
        if row.method == BASELINE:
            continue
        b = crossover_batch(result["crossover"], "no speculation", row.label)
        lines.append(f"- {row.label}: throughput at or below plain decoding from batch **{b}** on." if b else
                     f"- {row.label}: still ahead of plain decoding at batch {max(opts.batches)}.")
    lines += ["", "Every candidate tried: [candidates.csv](candidates.csv); each method's best per TP: "
              "[per_tp.csv](per_tp.csv); curves: [curves.csv](curves.csv); "
              "crossover: [crossover/crossover.csv](crossover/crossover.csv).", "",
              "Timings (s): " + ", ".join(f"{k} {v:.1f}" for k, v in result["timings"].items()), ""]
    return atomic.write_text(out / "README.md", "\n".join(lines))
