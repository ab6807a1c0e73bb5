"""python -m experiments.verify_lossless: prove the built-in rules lossless and catch every mutant.

Exact mode enumerates every random choice on `--cases` random small position cases (vocab 2-5,
k 1-4, integer weights) and a few context-dependent sequence cases; statistical mode checks the
batched torch rules (`verification.rules_torch`) and the batched mutants at `--vocab` with the sample
size derived from --alpha/--beta/--delta (Bonferroni over all statistical checks). Exit 0 only
when every rule passes and every mutant is caught. Writes report.md and results.csv to --out.

Before anything runs or is written, statistical mode estimates its own run time (each check's
sample size times its seconds per draw, measured on a probe of the same seeded sampler) and
refuses a run past --max-minutes, with the estimate; exact mode refuses a case whose estimated
enumeration runs past it (`verification.exact`). On a terminal (or with --progress) it says the
estimate and each check as it starts.
"""
from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from common import atomic
from common.errors import InputError, duration
from common.cli import CliParser, cli_entry
from common.rundir import add_overwrite_option, start_run
from verification.cases import RULES, SequenceCase, random_position_case
from common.progress import progress_enabled
from sweep.executor import die_with_parent, worker_count
from verification.exact import DEFAULT_MAX_PATHS, DEFAULT_MAX_SECONDS, exact_check
from verification.mutants import MUTANTS
from verification.batched import MUTANT_CHECKS, MUTANT_MIN_TV, RULE_CHECKS, bigram_bytes
from verification.statistical import estimate_seconds, sample_size, detectable_tv, statistical_check
from sweep.estimate import available_memory

SEQUENCE_CASES = ((3, 3, (1, 1)), (3, 2, (2,)), (2, 3, (2, 1)))


def _position_cases(count: int, seed: int) -> list:
    rng = np.random.default_rng(seed)
    return [random_position_case(rng, int(rng.integers(2, 6)), int(rng.integers(1, 5)), name=f"case {i}")
            for i in range(count)]


CLI_PROBES = 4  # random paths per check for the path estimate and the replay check (the library's default is 16)


def _exact_one(args) -> dict:
    kind, name, cases, max_paths, memo, max_seconds = args
    rule = (RULES if kind == "rule" else MUTANTS)[name]
    start, paths, worst, failed, error = time.perf_counter(), 0, 0, 0, ""
    for case in cases:
        result = exact_check(rule.sampler, case, rule.target(case), max_paths, memo=memo, probes=CLI_PROBES,
                             max_seconds=max_seconds)
        paths += result.paths
        worst = max(worst, result.tv)
        failed += not result.passed
        error = error or result.error
    seconds = time.perf_counter() - start
    ok = failed == 0 if kind == "rule" else failed > 0
    return {"mode": "exact", "kind": kind, "name": name, "cases": len(cases), "failed_cases": failed,
            "max_tv": float(worst), "n_or_paths": paths, "seconds": round(seconds, 3),
            "throughput": round(paths / seconds, 1) if seconds else 0.0, "verdict": "ok" if ok else "WRONG",
            "note": error[:80]}


def run_exact(cases: int, seed: int, workers: int, max_length: int | None = None,
              max_paths: int = DEFAULT_MAX_PATHS, memo: bool = False,
              max_seconds: float | None = DEFAULT_MAX_SECONDS) -> list[dict]:
    """All rules and mutants by exact enumeration; `max_length` caps the sequence cases' lengths;
    `max_paths`, `memo` and `max_seconds` (per case) as in `verification.exact.exact_check`."""
    positions = _position_cases(cases, seed)
    sequences = [SequenceCase(v, min(L, max_length or L), shape, seed + i, name=f"sequence {i}")
                 for i, (v, L, shape) in enumerate(SEQUENCE_CASES)]
    jobs = []
    for kind, table in (("rule", RULES), ("mutant", MUTANTS)):
        for name, rule in table.items():
            chosen = positions if rule.kind == "position" else sequences
            if kind == "mutant" and rule.kind == "position":
                chosen = positions[: max(1, min(len(positions), 50))]
            half = (len(chosen) + 1) // 2
            parts = [chosen[:half], chosen[half:]] if len(chosen) > 1 else [chosen]
            jobs += [(kind, name, part, max_paths, memo, max_seconds) for part in parts]
    if workers > 1:
        with multiprocessing.get_context("fork").Pool(workers, initializer=die_with_parent,
                                                      initargs=(os.getpid(),)) as pool:
            parts = pool.map(_exact_one, jobs)
    else:
        parts = [_exact_one(job) for job in jobs]
    merged: dict = {}
    for part in parts:
        key = (part["kind"], part["name"])
        if key not in merged:
            merged[key] = part
            continue
        row = merged[key]
        for col in ("cases", "failed_cases", "n_or_paths", "seconds"):
            row[col] += part[col]
        row["max_tv"] = max(row["max_tv"], part["max_tv"])
        row["note"] = row["note"] or part["note"]
    rows = []
    for row in merged.values():
        row["seconds"] = round(row["seconds"], 3)
        row["throughput"] = round(row["n_or_paths"] / row["seconds"], 1) if row["seconds"] else 0.0
        ok = row["failed_cases"] == 0 if row["kind"] == "rule" else row["failed_cases"] > 0
        row["verdict"] = "ok" if ok else "WRONG"
        rows.append(row)
    return rows


def _cpu_seconds() -> float:
    """CPU time of this process and its finished children (the exact-mode workers)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def statistical_checks(vocab: int, alpha: float, beta: float, delta: float, seed: int) -> list[dict]:
    """Every batched rule and mutant check with its case, seed, sample size and estimated seconds
    (`verification.statistical.estimate_seconds`: a probe of the seeded sampler), before any runs."""
    checks = [("rule", n, c) for n, c in RULE_CHECKS.items()] + [("mutant", n, c) for n, c in MUTANT_CHECKS.items()]
    planned = []
    for i, (kind, name, check) in enumerate(checks):
        case, true_tv = check.build(vocab, seed + 100 * i, MUTANT_MIN_TV if kind == "mutant" else 0.0)
        accept = case.accept_rate() if check.single_draft else None
        n = sample_size(case.target(), alpha=alpha, beta=beta, delta=delta, tests=len(checks))
        seconds = estimate_seconds(check.sampler, case, n, seed=seed + i, batched=True, accept_rate=accept)
        planned.append(dict(kind=kind, name=name, check=check, case=case, true_tv=true_tv, accept=accept,
                            seed=seed + i, n=n, seconds=seconds, tests=len(checks)))
    return planned


def run_statistical(vocab: int, alpha: float, beta: float, delta: float, seed: int, threads: int = 1,
                    planned: list[dict] | None = None, progress: bool = False) -> list[dict]:
    """Every batched rule must pass and every batched mutant must fail, with Bonferroni over all checks.
    Each mutant's case is chosen so its exact TV (`true_tv`) is at least MUTANT_MIN_TV; `detectable_tv`
    is the TV the chosen sample size catches with miss probability beta. `planned`: the checks of
    `statistical_checks` (already estimated); `progress`: a line on stderr as each check starts."""
    torch.set_num_threads(threads)
    planned = planned or statistical_checks(vocab, alpha, beta, delta, seed)
    rows = []
    for i, plan in enumerate(planned):
        kind, name, check, case, true_tv, accept = (plan[k] for k in ("kind", "name", "check", "case", "true_tv",
                                                                       "accept"))
        if progress:
            print(f"statistical {i + 1}/{len(planned)}: {kind} {name}, {plan['n']:,} draws, ~{duration(plan['seconds'])}",
                  file=sys.stderr, flush=True)
        cpu = time.process_time()
        result = statistical_check(check.sampler, case, case.target(), alpha=alpha, beta=beta, delta=delta,
                                   tests=plan["tests"], seed=plan["seed"], batched=True, accept_rate=accept,
                                   n=plan["n"], max_seconds=None)
        cpu = time.process_time() - cpu
        ok = result.passed if kind == "rule" else not result.passed
        rows.append({"mode": "statistical", "kind": kind, "name": name, "cases": 1,
                     "failed_cases": int(not result.passed), "max_tv": round(result.tv_hat, 5),
                     "true_tv": round(true_tv, 5), "detectable_tv": round(detectable_tv(result.n, max(result.cells, 2),
                                                                                        result.level, beta), 5),
                     "n_or_paths": result.n, "seconds": round(result.seconds, 3), "cpu_seconds": round(cpu, 3),
                     "throughput": round(result.n / result.seconds, 1) if result.seconds else 0.0,
                     "verdict": "ok" if ok else "WRONG",
                     "note": (f"TV <= {result.tv_bound:.4f} (eps {result.eps:.4f}); cells {result.cells}; p {result.p_value:.3g}"
                              + (f"; accept {result.accept_rate:.4f} vs {accept:.4f}" if accept is not None else "")
                              + (f"; {result.reason}" if result.reason else ""))})
    return rows


def _report(rows: list[dict], args) -> str:
    frame = pd.DataFrame(rows)
    lines = ["# verify_lossless report", "",
             f"Settings: mode {args.mode}, exact cases {args.cases}, vocab {args.vocab}, alpha {args.alpha}, "
             f"beta {args.beta}, delta {args.delta}, seed {args.seed}.", "",
             "Rules must pass (verdict ok = lossless); mutants must be caught (verdict ok = caught). "
             "max_tv: exact TV (exact mode) or empirical TV (statistical mode); throughput: paths/s "
             "(exact) or samples/s (statistical).", "", frame.to_markdown(index=False) if _has_tabulate() else frame.to_string(index=False)]
    return "\n".join(lines) + "\n"


def _has_tabulate() -> bool:
    try:
        import tabulate  # noqa: F401
        return True
    except ImportError:
        return False


def build_parser() -> argparse.ArgumentParser:
    parser = CliParser(prog="python -m experiments.verify_lossless", description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("exact", "statistical", "both"), default="exact",
                        help="exact enumeration on small cases, statistical tests of the batched torch rules, or both")
    parser.add_argument("--cases", type=int, default=500, help="random position cases in exact mode (default 500)")
    parser.add_argument("--vocab", type=int, default=1000, help="vocabulary of the statistical cases (default 1000)")
    parser.add_argument("--alpha", type=float, default=1e-6,
                        help="false-alarm probability over the whole statistical run, in (0, 1) (default 1e-6)")
    parser.add_argument("--beta", type=float, default=1e-6,
                        help="miss probability for a TV distance of --delta, in (0, 1) (default 1e-6)")
    parser.add_argument("--delta", type=float, default=0.01,
                        help="TV distance the statistical tests must catch, in (0, 1] (default 0.01)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the cases and the samplers (default 0)")
    parser.add_argument("--max-length", type=int, default=None,
                        help="cap the length of the fixed sequence cases in exact mode (default: no cap, lengths 2-3); "
                             "2 keeps every sequence mutant caught and runs in a few seconds")
    parser.add_argument("--max-paths", type=int, default=DEFAULT_MAX_PATHS,
                        help=f"exact mode refuses a case whose estimated path count exceeds this, and stops past it "
                             f"(default {DEFAULT_MAX_PATHS:,})")
    parser.add_argument("--memo", action="store_true",
                        help="exact mode reuses the law below identical sub-states (the samplers' rng.memo keys: "
                             "rejections so far, committed tokens); much faster on larger cases")
    parser.add_argument("--threads", type=int, default=1, help="torch threads in statistical mode (default 1)")
    parser.add_argument("--workers", type=int, default=None,
                        help="processes for exact mode, at most the CPU cores (default: one per CPU core)")
    parser.add_argument("--max-minutes", type=float, default=60.0,
                        help="refuse, before running, a statistical run estimated to take longer, and an exact case "
                             "whose enumeration is (default 60)")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="say the estimate and each statistical check as it starts, on stderr (default: only "
                             "when stderr is a terminal)")
    parser.add_argument("--out", type=Path, default=Path("out/verify_lossless"),
                        help="folder for report.md and results.csv (default out/verify_lossless); one holding another run's files is refused unless --overwrite")
    add_overwrite_option(parser)
    return parser


@cli_entry
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    for option, value, least in (("--cases", args.cases, 1), ("--vocab", args.vocab, 2), ("--workers", args.workers, 1),
                                 ("--threads", args.threads, 1)):
        if value is not None and value < least:
            raise InputError(f"{option} is {value}, must be >= {least}")
    if args.max_length is not None and args.max_length < 1:
        raise InputError(f"--max-length is {args.max_length}, must be >= 1")
    if args.max_paths < 1:
        raise InputError(f"--max-paths is {args.max_paths}, must be >= 1")
    for option, value in (("--alpha", args.alpha), ("--beta", args.beta)):
        if not 0 < value < 1:  # also refuses nan
            raise InputError(f"{option} is {value}, must lie in (0, 1)")
    if not 0 < args.delta <= 1:
        raise InputError(f"--delta is {args.delta}, must lie in (0, 1]")
    if not (args.max_minutes > 0 and math.isfinite(args.max_minutes)):
        raise InputError(f"--max-minutes is {args.max_minutes}, must be a number of minutes > 0")
    workers = worker_count(args.workers)
    progress = progress_enabled(args.progress)
    planned = None
    if args.mode in ("statistical", "both"):        # estimated before anything runs or is written

        if bigram_bytes(args.vocab) > available_memory():
            raise InputError(f"--vocab {args.vocab}: the sequence checks' {args.vocab:,} x {args.vocab:,} tables "
                             f"would hold ~{bigram_bytes(args.vocab) / 1e9:.1f} GB at their peak, but "
                             f"{available_memory() / 1e9:.1f} GB of memory is available; lower --vocab")
        torch.set_num_threads(args.threads)
        planned = statistical_checks(args.vocab, args.alpha, args.beta, args.delta, args.seed)
        total = sum(p["seconds"] for p in planned)
        if total > 60 * args.max_minutes:
            draws = max(p["n"] for p in planned)
            raise InputError(f"--vocab {args.vocab} --delta {args.delta:g}: the statistical checks would draw up to "
                             f"{draws:,} samples each, ~{duration(total)} in all (measured on a probe of each), past "
                             f"--max-minutes {args.max_minutes:g}; raise --delta, --alpha or --beta, lower --vocab, or "
                             "raise --max-minutes")
        if progress:
            print(f"estimate: {len(planned)} statistical checks, up to {max(p['n'] for p in planned):,} draws each, "
                  f"~{duration(total)}", file=sys.stderr, flush=True)
    start_run(args.out, "experiments.verify_lossless", argv, args.overwrite)
    rows, wall, cpu = [], time.perf_counter(), _cpu_seconds()
    if args.mode in ("exact", "both"):
        rows += run_exact(args.cases, args.seed, workers, args.max_length, args.max_paths, args.memo,
                          60 * args.max_minutes)
    if args.mode in ("statistical", "both"):
        rows += run_statistical(args.vocab, args.alpha, args.beta, args.delta, args.seed, args.threads, planned,
                                progress)
    frame = pd.DataFrame(rows)
    columns = ["mode", "kind", "name", "cases", "failed_cases", "max_tv", "true_tv", "detectable_tv", "n_or_paths",
               "seconds", "throughput", "verdict"]
    print(frame[[c for c in columns if c in frame]].to_string(index=False, na_rep=""))
    for mode, part in frame.groupby("mode"):
        unit = "paths/s" if mode == "exact" else "samples/s"
        total = part["n_or_paths"].sum() / max(part["seconds"].sum(), 1e-9)
        print(f"{mode}: {part['n_or_paths'].sum()} {'paths' if mode == 'exact' else 'samples'} in "
              f"{part['seconds'].sum():.1f} s of work, {total:.0f} {unit}")
    if "statistical" in set(frame["mode"]):
        stat = frame[frame["mode"] == "statistical"]
        print(f"statistical sample size per check: {int(stat['n_or_paths'].max())} (alpha {args.alpha} / {len(stat)} "
              f"checks, beta {args.beta}, delta {args.delta}, vocab {args.vocab})")
    print(f"run time: {time.perf_counter() - wall:.1f} s wall, {_cpu_seconds() - cpu:.1f} s CPU (with the exact-mode workers)")
    atomic.write_csv(args.out / "results.csv", frame)
    atomic.write_text(args.out / "report.md", _report(rows, args))
    wrong = frame[frame["verdict"] != "ok"]
    if len(wrong):
        print("FAILED: " + ", ".join(f"{k} {n}" for k, n in zip(wrong["kind"], wrong["name"])), file=sys.stderr)
        return 1
    print(f"all rules lossless, all mutants caught; report in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
