"""experiments.fidelity's judgement: predictions beside the measured repeats (fidelity.csv), the
search regret, the predicted-vs-measured plot and report.md."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from costmodel.uncertainty import Z90, verdict
from methods import BASELINE
from common import atomic
from common.errors import InputError
from campaigns.measure import rates
from sweep.markdown import md_table
from traces.drift import run_factors


# ------------------------------------------------------------------------------ compare

def pool_runs(runs: pd.DataFrame, others: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """`runs` and other runs of the same command as one measurement: a `run` column (0: this one,
    then `others` in order) and repeat and pair ids renumbered past the earlier runs' so the
    repeats stay apart and every generation keeps its own plain-decoding partner. Another run must
    have measured the same configurations on the same prompts for as many tokens."""
    def key(frame: pd.DataFrame) -> tuple:
        if "batch" in frame:        # batch runs (`Bench.measure_batches`): each decodes its batch's prompts at once
            return (set(zip(frame["dataset"], frame["candidate"], frame["batch"])),
                    set(zip(frame["batch"], frame["prompts"])), int(frame["tokens"].max()))
        return (set(zip(frame["dataset"], frame["candidate"])), set(frame["prompt_id"]), int(frame["tokens"].max()))

    mine = key(runs)
    pooled = [runs.assign(run=0)]
    for index, (name, other) in enumerate(others.items(), start=1):
        for theirs, ours, what in zip(key(other), mine, ("configurations", "prompts", "tokens per generation")):
            if theirs != ours:
                raise InputError(f"--pool {name}: measured other {what} than this run; "
                                 "pool only runs of the same command")
        last = pooled[-1]
        shifted = other.assign(run=index, repeat=other["repeat"] + int(last["repeat"].max()) + 1)
        if "pair" in other and "pair" in last:
            shifted["pair"] = np.where(other["pair"] >= 0, other["pair"] + int(last["pair"].max()) + 1, -1)
        pooled.append(shifted)
    return pd.concat(pooled, ignore_index=True)


def run_spread(per: pd.DataFrame, by: list[str] | None = None) -> pd.Series:
    """Per (dataset, candidate) (`by`): half the range of the runs' own median speedups, relative to
    their mean (0 for a single run): how far the same command measured apart from one run to the next."""
    by = by or ["dataset", "candidate"]
    medians = per.groupby([*by, "run"])["speedup"].median().groupby(level=list(range(len(by))))
    return ((medians.max() - medians.min()) / 2 / medians.mean()).rename("run_spread")


def compare(pred: pd.DataFrame, runs: pd.DataFrame, error: float) -> pd.DataFrame:
    """fidelity.csv: predictions beside the medians of the measured repeats (of every pooled run); per
    batch too where the runs were batches (`campaigns.measure.Bench.measure_batches`: a run decodes every
    prompt at once, so its noise is the spread over repeats, and tokens per step are per row)."""
    runs = runs if "run" in runs else runs.assign(run=0)
    by = ["dataset", "candidate", *(["batch"] if "batch" in runs else [])]
    keys = [*by, "repeat"]          # a repeat belongs to one run (`pool_runs`)
    per = rates(runs).merge(runs[keys + ["run"]].drop_duplicates(), on=keys, how="left")
    if "prompt_id" in runs:
        per_prompt = runs.groupby(["dataset", "candidate", "prompt_id"]).agg(tokens=("tokens", "sum"),
                                                                             steps=("steps", "sum"))
        tps = (per_prompt["tokens"] / per_prompt["steps"]).groupby(level=[0, 1])
        accept_se = (tps.std(ddof=1) / np.sqrt(tps.count()) / tps.mean()).rename("acceptance_se").reset_index()
    else:
        accept_se = per[by].drop_duplicates().assign(acceptance_se=0.0)
    m = per.groupby(by).agg(
        measured_speedup=("speedup", "median"), lo=("speedup", "min"), hi=("speedup", "max"),
        measured_tokens_per_s=("tokens_per_s", "median"), measured_e2e_tokens_per_s=("e2e_tokens_per_s", "median"),
        measured_tokens_per_step=("tokens_per_step", "median"),
        seconds=("seconds", "median"), steps=("steps", "median"), n=("repeat", "nunique"),
        runs=("run", "nunique")).reset_index()
    m["measured_step_s"] = m["seconds"] / m["steps"]
    m["spread"] = (m["hi"] - m["lo"]) / 2 / m["measured_speedup"]
    m = m.merge(accept_se, on=[c for c in by if c in accept_se], how="left")
    m = m.merge(run_spread(per, by).reset_index(), on=by, how="left")
    out = pred.merge(m, on=by, how="inner")
    out["acceptance_se"] = out["acceptance_se"].fillna(0.0)
    out["rel_error"] = out["predicted_speedup"] / out["measured_speedup"] - 1.0
    out["sim_rel_error"] = out["simulated_speedup"] / out["measured_speedup"] - 1.0
    out["sim_vs_closed"] = out["simulated_speedup"] / out["predicted_speedup"] - 1.0
    if "sim_se" not in out:             # predicted before the simulator reported its seed noise
        out["sim_se"] = np.nan
    out["acceptance_error"] = out["predicted_tokens_per_step"] / out["measured_tokens_per_step"] - 1.0
    # the speedup the Profile predicts with the measured tokens per step: its latency error alone
    # (measured: plain step over this step, as the speedup measured it, i.e. against the partners)
    place = [c for c in by if c != "candidate"]
    ar_pred = out.loc[out["method"] == BASELINE].set_index(place)["predicted_step_s"]
    ar_step = ar_pred.reindex(pd.MultiIndex.from_frame(out[place]) if len(place) > 1 else out[place[0]]).to_numpy()
    out["latency_error"] = ((ar_step / out["predicted_step_s"])
                            / (out["measured_speedup"] / out["measured_tokens_per_step"]) - 1.0)
    if "predicted_lo" in out:
        out["in_interval"] = out["measured_speedup"].between(out["predicted_lo"], out["predicted_hi"])
    out["noise"] = np.hypot(out["spread"], out["acceptance_se"])
    out["within_2x_noise"] = out["rel_error"].abs() <= 2 * out["noise"]
    out["predicted_verdict"] = verdict(out["predicted_speedup"], error)
    out["measured_verdict"] = np.where(out["measured_speedup"] > 1, "speculate", "don't")
    out.loc[out["method"] == BASELINE, ["predicted_verdict", "measured_verdict"]] = "baseline"
    out["verdict_flip"] = ((out["predicted_verdict"] != "tie") & (out["predicted_verdict"] != "baseline")
                           & (out["predicted_verdict"] != out["measured_verdict"]))
    keep = ["dataset", "method", "candidate", *(["batch"] if "batch" in by else []), "predicted_speedup", "simulated_speedup", "measured_speedup",
            "rel_error", "sim_rel_error", "sim_vs_closed", "sim_se", "spread", "run_spread", "acceptance_se", "noise",
            "within_2x_noise", "n", "runs",
            "predicted_tokens_per_step", "measured_tokens_per_step", "acceptance_error", "predicted_step_s",
            "measured_step_s", "latency_error", "measured_tokens_per_s", "measured_e2e_tokens_per_s", "ctx_len", "predicted_verdict",
            "measured_verdict", "verdict_flip", "predicted_lo", "predicted_hi", "in_interval", "n_prompts", "prompts_to_confirm",
            "prompt_half"]
    return out[[c for c in keep if c in out]]


def regret(fid: pd.DataFrame) -> pd.DataFrame:
    """Per dataset (and batch, where measured in batches): the configuration the Profile picks (highest predicted speedup, ar included)
    against the best measured one; and the pick that follows the verdicts (the highest predicted
    among those called "speculate", else plain decoding: a tie does not speculate)."""
    rows = []
    by = ["dataset", *(["batch"] if "batch" in fid else [])]
    for key, g in fid.groupby(by):
        dataset, *batch = key if isinstance(key, tuple) else (key,)
        pick = g.loc[g["predicted_speedup"].idxmax()]
        best = g.loc[g["measured_speedup"].idxmax()]
        sure = g[(g["predicted_verdict"] == "speculate") | (g["method"] == BASELINE)]
        by_verdict = sure.loc[sure["predicted_speedup"].idxmax()]
        rows.append({"dataset": dataset, **({"batch": int(batch[0])} if batch else {}),
                     "picked": pick["candidate"], "picked_measured": pick["measured_speedup"],
                     "best": best["candidate"], "best_measured": best["measured_speedup"],
                     "regret": 1 - pick["measured_speedup"] / best["measured_speedup"],
                     "verdict_pick": by_verdict["candidate"],
                     "verdict_regret": 1 - by_verdict["measured_speedup"] / best["measured_speedup"]})
    return pd.DataFrame(rows)


def plot(fid: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.2, 6))
    for (dataset, marker) in zip(sorted(fid["dataset"].unique()), "os^D"):
        g = fid[fid["dataset"] == dataset]
        for method, h in g.groupby("method"):
            ax.errorbar(h["measured_speedup"], h["predicted_speedup"], xerr=h["noise"] * h["measured_speedup"],
                        fmt=marker, ms=5, alpha=0.8, label=f"{method} ({dataset})", color=f"C{sorted(fid['method'].unique()).index(method)}")
    lo = 0.95 * min(fid["measured_speedup"].min(), fid["predicted_speedup"].min())
    hi = 1.05 * max(fid["measured_speedup"].max(), fid["predicted_speedup"].max())
    ax.plot([lo, hi], [lo, hi], "k-", lw=1, label="y = x")
    ax.axhline(1, color="grey", lw=0.5, ls=":")
    ax.axvline(1, color="grey", lw=0.5, ls=":")
    ax.set(xlim=(lo, hi), ylim=(lo, hi), xlabel="measured speedup (held-out prompts)",
           ylabel="predicted speedup (Profile alone)", title="Predicted vs measured speedup")
    ax.legend(fontsize=6, ncol=2, loc="upper left")
    atomic.save_figure(path, fig)
    plt.close(fig)


def drift(fid: pd.DataFrame, profile, runs: pd.DataFrame | None = None) -> list[str]:
    """The plain-decoding step of the Profile's calibration window beside this run's, and the
    machine's drift within this run (from the plain decoding paired with each generation)."""
    reference = profile.engine.reference
    lines = []
    if runs is not None and "prompt_id" not in runs and "batch" in runs:    # a batch run decodes every prompt
        runs = runs.assign(prompt_id="batch " + runs["batch"].astype(str))
    factors = run_factors(runs) if runs is not None and "decode_s" in runs else pd.Series(dtype=float)
    if not factors.empty:
        lines.append(f"- within this run, the plain decoding beside each generation ran at {factors.quantile(0.1):.2f}-"
                     f"{factors.quantile(0.9):.2f}x (p10-p90) of its prompt's median step, worst "
                     f"{factors.min():.2f}-{factors.max():.2f}x over {len(factors)} pairs: each speedup divides "
                     "by its own pair's")
    for r in fid[fid["method"] == BASELINE].itertuples():
        ref = reference.get(r.dataset)
        batch = getattr(r, "batch", None)
        if ref and batch is not None:         # a batch calibration keeps its plain step per batch
            window = ref.get("by_batch", {}).get(str(int(batch)))
            if window:
                lines.append(f"- {r.dataset}, batch {int(batch)}: plain step {1e3 * window:.1f} ms in the calibration "
                             f"window (its prompts); here {1e3 * r.measured_step_s:.1f} ms measured, "
                             f"{1e3 * r.predicted_step_s:.1f} ms predicted at context {r.ctx_len:.0f}")
        elif ref:
            lines.append(f"- {r.dataset}: plain step {1e3 * ref['ar_step_s']:.1f} ms at context {ref['ctx_len']:.0f} in the "
                         f"calibration window; here {1e3 * r.measured_step_s:.1f} ms measured, "
                         f"{1e3 * r.predicted_step_s:.1f} ms predicted at context {r.ctx_len:.0f}")
    return lines or ["- the Profile records no calibration-window plain step (calibrated before references were kept)"]


def agreement(spec: pd.DataFrame) -> str:
    """The simulator against the closed form (one model, two evaluations), judged against the
    simulator's own seed noise."""
    gap, se = spec["sim_vs_closed"].abs(), spec["sim_se"]
    line = f"- simulator vs closed form: median |gap| {100 * gap.median():.1f}%, max {100 * gap.max():.1f}%"
    if se.notna().all():
        line += (f"; within 1%: {int((gap <= 0.01).sum())}/{len(spec)}, within 2 seed standard errors (median "
                 f"{100 * se.median():.2f}%): {int((gap <= 2 * se).sum())}/{len(spec)}")
    return line


WINS = 1.05          # a configuration "wins" when it measures above this speedup: worth deploying
MEDIAN_ABS_NORMAL = 0.6745   # the median of |x| for x standard normal: a median |error| in standard deviations


def winners(spec: pd.DataFrame) -> list[str]:
    """Where speculation pays: per dataset how many configurations measure above WINS and the best,
    and the closed form's error on those alone (the regime a deployment choice is made in)."""
    won = spec[spec["measured_speedup"] > WINS]
    per = ", ".join(f"{d} {int((g['measured_speedup'] > WINS).sum())}/{len(g)} (best {g['measured_speedup'].max():.2f}x)"
                    for d, g in spec.groupby("dataset", sort=False))
    line = f"- measured above {WINS}x: {len(won)}/{len(spec)} ({per})"
    if len(won):
        err = won["rel_error"].abs()
        line += (f"; closed form on those: median |error| {100 * err.median():.1f}%, worst {100 * err.max():.1f}%, "
                 f"within 2x the noise {int(won['within_2x_noise'].sum())}/{len(won)}")
    return [line]


def read_run(out: Path) -> dict:
    """run.json of the run in `out` (minutes, argv; "repredicted": the commit that predicted again), or {}."""
    path = out / "run.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def command_lines(args) -> list[str]:
    """The command that measured (from run.json under --report-only), and the one that wrote this report if another."""
    this = " ".join(sys.argv[1:] if args.argv is None else args.argv)
    measured = " ".join(read_run(args.out).get("argv") or []) if args.report_only else this
    lines = [f"- Command: `python -m experiments.fidelity {measured or '(not recorded by this run)'}`"]
    if measured != this:
        lines.append(f"- Report written again from the run's files: `python -m experiments.fidelity {this}`")
    return lines


def pooled(spec: pd.DataFrame, args) -> list[str]:
    """Where other runs of the command were pooled (--pool): which, and how far the runs measured
    the same configurations apart."""
    if int(spec["runs"].max()) < 2:
        return []
    moved = spec["run_spread"]
    return [f"- Measured in {int(spec['runs'].max())} runs of this command, pooled (`--pool` "
            f"{' '.join(str(f) for f in getattr(args, 'pool', None) or [])}): each speedup is the median over "
            f"every run's repeats and its spread spans them all; the runs' own medians sit apart by "
            f"median {100 * moved.median():.1f}%, at most {100 * moved.max():.1f}% (run_spread, half their range)"]


def first_predictions(args, runs: pd.DataFrame) -> list[str]:
    """Where the predictions were made again after the measurement (--repredict): a line saying
    so, with the error of the predictions made before it."""
    when = read_run(args.out).get("repredicted")     # a fresh run's run.json has none: a file left by
    path = args.out / "predictions_first.csv"        # another run is not this one's
    if not when or not path.is_file():
        return []
    first = compare(pd.read_csv(path), runs, args.error)
    err = first.loc[first["method"] != BASELINE, "rel_error"].abs()
    return [f"- Predictions made again after the measurement (`--repredict` at commit {when}), "
            f"from a Profile still calibrated on other prompts; the predictions made before it "
            f"(predictions_first.csv) erred by median {100 * err.median():.1f}%, worst {100 * err.max():.1f}%"]


def length_lines(runs: pd.DataFrame, args) -> list[str]:
    """How long the answers ran against the length the predictions priced (`--sim-tokens`): an answer that
    ends at the target's end of sequence is shorter than asked, and the prediction does not know it."""
    if runs is None or not {"method", "prompt_id", "tokens"} <= set(runs.columns):
        return []
    answers = runs[runs["method"] == BASELINE].groupby("prompt_id")["tokens"].max()
    priced = int(args.sim_tokens)
    short = answers[answers < priced]
    if short.empty:
        return []
    return [f"- answers: {len(short)} of {len(answers)} prompts' plain-decoding answers ended before the {priced} "
            f"tokens priced ({int(short.min())}-{int(short.max())} tokens, the target's end of sequence): their "
            "speedups were measured over shorter answers than the prediction priced"]


def interval_lines(spec: pd.DataFrame) -> list[str]:
    """How often the measured speedup fell in its predicted 90% interval, how wide the intervals
    were, and the prompts a run needs to tell the configurations from plain decoding."""
    if "in_interval" not in spec:
        return []
    half = (spec["predicted_hi"] - spec["predicted_lo"]) / 2 / spec["predicted_speedup"]
    need = spec["prompts_to_confirm"].dropna()
    return [f"- within the predicted 90% interval (the Profile's held-out error and its calibration prompts' spread, "
            f"for this run's prompts): {int(spec['in_interval'].sum())}/{len(spec)}; median half-width "
            f"{100 * half.median():.1f}%"
            + (f"; prompts a run needs to tell a configuration from plain decoding (90%): median {need.median():.0f}, "
               f"{int((need <= spec.loc[need.index, 'n_prompts']).sum())}/{len(need)} within this run's"
               if len(need) and "n_prompts" in spec else "")
            + sampling_words(spec)]


def sampling_words(spec: pd.DataFrame) -> str:
    """The share of the intervals that which prompts were run gives alone (`prompt_half`: this run's and
    the calibration's, from the Profile's prompt spread of seconds per token) and the median |error| it
    alone implies: set beside the run's own median error, it says whether the intervals are wider than
    the misses need."""
    sampled = spec["prompt_half"].dropna() if "prompt_half" in spec else pd.Series(dtype=float)
    if not len(sampled):
        return ""
    implied = MEDIAN_ABS_NORMAL / Z90 * sampled.median()
    return (f"; of it, which prompts were run gives {100 * sampled.median():.1f}% alone (median; this run's and the "
            f"calibration's, from the Profile's prompt spread of seconds per token), a median |error| of "
            f"{100 * implied:.1f}% by itself")


def report(fid: pd.DataFrame, reg: pd.DataFrame, args, profile, prompts: list[str], minutes: float,
           runs: pd.DataFrame, notes: list[str] = ()) -> str:
    spec = fid[fid["method"] != BASELINE]
    err, sim = spec["rel_error"].abs(), spec["sim_rel_error"].abs()
    lines = [
        "# Fidelity: predicted from the Profile vs measured on held-out prompts", "",
        f"- Profile: `{args.profile}` ({profile.name}); calibration prompts (not used here): "
        f"{', '.join(profile.provenance.calibration_prompts)}",
        f"- Validation prompts (held out): {', '.join(prompts)}; {args.max_new_tokens} new tokens each, greedy",
        (f"- {spec['candidate'].nunique()} speculative configurations + ar at batches "
         f"{', '.join(str(int(b)) for b in sorted(fid['batch'].unique()))}" if "batch" in fid
         else f"- {len(spec)} speculative configurations + ar")
        + f", {args.repeats} interleaved repeats"
        + ((", every batch run paired with plain decoding of the same prompts at the same batch" if "batch" in runs
            else ", every generation paired with plain decoding of its prompt")
           if "pair" in runs and (runs["pair"] >= 0).any() else "")
        + ", "
        f"{args.threads} threads; measured in "
        + (f"{minutes:.1f} min" if minutes == minutes else "(time not recorded by this run)"),
        *command_lines(args), *pooled(spec, args),
        *notes, "", "## Summary", "",
        f"- closed form: median |error| {100 * err.median():.1f}%, worst {100 * err.max():.1f}%",
        f"- simulator: median |error| {100 * sim.median():.1f}%, worst {100 * sim.max():.1f}%",
        agreement(spec),
        f"- of which acceptance (tokens/step): median |error| {100 * spec['acceptance_error'].abs().median():.1f}%, "
        f"latency (step time): median |error| {100 * spec['latency_error'].abs().median():.1f}%",
        *length_lines(runs, args),
        f"- within 2x the measurement noise: {int(spec['within_2x_noise'].sum())}/{len(spec)}",
        *interval_lines(spec),
        *winners(spec),
        f"- verdict flips (predicted speculate/don't against measured): {int(spec['verdict_flip'].sum())}; "
        f"ties (within the Profile's held-out error {100 * args.error:.1f}%): {int((spec['predicted_verdict'] == 'tie').sum())}",
        "", "## The baseline across windows", "", *drift(fid, profile, runs),
        "", "## Search regret", "", md_table(reg, list(reg.columns), ".3f"), "",
        "## Every configuration", "",
        md_table(fid, [c for c in fid.columns if c != "ctx_len"], ".3f"), "",
        "Columns: decode speedups over plain decoding: over each generation's own ar partner (the same prompt, run "
        "right beside it) where the runs are paired, else over ar of the same repeat (the steps' own times: the prompt's prefill, the same "
        "work for every method and priced by no step model, is left out; measured_e2e_tokens_per_s includes it); rel_error = predicted / measured - 1; spread = half the "
        "range over repeats (relative, over every pooled run); run_spread = half the range of the pooled runs' own "
        "medians (relative; 0 for one run); acceptance_se = standard error of tokens per step over prompts "
        "(relative); noise = both combined; latency_error = the error with the measured tokens per step; "
        "sim_vs_closed = simulated / closed form - 1; sim_se = the simulator's seed standard error (relative).",
    ]
    return "\n".join(lines) + "\n"
