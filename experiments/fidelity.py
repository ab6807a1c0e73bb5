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
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from methods import BASELINE
import methods
from common import atomic
from common.errors import InputError
from common.cli import CliParser, cli_entry
from common.rundir import add_overwrite_option, add_to_run, start_run
from experiments.fidelity_report import compare, first_predictions, plot, read_run, regret, report
from experiments.measure import Bench, Candidate, decode_seconds, parse_candidate

PER_SETUP = 4            # default configurations per (method, drafter)
SIM_REPEATS = 2000       # default simulated streams per configuration (seed noise <= 0.3% on SmolLM2)
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
    out = [Candidate(methods.get(BASELINE).config())]
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
    if not any(c.method == BASELINE for c in cands):
        cands.insert(0, Candidate(methods.get(BASELINE).config()))
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
        if cand.method == BASELINE:          # the baseline: one target step per token
            rows.append({"dataset": dataset, "candidate": cand.label, "method": BASELINE, "predicted_speedup": 1.0,
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
    p.add_argument("--repredict", action="store_true",
                   help="with --report-only: predict the run's configurations again from --profile (a model "
                        "changed since it measured); its first predictions stay in predictions_first.csv and "
                        "the report says the new ones came after the measurement")
    return p


def adopt_measured_settings(args, runs: pd.DataFrame, given: list[str]) -> list[str]:
    """Under --report-only the report describes the run that measured, not this command's
    defaults: its repeats and tokens per generation from runs.csv, its threads from the command
    it recorded. Returns its prompts, which must be the ones --prompts names."""
    measured = list(dict.fromkeys(runs["prompt_id"]))
    if set(measured) != set(given):
        raise InputError(f"--prompts {args.prompts} names {', '.join(given)}; the run in {args.out} "
                         f"measured {', '.join(measured)}")
    args.repeats = int(runs["repeat"].nunique())
    args.max_new_tokens = int(runs["tokens"].max())
    recorded = read_run(args.out).get("argv")
    if recorded:
        args.threads = build_parser().parse_args(recorded).threads
    return measured


def repredict(args, profile, pred: pd.DataFrame) -> pd.DataFrame:
    """The run's configurations predicted again from `profile` at the contexts the run predicted
    at, for its own tokens per generation (`adopt_measured_settings` ran first); the predictions
    made before it measured are kept once, in predictions_first.csv."""
    from traces.timing import git_commit

    first = args.out / "predictions_first.csv"
    run = read_run(args.out)
    if not run.get("repredicted"):             # the first repredict keeps the run's own predictions
        atomic.write_csv(first, pred)
        add_to_run(args.out, first)
    fresh = [predict(profile, [parse_candidate(label) for label in group["candidate"]], dataset,
                     float(group["ctx_len"].iloc[0]), args.max_new_tokens, args.seed, args.sim_repeats)
             for dataset, group in pred.groupby("dataset", sort=False)]
    out = pd.concat(fresh, ignore_index=True)
    atomic.write_csv(args.out / "predictions.csv", out)
    atomic.write_json(args.out / "run.json", {**run, "repredicted": git_commit() or "unknown commit"})
    return out


def write_results(args, profile, pred: pd.DataFrame, runs: pd.DataFrame, prompt_ids: list[str],
                  minutes: float) -> pd.DataFrame:
    """fidelity.csv, fidelity.png and report.md from the predictions and the measured runs."""
    fid = compare(pred, runs, args.error)
    reg = regret(fid)
    atomic.write_csv(args.out / "fidelity.csv", fid)
    plot(fid, args.out / "fidelity.png")
    atomic.write_text(args.out / "report.md", report(fid, reg, args, profile, prompt_ids, minutes, runs,
                                                     first_predictions(args, runs)))
    spec = fid[fid["method"] != BASELINE]
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
        minutes = read_run(args.out).get("minutes", float("nan"))
        runs = pd.read_csv(found["runs.csv"])
        if "decode_s" not in runs:      # recorded before runs kept their decode time: from the steps
            step_files = sorted(args.out.glob("steps_*.parquet"))
            if not step_files:
                raise InputError(f"--report-only: runs.csv has no decode_s and --out holds no steps_*.parquet")
            runs = decode_seconds(runs, pd.concat([pd.read_parquet(f) for f in step_files], ignore_index=True))
        pred = pd.read_csv(found["predictions.csv"])
        prompt_ids = adopt_measured_settings(args, runs, [p.prompt_id for p in chosen])
        if args.repredict:
            check_held_out(profile, prompt_ids)
            pred = repredict(args, profile, pred)
        write_results(args, profile, pred, runs, prompt_ids, minutes)
        return 0
    if args.repredict:
        raise InputError("--repredict works on a finished run: give --report-only too")
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
