"""`python -m experiments.sweep`, the main job: the command line over `sweep.run`.

    python -m experiments.sweep                       # every bundled profile, every method
    python -m experiments.sweep --profile mine.json --methods sd,mcsd --batch 4 --hardware H100

Options are checked before anything is built; the sweep's estimate (configurations and memory per
profile and method) refuses a run that will not fit; outputs go to `--out` (`sweep.report`).
"""
from __future__ import annotations

import argparse
import contextlib
import math
import sys
import textwrap
import time
from dataclasses import asdict
from pathlib import Path

import methods
from profiles.profile import Profile
from common.cli import CliParser, cli_entry
from common.errors import InputError
from common.rundir import add_overwrite_option, open_run
from costmodel.hardware import hardware_names
from calibrate.assumed import ASSUMED, MODES as ASSUMED_MODES
from papers import choices as paper_choices
from sweep import deployments, scoring
from sweep.estimate import MAX_HOURS, Deadline, check_fits, estimate
from common.progress import add_progress_option, progress_enabled
from sweep.executor import EXECUTORS, make_executor, worker_count
from sweep.run import (BUNDLED_PROFILES, SweepOptions, setting_of, bundled_profile_paths,
                                   load_profiles, run_sweep, with_assumed)
from methods.engines import parse_engines
from traces.replay import replayable
from sweep.report import stdout_table, write_outputs, writing_methods


def _replayed() -> list[str]:
    return [m for m in methods.names(sweep_only=True) if m in replayable()]


def parse_methods(text: str) -> list[str]:
    """`methods.parse_methods`, refusing a registered method the sweep does not search."""
    chosen = methods.parse_methods(text)
    searched = methods.names(sweep_only=True)
    for name in chosen:
        if name not in searched:
            raise InputError(f"method '{name}' has no search space (searched: {', '.join(searched)})")
    return chosen


def _recorded() -> str:
    """What the bundled profiles record, for --help only (loading them is a second of work)."""
    profiles = [Profile.load(path) for path in bundled_profile_paths()]
    lines = []
    for what in ("temperatures", "datasets"):
        values = sorted({v for p in profiles for v in getattr(p, what)()})
        lines.append(textwrap.fill(f"{what}: " + ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in values),
                                   78, initial_indent="  ", subsequent_indent="    ", break_on_hyphens=False))
    return "The bundled profiles record (--temperature, --dataset):\n\n" + "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = CliParser(
        prog="python -m experiments.sweep",
        description="Search every speculative-decoding method's configurations on one or more profiles, "
                    "rank them by predicted speedup, re-score the best in the simulator and write a report.",
        epilog=_recorded,
    )
    p.add_argument("--profile", action="append", metavar="FILE",
                   help="a Profile JSON (profiles.schema); repeat for several. Default: every bundled "
                        f"profile in {BUNDLED_PROFILES.relative_to(BUNDLED_PROFILES.parents[1])}/")
    p.add_argument("--methods", default="all",
                   help=f"comma-separated methods to search, or 'all' (default). Known: "
                        f"{', '.join(methods.names(sweep_only=True))}")
    p.add_argument("--temperature", type=float, default=None,
                   help="sampling temperature: scores each profile's acceptance models recorded at it "
                        "(default: each profile's lowest recorded temperature, 0 where recorded; the bundled "
                        "profiles' are listed below)")
    p.add_argument("--dataset", default=None,
                   help="acceptance models of this dataset only; default: MT-Bench where a drafter has it, else its "
                        "first listed dataset (the bundled profiles' are listed below)")
    p.add_argument("--batch", type=int, default=1,
                   help="sequences decoded together; the verify forward's cost grows with batch x tokens (default 1)")
    p.add_argument("--hardware", default=None,
                   help=f"move every roofline latency model to this hardware ({', '.join(hardware_names())}) keeping "
                        "its fitted efficiencies; default: the hardware each profile was measured on")
    for name, option in methods.space_options().items():      # the options the methods' spaces take
        p.add_argument(f"--{name.replace('_', '-')}", type=int, default=option.default,
                       help=f"{option.help} (default {option.default}); the configurations and memory it takes are "
                            "estimated first and a sweep that will not fit in the memory available is refused")
    p.add_argument("--estimate-only", action="store_true",
                   help="print the estimate (configurations, peak memory and time per profile and method) and stop")
    p.add_argument("--max-hours", type=float, default=MAX_HOURS,
                   help="refuse, before building anything, a sweep whose estimated run time (measured on a sample "
                        f"of its own work: closed forms, simulated re-scores, serving) exceeds this (default {MAX_HOURS:g})")
    p.add_argument("--ctx-len", type=int, default=None,
                   help="context length (prompt + generated tokens) at which forwards are costed (default: the "
                        "mean context of each profile's recorded workload, else 512)")
    p.add_argument("--token-trace", default=None, metavar="PARQUET",
                   help=f"a TokenTrace (traces.schema) of the profile's drafter: {', '.join(_replayed())} are then "
                        "scored by exact greedy replay of it instead of the closed forms (temperature 0 only); "
                        "default: none, every method is scored by the closed forms")
    p.add_argument("--rescore", type=int, default=2,
                   help="best configurations per (profile, method) re-scored in the simulator (default 2; 0 = none)")
    p.add_argument("--sim-tokens", type=int, default=256,
                   help="tokens generated per request: each simulated run generates them, and the closed forms price "
                        "what changes along a generation (Lookahead's pool filling up) over them (default 256)")
    p.add_argument("--sim-repeats", type=int, default=5,
                   help="seeded simulated runs per configuration, for the spread (default 5)")
    p.add_argument("--batch-sizes", default=None, metavar="B,B,..",
                   help="one answer per deployment (profile, hardware, dataset, temperature) at each of these batch "
                        "sizes, e.g. 1,2,4,8,16,32,64: the best configuration served by the simulator, its throughput "
                        "and latency, and the batch where speculation stops paying (default: --batch only)")
    p.add_argument("--export", default=None, metavar="ENGINES",
                   help="write the recommended configuration as these engines accept it, comma-separated from "
                        "vllm, sglang, hf: vllm_*.json, sglang_*.txt, hf_*.json and exports.md in --out "
                        "(default: none)")
    p.add_argument("--assumed", choices=ASSUMED_MODES, default="missing",
                   help=f"methods an engine offers ({', '.join(s.name for s in methods.specs() if s.engine_offered)}) that a profile did not "
                        "measure: 'missing' prices those with no drafter there from their architecture, their "
                        "acceptance carried from a bundled profile and marked ASSUMED; 'all' also adds a drafter of a "
                        "shape the profile lacks (a chain beside a measured tree; it may move measured rows' "
                        "ranks); 'none' scores what the profiles measured only (default: missing)")
    p.add_argument("--draft-model", default=None, metavar="MODEL",
                   help="a draft model to price on every GPU profile beside the measured ones: a costmodel.params "
                        "registry name or a Hugging Face config.json of the target's tokenizer; its acceptance is "
                        "ASSUMED as --assumed's (default: the registry's smallest model of the target's tokenizer, "
                        "where a profile measured no draft model)")
    p.add_argument("--top", type=int, default=50,
                   help="rows per (profile, method) in the CSV tables tables/<method>_top<N>.csv (default 50); the "
                        "report lists the first 5 (fewer when --top is smaller) and the zstd parquet tables keep "
                        "every configuration")
    p.add_argument("--out", default="out/sweep", help="output directory (default out/sweep); a directory holding "
                   "another run's files is refused unless --overwrite")
    add_overwrite_option(p)
    p.add_argument("--seed", type=int, default=0, help="seed of every random choice, the simulator's included (default 0)")
    p.add_argument("--executor", choices=EXECUTORS, default="local",
                   help="where evaluations run: local processes (default) or a Dask cluster (needs the 'cluster' extra)")
    p.add_argument("--workers", type=int, default=None,
                   help="worker processes (local) or local Dask workers, and processes drawing the figures; "
                        "default: one per CPU core")
    p.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="with --executor dask: address of a running Dask scheduler (tcp://host:8786); "
                        "default: start a local cluster")
    add_progress_option(p, "progress bars while building the space, scoring, serving and writing, for steps that "
                           "take more than a second,")
    return p


def options_from_args(args: argparse.Namespace) -> SweepOptions:
    for name in ("batch", "sim_tokens", "sim_repeats", "top", *methods.space_options()):
        if getattr(args, name) < 1:
            raise InputError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.rescore < 0:
        raise InputError(f"--rescore must be >= 0, got {args.rescore}")
    if args.ctx_len is not None and args.ctx_len < 1:
        raise InputError(f"--ctx-len must be >= 1 (tokens in the context), got {args.ctx_len}")
    if args.workers is not None and args.workers < 1:
        raise InputError(f"--workers must be >= 1, got {args.workers}")
    if not (args.max_hours > 0 and math.isfinite(args.max_hours)):
        raise InputError(f"--max-hours must be a number of hours > 0, got {args.max_hours}")
    if args.temperature is not None and not (0.0 <= args.temperature <= 10.0):
        raise InputError(f"--temperature must lie in [0, 10], got {args.temperature}")
    if args.token_trace is not None and not Path(args.token_trace).is_file():
        raise InputError(f"--token-trace: trace file not found: {args.token_trace}")
    if args.hardware:
        scoring.check_hardware(args.hardware)
    batch_sizes = deployments.parse_batch_sizes(args.batch_sizes) if args.batch_sizes is not None else None
    engines = parse_engines(args.export) if args.export is not None else []
    return SweepOptions(methods=parse_methods(args.methods), temperature=args.temperature,
                        dataset=args.dataset, batch=args.batch,
                        hardware=args.hardware, space={k: getattr(args, k) for k in methods.space_options()},
                        ctx_len=args.ctx_len, seed=args.seed,
                        rescore=args.rescore, sim_tokens=args.sim_tokens, sim_repeats=args.sim_repeats,
                        token_trace=args.token_trace, batch_sizes=batch_sizes, top=args.top, export=engines,
                        assumed=args.assumed, draft_model=args.draft_model)


@cli_entry
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    opts = options_from_args(args)
    profiles = with_assumed(load_profiles(args.profile), opts)
    if opts.token_trace:        # a trace of another target, drafter or dataset is refused, not relabelled
        opts.dataset = scoring.check_token_trace(opts.token_trace, profiles, opts.dataset)
    scoring.check_recorded(profiles, opts.temperature, opts.dataset)
    if opts.batch_sizes:
        deployments.check_batch_sizes(profiles, opts.batch_sizes, deployments.loads_of(
            profiles, opts.sim_tokens, lambda p: setting_of(p, opts).ctx_len))
    progress = progress_enabled(args.progress)
    workers = worker_count(args.workers) if args.executor == "local" or not args.scheduler else 1
    cost = estimate(profiles, opts, setting_of, workers)   # before any space is built (.estimate)
    if args.estimate_only:
        print(cost.describe())
        return 0
    check_fits(cost, opts, max_hours=args.max_hours)
    started = time.perf_counter()
    with open_run(args.out, "experiments.sweep", argv, args.overwrite):
        if progress:        # after every refusal, so a refused run prints its one line only
            print(f"estimate: {cost.configurations:,} configurations, ~{cost.bytes / 1e9:.2f} GB at the peak, "
                  f"~{cost.seconds / 60:.1f} min on {workers} worker(s)", file=sys.stderr)
        with contextlib.ExitStack() as figures:
            drawn = []          # each method's table and figure, written from the moment the tables are ranked

            def draw(tables):
                drawn.append(figures.enter_context(writing_methods(tables, Path(args.out), asdict(opts), workers)))

            with make_executor(args.executor, workers=workers if not args.scheduler else None,
                               address=args.scheduler, progress=progress, deadline=Deadline(args.max_hours)) as executor:
                result = run_sweep(profiles, opts, executor, choices=paper_choices.compare, scored=draw)
            written = write_outputs(result, Path(args.out), workers=workers, method_paths=drawn[0])
    n = sum(len(f) for f in result.tables.values())
    print(stdout_table(result))
    assumed = result.best[result.best["acceptance_source"] == ASSUMED] if "acceptance_source" in result.best else []
    if len(assumed):
        print("ASSUMED acceptance (not measured on the profile's target; the report says from where): "
              + ", ".join(f"{r.profile[:40]} {r.method} ({r.drafter})" for r in assumed.itertuples()))
    if result.skipped:
        print(f"{len(result.skipped)} (profile, method) pairs or batches not scored (the profile lacks what the "
              "method needs, or its latency tables stop below the batch); listed in the report", file=sys.stderr)
    print(f"\n{n} configurations on {len(profiles)} profile(s) in {time.perf_counter() - started:.1f} s; "
          f"report: {written['report']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
