"""`python -m experiments.fidelity`: predict from a Profile alone, then measure, on held-out prompts.

    python -m experiments.fidelity --profile data/profiles/smollm2-135m-cpu.json --target smollm2 \\
        --prompts mtbench:7-10,humaneval:7-10 --out out/fidelity

1. Checks before any work: the Profile's calibration prompts (provenance) must not overlap the
   prompts given (it says which were used); the target must be the Profile's (architecture,
   hardware, dtype).
2. Predictions first, from the Profile alone, written to predictions.csv before anything is
   measured: per dataset of the prompts and configuration, the closed form (sweep.scoring,
   the engine-calibrated step cost) and the simulator, priced at the prompts' own context (their
   mean length plus half the new tokens).
3. Measurement (campaigns.measure): warm-up, configurations in rotating order per repeat,
   pinned threads, every generation beside plain decoding of the same prompt (its pair: the
   machine's drift cancels, traces.drift); per configuration the median over repeats of the
   speedup over its partners, its spread (half the range over repeats, relative) and the sampling
   error of the acceptance over prompts.
4. fidelity.csv, report.md and fidelity.png (predicted against measured, with y = x): the error of
   every configuration split into acceptance (tokens per step) and latency (step time), the
   search regret (measured speedup of the configuration the Profile would pick against the best
   measured) and whether the speculate-or-not verdict agreed everywhere.

`--batch 1,2,4,...` measures batches instead (`fidelity.batch`): at each batch B the continuous-batching
engine (`runtime.engine.batch`) decodes every prompt (one dataset) with up to B rows, beside plain
decoding of the same prompts at the same B; throughput = generated tokens / decode seconds of the batch
run. Predicted first per (configuration, batch) by the closed form (the padded width and context of a
batch) and the simulator (the prompts served at a batch limit of B); fidelity.csv keeps a `batch`
column, and crossover.csv and best_k.csv say where each method stops paying and which draft length
wins at each batch, predicted and measured.

The default configurations (`--configs` overrides: a file of lines "label @drafter") come from
each method's own search space on each Profile drafter: the predicted best and configurations
spread evenly over the predicted speedups, so the set spans good and bad choices of all methods
(`--select top`: the predicted best `--per-setup` of each, the choices among winners a search makes).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from methods import BASELINE
from calibrate.checks import check_target, dataset_of
from common import atomic
from common.errors import InputError
from common.cli import CliParser, cli_entry, log
from common.rundir import add_overwrite_option, add_to_run, start_run, git_commit
from fidelity.report import compare, first_predictions, plot, pool_runs, read_run, regret, report
from fidelity.batch import SIM_REPEATS as BATCH_SIM_REPEATS, batch_sections, check_cache_budget, predict_batches
from campaigns.measure import ENGINES, Bench, decode_seconds, parse_candidate
from traces.timing import int_list

from fidelity.run import (PER_SETUP, SELECTIONS, SIM_REPEATS, check_held_out,
                          default_candidates, predict, predictions_with_intervals, prompt_counts, read_candidates)
from profiles.profile import Profile
from profiles.machine import check_machine, this_machine
from runtime.prompts import load_prompt_mix


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
    p.add_argument("--select", choices=SELECTIONS, default="spread",
                   help="which configurations per method and drafter: spread (the predicted best, the worst and "
                        "evenly between) or top (the predicted best --per-setup) (default spread)")
    p.add_argument("--repeats", type=int, default=3, help="interleaved repeats (default 3)")
    p.add_argument("--max-new-tokens", type=int, default=48, help="tokens per prompt (default 48)")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads, pinned (default 2)")
    p.add_argument("--engine", choices=ENGINES, default="specsim",
                   help="what runs the generations: this project's engine, or transformers' own generate "
                        "(a peer: plain decoding, prompt lookup with n_min 1 and an assistant model)")
    p.add_argument("--sim-tokens", type=int, default=None,
                   help="tokens per simulated stream (default: --max-new-tokens, the measured workload)")
    p.add_argument("--sim-repeats", type=int, default=None,
                   help=f"simulated streams per configuration, seeded (default {SIM_REPEATS}; with --batch, "
                        f"{BATCH_SIM_REPEATS} served runs per configuration and batch)")
    p.add_argument("--batch", default=None,
                   help="batch sizes, comma-separated: measure each configuration on the continuous-batching engine "
                        "at each batch, beside plain decoding at the same batch (prompts of one dataset; default: "
                        "one prompt at a time)")
    p.add_argument("--seed", type=int, default=0, help="seed of the simulator and the decoders (default 0)")
    p.add_argument("--other-machine", action="store_true",
                   help="judge a Profile measured on another machine as it is (without it such a Profile is "
                        "refused, naming both machines: move it here with python -m calibrate.quick)")
    p.add_argument("--report-only", action="store_true",
                   help="measure nothing: recompute fidelity.csv, the plot and report.md from the "
                        "predictions.csv, runs.csv and run.json a finished run left in --out")
    p.add_argument("--pool", type=Path, nargs="+", metavar="RUN",
                   help="with --report-only: folders of other runs of the same command (the same prompts, "
                        "configurations and tokens); their repeats join this run's, so each speedup is the median "
                        "over every run and its spread spans them, the spread across runs and not only within one "
                        "(default: none, this run alone)")
    p.add_argument("--repredict", action="store_true",
                   help="with --report-only: predict the run's configurations again from --profile (a model "
                        "changed since it measured); its first predictions stay in predictions_first.csv and "
                        "the report says the new ones came after the measurement")
    return p


def read_measured(folder: Path, flag: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(predictions.csv, runs.csv) a finished run left in `folder`, its runs with their decode time."""
    found = {name: folder / name for name in ("predictions.csv", "runs.csv")}
    for name, path in found.items():
        if not path.is_file():
            raise InputError(f"{flag} {folder}: needs {name}, not found: {path}")
    runs = pd.read_csv(found["runs.csv"])
    if "decode_s" not in runs:      # recorded before runs kept their decode time: from the steps
        step_files = sorted(folder.glob("steps_*.parquet"))
        if not step_files:
            raise InputError(f"{flag} {folder}: runs.csv has no decode_s and the folder holds no steps_*.parquet")
        runs = decode_seconds(runs, pd.concat([pd.read_parquet(f) for f in step_files], ignore_index=True))
    return pd.read_csv(found["predictions.csv"]), runs


def adopt_measured_settings(args, runs: pd.DataFrame, given: list[str]) -> list[str]:
    """Under --report-only the report describes the run that measured, not this command's
    defaults: its repeats and tokens per generation from runs.csv, its threads from the command
    it recorded. Returns its prompts, which must be the ones --prompts names."""
    measured = list(dict.fromkeys(runs["prompt_id"])) if "prompt_id" in runs else read_run(args.out).get("prompts", [])
    if set(measured) != set(given):
        raise InputError(f"--prompts {args.prompts} names {', '.join(given)}; the run in {args.out} "
                         f"measured {', '.join(measured)}")
    args.repeats = int(runs["repeat"].nunique())
    args.max_new_tokens = int(runs["tokens"].max()) if "batch" not in runs else int(read_run(args.out)["max_new_tokens"])
    recorded = read_run(args.out).get("argv")
    if recorded:
        args.threads = build_parser().parse_args(recorded).threads
    return measured


def sim_repeats(args, batched: bool) -> int:
    """--sim-repeats, or its default for the kind of run: served runs per (configuration, batch) where the
    run measures batches, single streams per configuration where it does not."""
    if args.sim_repeats is not None:
        return args.sim_repeats
    return BATCH_SIM_REPEATS if batched else SIM_REPEATS


def repredict(args, profile, pred: pd.DataFrame, runs: pd.DataFrame, chosen) -> pd.DataFrame:
    """The run's configurations predicted again from `profile` at the contexts the run predicted
    at, for its own tokens per generation (`adopt_measured_settings` ran first); a batch run's at its
    batches, from its prompts' lengths (recorded in run.json, or the prompts tokenized again by the
    target for runs that predate that). The predictions made before it measured are kept once, in
    predictions_first.csv."""
    first = args.out / "predictions_first.csv"
    run = read_run(args.out)
    if not run.get("repredicted"):             # the first repredict keeps the run's own predictions
        atomic.write_csv(first, pred)
        add_to_run(args.out, first)
    if "batch" in runs:
        lengths = run.get("prompt_tokens") or [len(ids) for _, _, ids in
                                                Bench(args.target, {}, args.drafters, args.threads).encode(chosen)]
        dataset, batches = pred["dataset"].iat[0], sorted(int(b) for b in runs["batch"].unique())   # one dataset
        cands = [parse_candidate(label) for label in dict.fromkeys(pred["candidate"])]
        out = predictions_with_intervals(predict_batches(profile, cands, dataset, lengths, batches, args.max_new_tokens,
                                                         args.seed, args.sim_repeats), profile, {dataset: len(lengths)})
    else:
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
    notes, sections = first_predictions(args, runs), []
    if "batch" in fid:
        notes, sections = notes + ["", "## Batches", ""], batch_sections(fid, args.out)
    atomic.write_text(args.out / "report.md", report(fid, reg, args, profile, prompt_ids, minutes, runs,
                                                     notes + sections[:1]) + "\n".join(sections[1:]))
    spec = fid[fid["method"] != BASELINE]
    print(f"closed form |error| median {100 * spec['rel_error'].abs().median():.1f}% worst "
          f"{100 * spec['rel_error'].abs().max():.1f}%; flips {int(spec['verdict_flip'].sum())}; "
          f"regret {', '.join(f'{r.dataset} {100 * r.regret:.1f}%' for r in reg.itertuples())}; wrote {args.out}",
          flush=True)
    return fid


@cli_entry
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.argv = argv
    args.sim_tokens = args.max_new_tokens if args.sim_tokens is None else args.sim_tokens
    batches = int_list(args.batch, "batch", 1) if args.batch is not None else None
    for name in ("repeats", "max_new_tokens", "threads", "sim_tokens", "sim_repeats", "per_setup"):
        if getattr(args, name) is not None and getattr(args, name) < 1:     # --sim-repeats: None, its default
            raise InputError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    profile = Profile.load(args.profile)
    args.error = profile.heldout_error() or 0.0
    chosen = load_prompt_mix(args.prompts)
    if args.report_only:
        pred, runs = read_measured(args.out, "--out")
        minutes = read_run(args.out).get("minutes", float("nan"))
        prompt_ids = adopt_measured_settings(args, runs, [p.prompt_id for p in chosen])
        args.sim_repeats = sim_repeats(args, batched="batch" in runs)
        if args.pool:
            runs = pool_runs(runs, {str(folder): read_measured(folder, "--pool")[1] for folder in args.pool})
        if args.repredict:
            check_held_out(profile, prompt_ids)
            pred = repredict(args, profile, pred, runs, chosen)
        if "predicted_lo" not in pred:          # a run measured before intervals were, or a batch run before they were
            pred = predictions_with_intervals(pred, profile, prompt_counts(runs))
        write_results(args, profile, pred, runs, prompt_ids, minutes)
        return 0
    for flag in ("repredict", "pool"):
        if getattr(args, flag):
            raise InputError(f"--{flag} works on a finished run: give --report-only too")
    args.sim_repeats = sim_repeats(args, batched=batches is not None)
    check_held_out(profile, [p.prompt_id for p in chosen])
    datasets = {p.dataset: dataset_of(profile, p.dataset) for p in chosen}
    given = read_candidates(args.configs) if args.configs else None
    said = check_machine(profile.machine, this_machine(args.threads), str(args.profile), args.other_machine)
    if said:
        log(said)
    if batches:
        return run_batches(args, profile, chosen, datasets, given, batches, log)
    start_run(args.out, "experiments.fidelity", argv, args.overwrite)
    bench = Bench(args.target, profile.drafters, args.drafters, args.threads, args.seed, engine=args.engine)
    check_target(profile, bench.target.model)
    prompts = bench.encode(chosen)
    args.out.mkdir(parents=True, exist_ok=True)
    preds, cands_by = [], {}
    for prompt_set, dataset in datasets.items():
        lengths = [len(ids) for ds, _pid, ids in prompts if ds == prompt_set]
        ctx = float(np.mean(lengths)) + args.max_new_tokens / 2
        cands_by[dataset] = given or default_candidates(profile, dataset, ctx, args.per_setup, args.sim_tokens,
                                                               args.select)
        preds.append(predict(profile, cands_by[dataset], dataset, ctx, args.sim_tokens, args.seed, args.sim_repeats))
    pred = predictions_with_intervals(pd.concat(preds, ignore_index=True), profile,
                          {d: sum(ds == p for ds, _pid, _ids in prompts) for p, d in datasets.items()})
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


def run_batches(args, profile, chosen, datasets: dict[str, str], given, batches: tuple[int, ...], log) -> int:
    """`--batch`: predictions per (configuration, batch) written first, then the batch runs measured."""
    if len(datasets) != 1:
        raise InputError(f"--batch decodes the prompts as one request mix of one dataset; --prompts names "
                         f"{', '.join(datasets)}")
    if args.engine != "specsim":
        raise InputError("--batch measures this project's continuous-batching engine: --engine specsim")
    (dataset,) = datasets.values()
    bench = Bench(args.target, profile.drafters, args.drafters, args.threads, args.seed)
    check_target(profile, bench.target.model)
    prompts = bench.encode(chosen)
    lengths = [len(ids) for _, _, ids in prompts]
    cands = given or default_candidates(profile, dataset, float(np.mean(lengths)) + args.max_new_tokens / 2,
                                        args.per_setup, args.sim_tokens, args.select)
    check_cache_budget(bench, cands, batches, max(lengths) + args.max_new_tokens)     # before anything is written
    # predicted before the folder is claimed: a batch the Profile's tables did not measure is refused in one line
    pred = predictions_with_intervals(predict_batches(profile, cands, dataset, lengths, batches, args.max_new_tokens,
                                                      args.seed, args.sim_repeats), profile, {dataset: len(prompts)})
    start_run(args.out, "experiments.fidelity", args.argv, args.overwrite)
    args.out.mkdir(parents=True, exist_ok=True)
    atomic.write_csv(args.out / "predictions.csv", pred)
    log(f"wrote {args.out / 'predictions.csv'} ({len(pred)} predictions) before measuring")
    started = time.perf_counter()
    log(f"measuring {len(cands)} configurations x batches {','.join(map(str, batches))} x {len(prompts)} prompts x "
        f"{args.repeats} repeats on {dataset}")
    runs, steps = bench.measure_batches(cands, [(dataset, pid, ids) for _, pid, ids in prompts], batches,
                                        repeats=args.repeats, max_new_tokens=args.max_new_tokens, log=log)
    atomic.write_parquet(args.out / f"steps_{dataset}.parquet", steps.drop(columns=["accept_mask", "confidences"]))
    minutes = (time.perf_counter() - started) / 60
    atomic.write_csv(args.out / "runs.csv", runs)
    prompt_ids = [p.prompt_id for p in chosen]
    atomic.write_json(args.out / "run.json", {"minutes": minutes, "argv": sys.argv[1:] if args.argv is None else args.argv,
                                              "prompts": prompt_ids, "prompt_tokens": lengths,
                                              "max_new_tokens": args.max_new_tokens})
    write_results(args, profile, pred, runs, prompt_ids, minutes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
