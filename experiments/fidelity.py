"""`python -m experiments.fidelity`: predict from a Profile alone, then measure, on held-out prompts.

    python -m experiments.fidelity --profile data/profiles/smollm2-135m-cpu.json --target smollm2 \\
        --prompts mtbench:7-10,humaneval:7-10 --out out/fidelity

1. Checks before any work: the Profile's calibration prompts (provenance) must not overlap the
   prompts given (it says which were used); the target must be the Profile's (architecture,
   hardware, dtype).
2. Predictions first, from the Profile alone, written to predictions.csv before anything is
   measured: per dataset of the prompts and configuration, the closed form (experiments.scoring,
   the engine-calibrated step cost) and the simulator, priced at the prompts' own context (their
   mean length plus half the new tokens).
3. Measurement (experiments.measure): warm-up, configurations in rotating order per repeat,
   pinned threads, every generation beside plain decoding of the same prompt (its pair: the
   machine's drift cancels, traces.drift); per configuration the median over repeats of the
   speedup over its partners, its spread (half the range over repeats, relative) and the sampling
   error of the acceptance over prompts.
4. fidelity.csv, report.md and fidelity.png (predicted against measured, with y = x): the error of
   every configuration split into acceptance (tokens per step) and latency (step time), the
   search regret (measured speedup of the configuration the Profile would pick against the best
   measured) and whether the speculate-or-not verdict agreed everywhere.

The default configurations (`--configs` overrides: a file of lines "label @drafter") come from
each method's own search space on each Profile drafter: the predicted best and configurations
spread evenly over the predicted speedups, so the set spans good and bad choices of all methods.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

import methods
from common import atomic
from common.errors import CliParser, InputError, cli_entry
from common.rundir import add_overwrite_option, start_run
from experiments.measure import Bench, Candidate, decode_seconds, parse_candidate, rates
from experiments.report import _fmt_table

PER_SETUP = 4            # default configurations per (method, drafter)
SIM_REPEATS = 200        # default simulated streams per configuration (seed noise ~0.5%)
MAX_VERIFY = 64          # default configurations verify at most this many tokens per step


# ------------------------------------------------------------------------------ what to measure

def dataset_of(profile, prompt_set: str) -> str:
    """The Profile dataset a prompt set's prompts belong to ('mtbench' -> 'mt-bench')."""
    found = profile.dataset_named(prompt_set)
    if found is None:
        raise InputError(f"prompt set '{prompt_set}' matches no dataset of profile '{profile.name}' "
                         f"(has: {', '.join(profile.datasets())})")
    return found


def default_candidates(profile, dataset: str, ctx_len: float, per_setup: int = PER_SETUP,
                       new_tokens: int | None = None) -> list[Candidate]:
    """ar, then per method and Profile drafter: the predicted best of its search space and
    `per_setup` - 1 more evenly spread over its predicted speedups down to the worst (verifying
    <= MAX_VERIFY tokens), predicted for generations of `new_tokens`."""
    from experiments import scoring
    from methods.spec import engine_config

    setting = scoring.Setting(temperature=0.0, ctx_len=int(round(ctx_len)), dataset=dataset, new_tokens=new_tokens)
    out = [Candidate(methods.get("ar").config())]
    for spec in methods.specs():
        if not spec.sweep:
            continue
        try:
            setups = profile.setups_for(spec, temperature=0.0, dataset=dataset)
        except InputError:
            continue
        for setup in setups:
            spec_of = setup.drafter_spec
            loadable, modelless = "file" in spec_of, not any(k.endswith("model") for k in spec_of)
            if setup.drafter and not (loadable or modelless):   # a model this machine cannot load
                continue
            scored = scoring.score(setup, spec.name, spec.space(setup), setting)
            scored = scored[scored["verified_per_step"] <= MAX_VERIFY].sort_values("speedup", ascending=False)
            picks = np.unique(np.linspace(0, len(scored) - 1, per_setup).round().astype(int))
            drafter = setup.drafter if loadable else None     # a model-less entry names acceptance only
            for config in spec.configs_of(scored.iloc[picks]):
                engine = engine_config(config, setup.drafter_spec) if drafter else config
                out.append(Candidate(engine, drafter))
    return out


def read_candidates(path: Path) -> list[Candidate]:
    if not path.is_file():
        raise InputError(f"--configs file not found: {path}")
    lines = [ln.split("#")[0].strip() for ln in path.read_text().splitlines()]
    cands = [parse_candidate(ln) for ln in lines if ln]
    if not any(c.method == "ar" for c in cands):
        cands.insert(0, Candidate(methods.get("ar").config()))
    return cands


def check_target(profile, bench: Bench) -> None:
    """The Profile must describe the measured target: architecture, hardware and dtype."""
    from traces.timing import DTYPE_NAMES

    model = bench.target.model
    arch = profile.models.get(profile.target, {})
    have = {"n_layers": model.config.num_layers, "hidden": model.config.hidden_size, "vocab": model.config.vocab_size}
    for key, value in have.items():
        if key in arch and int(arch[key]) != int(value):
            raise InputError(f"profile '{profile.name}' is for target '{profile.target}' with {key} {arch[key]}; "
                             f"the measured target has {value}")
    hardware = "CPU" if model.device.type == "cpu" else None
    if hardware and profile.hardware != hardware:
        raise InputError(f"profile '{profile.name}' is for hardware '{profile.hardware}'; this run measures on {hardware}")
    dtype = DTYPE_NAMES.get(model.dtype, str(model.dtype))
    if profile.dtype != dtype:
        raise InputError(f"profile '{profile.name}' is for dtype {profile.dtype}; the measured target runs {dtype}")


def check_held_out(profile, prompt_ids: list[str]) -> None:
    used = profile.provenance.get("calibration_prompts")
    if used is None:
        raise InputError(f"profile '{profile.name}' does not list its calibration prompts (provenance."
                         "calibration_prompts): held-out prompts cannot be checked")
    overlap = sorted(set(used) & set(prompt_ids))
    if overlap:
        raise InputError(f"prompts {', '.join(overlap)} were used to calibrate '{profile.name}' (its calibration "
                         f"prompts: {', '.join(used)}); choose others")


# ------------------------------------------------------------------------------ predict

def predict(profile, cands: list[Candidate], dataset: str, ctx_len: float, sim_tokens: int, seed: int,
            sim_repeats: int = SIM_REPEATS) -> pd.DataFrame:
    """Closed form and simulator for each candidate on `dataset`, at `ctx_len`, from the Profile
    alone; the simulator runs `sim_repeats` streams of `sim_tokens` centred on `ctx_len` (the
    measured workload: prompts of the mean length, the measured new tokens), and the closed form
    prices generations of the same length."""
    from experiments import scoring
    from methods.spec import priced_config

    setting = scoring.Setting(temperature=0.0, ctx_len=int(round(ctx_len)), dataset=dataset, new_tokens=sim_tokens)
    from costmodel.step import step_seconds
    from methods.spec import plain_shape

    plain_s = float(step_seconds(profile.seconds, plain_shape(profile), float(ctx_len))[0])
    rows = []
    for i, cand in enumerate(cands):
        if cand.method == "ar":          # the baseline: one target step per token
            rows.append({"dataset": dataset, "candidate": cand.label, "method": "ar", "predicted_speedup": 1.0,
                         "predicted_tokens_per_step": 1.0, "predicted_step_s": plain_s, "simulated_speedup": 1.0,
                         "sim_se": 0.0, "ctx_len": float(ctx_len)})
            continue
        spec = methods.get(cand.method)
        setup = profile.setups_for(spec, temperature=0.0, dataset=dataset, drafter=cand.drafter)[0]
        priced = priced_config(cand.config, setup.drafter_spec) if cand.drafter else cand.config
        scored = scoring.score(setup, cand.method, spec.frame_of([priced]), setting)
        sim = scoring.simulate_task(scoring.SimTask(profile.to_dict(), cand.method, scoring.sim_config(scored),
                                                    setting, seed + i, sim_tokens, sim_repeats))
        rows.append({"dataset": dataset, "candidate": cand.label, "method": cand.method,
                     "predicted_speedup": float(scored["speedup"].iloc[0]),
                     "predicted_tokens_per_step": float(scored["tokens_per_step"].iloc[0]),
                     "predicted_step_s": float(scored["step_s"].iloc[0]),
                     "simulated_speedup": sim["sim_speedup"], "sim_se": sim["sim_se"], "ctx_len": float(ctx_len)})
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------ compare

def compare(pred: pd.DataFrame, runs: pd.DataFrame, error: float) -> pd.DataFrame:
    """fidelity.csv: predictions beside the medians of the measured repeats."""
    per = rates(runs)
    per_prompt = runs.groupby(["dataset", "candidate", "prompt_id"]).agg(tokens=("tokens", "sum"), steps=("steps", "sum"))
    tps = (per_prompt["tokens"] / per_prompt["steps"]).groupby(level=[0, 1])
    accept_se = (tps.std(ddof=1) / np.sqrt(tps.count()) / tps.mean()).rename("acceptance_se")
    m = per.groupby(["dataset", "candidate"]).agg(
        measured_speedup=("speedup", "median"), lo=("speedup", "min"), hi=("speedup", "max"),
        measured_tokens_per_s=("tokens_per_s", "median"), measured_e2e_tokens_per_s=("e2e_tokens_per_s", "median"),
        measured_tokens_per_step=("tokens_per_step", "median"),
        seconds=("seconds", "median"), steps=("steps", "median"), n=("repeat", "nunique")).reset_index()
    m["measured_step_s"] = m["seconds"] / m["steps"]
    m["spread"] = (m["hi"] - m["lo"]) / 2 / m["measured_speedup"]
    m = m.merge(accept_se.reset_index(), on=["dataset", "candidate"], how="left")
    out = pred.merge(m, on=["dataset", "candidate"], how="inner")
    out["acceptance_se"] = out["acceptance_se"].fillna(0.0)
    out["rel_error"] = out["predicted_speedup"] / out["measured_speedup"] - 1.0
    out["sim_rel_error"] = out["simulated_speedup"] / out["measured_speedup"] - 1.0
    out["sim_vs_closed"] = out["simulated_speedup"] / out["predicted_speedup"] - 1.0
    if "sim_se" not in out:             # predicted before the simulator reported its seed noise
        out["sim_se"] = np.nan
    out["acceptance_error"] = out["predicted_tokens_per_step"] / out["measured_tokens_per_step"] - 1.0
    # the speedup the Profile predicts with the measured tokens per step: its latency error alone
    # (measured: plain step over this step, as the speedup measured it, i.e. against the partners)
    ar_pred = out.loc[out["method"] == "ar"].set_index("dataset")["predicted_step_s"]
    out["latency_error"] = ((out["dataset"].map(ar_pred) / out["predicted_step_s"])
                            / (out["measured_speedup"] / out["measured_tokens_per_step"]) - 1.0)
    out["noise"] = np.hypot(out["spread"], out["acceptance_se"])
    out["within_2x_noise"] = out["rel_error"].abs() <= 2 * out["noise"]
    out["predicted_verdict"] = np.where(out["predicted_speedup"] > 1 + error, "speculate",
                                        np.where(out["predicted_speedup"] < 1 - error, "don't", "tie"))
    out["measured_verdict"] = np.where(out["measured_speedup"] > 1, "speculate", "don't")
    out.loc[out["method"] == "ar", ["predicted_verdict", "measured_verdict"]] = "baseline"
    out["verdict_flip"] = ((out["predicted_verdict"] != "tie") & (out["predicted_verdict"] != "baseline")
                           & (out["predicted_verdict"] != out["measured_verdict"]))
    keep = ["dataset", "method", "candidate", "predicted_speedup", "simulated_speedup", "measured_speedup",
            "rel_error", "sim_rel_error", "sim_vs_closed", "sim_se", "spread", "acceptance_se", "noise", "within_2x_noise", "n",
            "predicted_tokens_per_step", "measured_tokens_per_step", "acceptance_error", "predicted_step_s",
            "measured_step_s", "latency_error", "measured_tokens_per_s", "measured_e2e_tokens_per_s", "ctx_len", "predicted_verdict",
            "measured_verdict", "verdict_flip"]
    return out[keep]


def regret(fid: pd.DataFrame) -> pd.DataFrame:
    """Per dataset: the configuration the Profile picks (highest predicted speedup, ar included)
    against the best measured one; and the pick that follows the verdicts (the highest predicted
    among those called "speculate", else plain decoding: a tie does not speculate)."""
    rows = []
    for dataset, g in fid.groupby("dataset"):
        pick = g.loc[g["predicted_speedup"].idxmax()]
        best = g.loc[g["measured_speedup"].idxmax()]
        sure = g[(g["predicted_verdict"] == "speculate") | (g["method"] == "ar")]
        by_verdict = sure.loc[sure["predicted_speedup"].idxmax()]
        rows.append({"dataset": dataset, "picked": pick["candidate"], "picked_measured": pick["measured_speedup"],
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
    from traces.drift import run_factors

    reference = profile.engine.get("fit", {}).get("reference", {})
    lines = []
    factors = run_factors(runs) if runs is not None and "decode_s" in runs else pd.Series(dtype=float)
    if not factors.empty:
        lines.append(f"- within this run, the plain decoding beside each generation ran at {factors.quantile(0.1):.2f}-"
                     f"{factors.quantile(0.9):.2f}x (p10-p90) of its prompt's median step, worst "
                     f"{factors.min():.2f}-{factors.max():.2f}x over {len(factors)} pairs: each speedup divides "
                     "by its own pair's")
    for r in fid[fid["method"] == "ar"].itertuples():
        ref = reference.get(r.dataset)
        if ref:
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


def report(fid: pd.DataFrame, reg: pd.DataFrame, args, profile, prompts: list[str], minutes: float,
           runs: pd.DataFrame) -> str:
    spec = fid[fid["method"] != "ar"]
    err, sim = spec["rel_error"].abs(), spec["sim_rel_error"].abs()
    lines = [
        "# Fidelity: predicted from the Profile vs measured on held-out prompts", "",
        f"- Profile: `{args.profile}` ({profile.name}); calibration prompts (not used here): "
        f"{', '.join(profile.provenance.get('calibration_prompts', []))}",
        f"- Validation prompts (held out): {', '.join(prompts)}; {args.max_new_tokens} new tokens each, greedy",
        f"- {len(spec)} speculative configurations + ar, {args.repeats} interleaved repeats"
        + (", every generation paired with plain decoding of its prompt" if "pair" in runs and (runs["pair"] >= 0).any() else "")
        + ", "
        f"{args.threads} threads; measured in "
        + (f"{minutes:.1f} min" if minutes == minutes else "(time not recorded by this run)"),
        f"- Command: `python -m experiments.fidelity {' '.join(sys.argv[1:]) if args.argv is None else ' '.join(args.argv)}`",
        "", "## Summary", "",
        f"- closed form: median |error| {100 * err.median():.1f}%, worst {100 * err.max():.1f}%",
        f"- simulator: median |error| {100 * sim.median():.1f}%, worst {100 * sim.max():.1f}%",
        agreement(spec),
        f"- of which acceptance (tokens/step): median |error| {100 * spec['acceptance_error'].abs().median():.1f}%, "
        f"latency (step time): median |error| {100 * spec['latency_error'].abs().median():.1f}%",
        f"- within 2x the measurement noise: {int(spec['within_2x_noise'].sum())}/{len(spec)}",
        f"- verdict flips (predicted speculate/don't against measured): {int(spec['verdict_flip'].sum())}; "
        f"ties (within the Profile's held-out error {100 * args.error:.1f}%): {int((spec['predicted_verdict'] == 'tie').sum())}",
        "", "## The baseline across windows", "", *drift(fid, profile, runs),
        "", "## Search regret", "", _fmt_table(reg, list(reg.columns), ".3f"), "",
        "## Every configuration", "",
        _fmt_table(fid, [c for c in fid.columns if c != "ctx_len"], ".3f"), "",
        "Columns: decode speedups over plain decoding: over each generation's own ar partner (the same prompt, run "
        "right beside it) where the runs are paired, else over ar of the same repeat (the steps' own times: the prompt's prefill, the same "
        "work for every method and priced by no step model, is left out; measured_e2e_tokens_per_s includes it); rel_error = predicted / measured - 1; spread = half the "
        "range over repeats (relative); acceptance_se = standard error of tokens per step over prompts "
        "(relative); noise = both combined; latency_error = the error with the measured tokens per step; "
        "sim_vs_closed = simulated / closed form - 1; sim_se = the simulator's seed standard error (relative).",
    ]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------ CLI

def build_parser() -> argparse.ArgumentParser:
    p = CliParser(prog="python -m experiments.fidelity", description=__doc__.splitlines()[0])
    p.add_argument("--profile", required=True, type=Path, help="Profile JSON to judge")
    p.add_argument("--target", required=True, help="target model spec the Profile describes (e.g. smollm2)")
    p.add_argument("--prompts", required=True,
                   help="held-out prompts: set:N (first N) or set:A-B (the A-th to B-th, 1-based), comma-separated")
    p.add_argument("--out", required=True, type=Path, help="output folder; one holding another run's files is refused unless --overwrite (--report-only works in a "
                   "finished run's folder)")
    add_overwrite_option(p)
    p.add_argument("--configs", type=Path, help="file of configurations, one 'label [@drafter]' per line "
                   "(default: the predicted best and spread of every method's space on every Profile drafter)")
    p.add_argument("--drafters", type=Path, default=Path("artifacts/drafters"),
                   help="folder of the trained drafters the Profile names (default artifacts/drafters)")
    p.add_argument("--per-setup", type=int, default=PER_SETUP,
                   help=f"default configurations per method and drafter: the predicted best, the worst and "
                        f"evenly spread between (default {PER_SETUP}; ignored with --configs)")
    p.add_argument("--repeats", type=int, default=3, help="interleaved repeats (default 3)")
    p.add_argument("--max-new-tokens", type=int, default=48, help="tokens per prompt (default 48)")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads, pinned (default 2)")
    p.add_argument("--sim-tokens", type=int, default=None,
                   help="tokens per simulated stream (default: --max-new-tokens, the measured workload)")
    p.add_argument("--sim-repeats", type=int, default=SIM_REPEATS,
                   help=f"simulated streams per configuration, seeded (default {SIM_REPEATS})")
    p.add_argument("--seed", type=int, default=0, help="seed of the simulator and the decoders (default 0)")
    p.add_argument("--report-only", action="store_true",
                   help="measure nothing: recompute fidelity.csv, the plot and report.md from the "
                        "predictions.csv, runs.csv and run.json a finished run left in --out")
    return p


def write_results(args, profile, pred: pd.DataFrame, runs: pd.DataFrame, prompt_ids: list[str],
                  minutes: float) -> pd.DataFrame:
    """fidelity.csv, fidelity.png and report.md from the predictions and the measured runs."""
    fid = compare(pred, runs, args.error)
    reg = regret(fid)
    atomic.write_csv(args.out / "fidelity.csv", fid)
    plot(fid, args.out / "fidelity.png")
    atomic.write_text(args.out / "report.md", report(fid, reg, args, profile, prompt_ids, minutes, runs))
    spec = fid[fid["method"] != "ar"]
    print(f"closed form |error| median {100 * spec['rel_error'].abs().median():.1f}% worst "
          f"{100 * spec['rel_error'].abs().max():.1f}%; flips {int(spec['verdict_flip'].sum())}; "
          f"regret {', '.join(f'{r.dataset} {100 * r.regret:.1f}%' for r in reg.itertuples())}; wrote {args.out}",
          flush=True)
    return fid


@cli_entry
def main(argv: list[str] | None = None) -> int:
    from calibrate.profile import Profile
    from traces.prompts import load_prompt_mix

    args = build_parser().parse_args(argv)
    args.argv = argv
    args.sim_tokens = args.max_new_tokens if args.sim_tokens is None else args.sim_tokens
    for name in ("repeats", "max_new_tokens", "threads", "sim_tokens", "sim_repeats", "per_setup"):
        if getattr(args, name) < 1:
            raise InputError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    profile = Profile.load(args.profile)
    args.error = profile.heldout_error() or 0.0
    chosen = load_prompt_mix(args.prompts)
    if args.report_only:
        found = {name: args.out / name for name in ("predictions.csv", "runs.csv")}
        for name, path in found.items():
            if not path.is_file():
                raise InputError(f"--report-only needs {name} in --out, not found: {path}")
        run = args.out / "run.json"
        minutes = json.loads(run.read_text())["minutes"] if run.is_file() else float("nan")
        runs = pd.read_csv(found["runs.csv"])
        if "decode_s" not in runs:      # recorded before runs kept their decode time: from the steps
            step_files = sorted(args.out.glob("steps_*.parquet"))
            if not step_files:
                raise InputError(f"--report-only: runs.csv has no decode_s and --out holds no steps_*.parquet")
            runs = decode_seconds(runs, pd.concat([pd.read_parquet(f) for f in step_files], ignore_index=True))
        write_results(args, profile, pd.read_csv(found["predictions.csv"]), runs, [p.prompt_id for p in chosen], minutes)
        return 0
    check_held_out(profile, [p.prompt_id for p in chosen])
    datasets = {p.dataset: dataset_of(profile, p.dataset) for p in chosen}
    given = read_candidates(args.configs) if args.configs else None
    log = lambda m: print(m, flush=True)
    start_run(args.out, "experiments.fidelity", argv, args.overwrite)
    bench = Bench(args.target, profile.drafters, args.drafters, args.threads, args.seed)
    check_target(profile, bench)
    prompts = bench.encode(chosen)
    args.out.mkdir(parents=True, exist_ok=True)
    preds, cands_by = [], {}
    for prompt_set, dataset in datasets.items():
        lengths = [len(ids) for ds, _pid, ids in prompts if ds == prompt_set]
        ctx = float(np.mean(lengths)) + args.max_new_tokens / 2
        cands_by[dataset] = given or default_candidates(profile, dataset, ctx, args.per_setup, args.sim_tokens)
        preds.append(predict(profile, cands_by[dataset], dataset, ctx, args.sim_tokens, args.seed, args.sim_repeats))
    pred = pd.concat(preds, ignore_index=True)
    atomic.write_csv(args.out / "predictions.csv", pred)
    log(f"wrote {args.out / 'predictions.csv'} ({len(pred)} predictions) before measuring")

    started = time.perf_counter()
    runs = []
    for prompt_set, dataset in datasets.items():
        cands = cands_by[dataset]
        own = [(dataset, pid, ids) for ds, pid, ids in prompts if ds == prompt_set]
        log(f"measuring {len(cands)} configurations x {len(own)} prompts x {args.repeats} repeats on {dataset}")
        r, steps = bench.measure(cands, own, repeats=args.repeats, max_new_tokens=args.max_new_tokens, log=log)
        runs.append(r)
        atomic.write_parquet(args.out / f"steps_{dataset}.parquet", steps.drop(columns=["accept_mask", "confidences"]))
    runs = pd.concat(runs, ignore_index=True)
    minutes = (time.perf_counter() - started) / 60
    atomic.write_csv(args.out / "runs.csv", runs)
    atomic.write_json(args.out / "run.json", {"minutes": minutes, "argv": sys.argv[1:] if argv is None else argv})
    write_results(args, profile, pred, runs, [p.prompt_id for p in chosen], minutes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
