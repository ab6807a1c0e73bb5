"""What `python -m experiments.vllm_h100` writes: predictions.csv, loops.csv, the vLLM schedules, the
figures and report.md (calibration and every fitted value, the prediction tables, ours beside the
study-fit and the peer, best k per batch, where speculation stops paying, the deployment answer)."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from common import atomic
from common.plotting import palette, pyplot, readable_ticks
from papers.specdecode.deploy import DeployOptions, speculative_config

HEADLINE = [("eagle", 3), ("ngram", 3), ("ngram", 5)]       # the measured points: k = 3, and n-gram k = 5


def headline(predictions: pd.DataFrame) -> list[tuple[str, int]]:
    """The measured points among those predicted (`HEADLINE`), else every (method, k) predicted."""
    present = list(dict.fromkeys(map(tuple, predictions[["method", "k"]].itertuples(index=False))))
    return [p for p in HEADLINE if p in present] or present


def table(frame: pd.DataFrame, digits: int = 3) -> str:
    """A markdown table of `frame`."""
    def cell(v) -> str:
        if v is None or (isinstance(v, float) and v != v):
            return ""
        return f"{v:.{digits}f}" if isinstance(v, float) else str(v)

    cells = [[cell(v) for v in row] for row in frame.itertuples(index=False)]
    lines = ["| " + " | ".join(map(str, frame.columns)) + " |", "| " + " | ".join("---" for _ in frame.columns) + " |"]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in cells])


def side_by_side(predictions: pd.DataFrame, method: str, k: int) -> pd.DataFrame:
    """Speedups of (method, k): one row per (dataset, batch), a column per calibration."""
    rows = predictions[(predictions["method"] == method) & (predictions["k"] == k)]
    wide = rows.pivot_table(index=["dataset", "batch"], columns="calibration", values="predicted_speedup").reset_index()
    oracle = rows[rows["calibration"] == "ours"].set_index(["dataset", "batch"])["oracle_speedup"]
    wide["oracle (ours)"] = oracle.loc[list(zip(wide["dataset"], wide["batch"]))].to_numpy()
    return wide[[c for c in ("dataset", "batch", "ours", "study-fit", "peer", "oracle (ours)") if c in wide]]


def stops_paying(predictions: pd.DataFrame) -> pd.DataFrame:
    """Per (dataset, method, k, calibration): the first batch whose speedup is below 1 (blank: none)."""
    rows = []
    for key, group in predictions.groupby(["dataset", "method", "k", "calibration"]):
        group = group.sort_values("batch")
        losing = group[group["predicted_speedup"] < 1.0]
        rows.append(dict(zip(["dataset", "method", "k", "calibration"], key),
                         stops_paying_at=int(losing["batch"].iloc[0]) if len(losing) else None))
    return pd.DataFrame(rows)


def best_k(predictions: pd.DataFrame) -> pd.DataFrame:
    """Per (dataset, method, batch, calibration): the k of the highest speedup."""
    index = predictions.groupby(["dataset", "method", "batch", "calibration"])["predicted_speedup"].idxmax()
    best = predictions.loc[index, ["dataset", "method", "batch", "calibration", "k", "predicted_speedup"]]
    return best.rename(columns={"k": "best_k"}).reset_index(drop=True)


def plot_speedups(predictions: pd.DataFrame, calibration: str, path: Path) -> Path:
    """Speedup against batch per dataset, a line per method x k, each oracle dashed."""
    plt = pyplot()
    rows = predictions[predictions["calibration"] == calibration]
    datasets = list(dict.fromkeys(rows["dataset"]))
    series = [f"{m} k={k}" for m, k in rows[["method", "k"]].drop_duplicates().itertuples(index=False)]
    colours = palette(series)
    fig, axes = plt.subplots(1, len(datasets), figsize=(4.2 * len(datasets), 3.8), sharey=True, squeeze=False)
    for ax, dataset in zip(axes[0], datasets):
        for (method, k), group in rows[rows["dataset"] == dataset].groupby(["method", "k"]):
            group = group.sort_values("batch")
            label = f"{method} k={k}"
            ax.plot(group["batch"], group["predicted_speedup"], marker="o", color=colours[label], label=label)
            ax.plot(group["batch"], group["oracle_speedup"], ls="--", lw=1, color=colours[label], alpha=0.7)
        ax.axhline(1.0, color="dimgrey", lw=0.8)
        ax.set_xscale("log", base=2)
        readable_ticks(ax.xaxis, sorted(rows["batch"].unique()))
        ax.set_title(dataset)
        ax.set_xlabel("batch (requests in flight)")
    axes[0][0].set_ylabel(f"token-throughput speedup ({calibration}; dashed: oracle)")
    axes[0][-1].legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    return atomic.save_figure(path, fig)


def plot_calibrations(predictions: pd.DataFrame, path: Path) -> Path:
    """The measured points (k = 3; n-gram k = 5) by ours, the study-fit and the peer."""
    plt = pyplot()
    datasets = list(dict.fromkeys(predictions["dataset"]))
    styles = {"ours": "-", "study-fit": ":", "peer": "--"}
    points = headline(predictions)
    colours = palette([f"{m} k={k}" for m, k in points])
    fig, axes = plt.subplots(1, len(datasets), figsize=(4.2 * len(datasets), 3.8), sharey=True, squeeze=False)
    for ax, dataset in zip(axes[0], datasets):
        for method, k in points:
            for calibration, style in styles.items():
                group = predictions[(predictions["dataset"] == dataset) & (predictions["method"] == method)
                                    & (predictions["k"] == k) & (predictions["calibration"] == calibration)]
                group = group.sort_values("batch")
                ax.plot(group["batch"], group["predicted_speedup"], ls=style, marker=".", color=colours[f"{method} k={k}"],
                        label=f"{method} k={k} {calibration}")
        ax.axhline(1.0, color="dimgrey", lw=0.8)
        ax.set_xscale("log", base=2)
        readable_ticks(ax.xaxis, sorted(predictions["batch"].unique()))
        ax.set_title(dataset)
        ax.set_xlabel("batch (requests in flight)")
    axes[0][0].set_ylabel("speedup: ours (solid), study-fit (dotted), peer (dashed)")
    fig.suptitle("the measured points: " + ", ".join(f"{m} k={k}" for m, k in points), fontsize=9)
    axes[0][-1].legend(fontsize=6, loc="upper right")
    fig.tight_layout()
    return atomic.save_figure(path, fig)


def write_schedules(out: Path, best: pd.DataFrame) -> dict[str, dict]:
    """vllm_<dataset>.json: the speculative config of each dataset's schedule."""
    configs = {}
    for dataset, group in best.groupby("dataset", sort=False):
        configs[dataset] = speculative_config(group)
        atomic.write_json(out / f"vllm_{dataset}.json", configs[dataset])
    return configs


def calibration_lines(profile) -> list[str]:
    """Every fitted value of the Profile with its source, bound and warnings."""
    fit = profile.provenance.latency_fit
    grid, engine = fit["grid"], fit["engine"]
    cal = {m: c.to_dict() for m, c in profile.engine.methods.items()}
    lines = [
        f"- bw_eff **{grid['bw_eff']}** (in (0, 1]): weight streaming of the project's CUDA-graph forwards, seven "
        f"architectures at one token regressed on weight bytes and layers (their unfused kernels: "
        f"{grid['project_layer_s'] * 1e6:.0f} us a layer, not carried over); the KV read at batch 8 reaches "
        f"{grid['kv_bw_eff_batch8']} of the datasheet (a check).",
        f"- flops_eff **{grid['flops_eff']}** (in (0, 1]) and corner p **{grid['corner']}** (1 = memory and compute "
        f"times add, infinity = the max) on llama-3-8b at context 0, 1-2,048 tokens: median |error| "
        f"{grid['errors']['llama-3-8b ctx 0 median |error|']:.1%}, worst {grid['errors']['llama-3-8b ctx 0 worst error']:+.1%}.",
        f"- plain step fixed cost **{engine['overhead_s'] * 1e3:.3f} ms** (in [0, 5 ms]) = the published batch-1 TPOT "
        f"7.07 ms less the roofline forward {engine['plain_forward_s'] * 1e3:.3f} ms and one row's host work.",
        f"- EAGLE-3 fixed cost a step **{engine['speculation_s'] * 1e3:.3f} ms** and drafter forward floor (launch_s) "
        f"**{engine['drafter_launch_s'] * 1e3:.3f} ms** (each in [0, 5 ms]) on the published EAGLE-3 steps at K = 2-7: "
        f"errors {', '.join(f'{e:+.1%}' for e in engine['eagle_steps']['error'])}.",
        f"- ASSUMED (no published figure): host work {cal['ar']['overhead_per_row_s'] * 1e6:.0f} us a request a step; "
        f"n-gram: {cal['prompt_lookup']['overhead_per_row_s'] * 1e6 - cal['ar']['overhead_per_row_s'] * 1e6:.0f} us a "
        f"request and {cal['prompt_lookup']['overhead_per_ctx_token_s'] * 1e9:.1f} ns a context token of search, "
        f"{(cal['prompt_lookup']['overhead_s'] - cal['ar']['overhead_s']) * 1e3:.2f} ms a step of rejection sampling."]
    lines += [f"- warning: {w}" for w in profile.provenance.warnings] or ["- no fitted value on its bound."]
    return lines


def write_report(out: Path, predictions: pd.DataFrame, loops: pd.DataFrame, best: pd.DataFrame,
                 capacity: pd.DataFrame, profile, meta: dict, deploy: DeployOptions) -> Path:
    """Every output file and report.md."""
    atomic.write_csv(out / "predictions.csv", predictions)
    atomic.write_csv(out / "loops.csv", loops)
    configs = write_schedules(out, best)
    figures = [plot_speedups(predictions, "ours", out / "speedup_ours.png"),
               plot_speedups(predictions, "study-fit", out / "speedup_study_fit.png"),
               plot_calibrations(predictions, out / "calibrations.png")]
    atomic.write_json(out / "inputs.json", meta)
    stops, bests = stops_paying(predictions), best_k(predictions)
    sanity = meta["sanity"]
    text = ["# vLLM 0.10.1 on one H100: EAGLE-3 and n-gram speculation at batch 1-128, predicted",
            "", f"Command: `{meta['command']}` ({meta['seconds']:.0f} s on {meta['cores']} cores). Inputs and their "
            "sha256: `inputs.json`. Profile: `" + meta["profile"] + "`.", "",
            "## Protocol", "", meta["protocol"], "",
            "## Calibration (ours)", "", *calibration_lines(profile), "",
            "Second calibration, `study-fit`: the same schedules priced by the study's step-time fit "
            "(`calibrate.vllm.study_fit`). `peer`: the study's own simulator re-implemented (`papers.specdecode.peer`: "
            "its fit, its n-gram matching probabilities, B copies of one request).", "",
            "Sanity checks (published figures that are not the study's):", "",
            *[f"- {line}" for line in sanity], "",
            "## The measured points (k = 3, and n-gram k = 5): speedup over plain decoding", ""]
    for method, k in headline(predictions):
        text += [f"### {method} k={k}", "", table(side_by_side(predictions, method, k)), ""]
    text += ["## Figures", "", *[f"![{p.stem}]({p.name})" for p in figures], "",
             "## Best k per batch (ours)", "",
             table(bests[bests["calibration"] == "ours"].pivot_table(index=["dataset", "method"], columns="batch",
                                                                     values="best_k").reset_index(), 0), "",
             "## Where each stops paying (first batch with speedup < 1; blank: none up to 128)", "",
             table(stops.pivot_table(index=["dataset", "method", "k"], columns="calibration", values="stops_paying_at",
                                     aggfunc="first").reset_index(), 0), "",
             "## Deployment (ours)", "",
             f"SLO: median TPOT <= {deploy.slo_tpot_p50_ms:g} ms; target {deploy.target_rate:g} requests/s; "
             f"{deploy.gpu_hour_price:.2f} USD per GPU-hour. `within_slo_to`: the largest batch simulated whose median "
             "TPOT meets the SLO; where it is the largest simulated, the SLO still holds there and the rate is a lower "
             "bound.", "", table(capacity, 3), "",
             "Best configuration per batch and its vLLM `--speculative-config` (`vllm_<dataset>.json`):", "",
             table(best, 3), ""]
    for dataset, config in configs.items():
        text += [f"- {dataset}: `{json.dumps(config.get('speculative_config'))}`"]
    text += ["", "## Noticed and left", "", *[f"- {line}" for line in meta["notes"]], ""]
    return atomic.write_text(out / "report.md", "\n".join(text))
