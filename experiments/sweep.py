"""The main job: search every method's configuration space on one or more Profiles.

    python -m experiments.sweep                       # every bundled profile, every method
    python -m experiments.sweep --profile mine.json --methods sd,mcsd --batch 4 --hardware H100

Steps: load the profiles (default: every `data/profiles/*.json`), move their latency models to
`--hardware` if asked (`experiments.scoring.retarget`), enumerate each registered method's space
on each of its setups (`methods`: `spec.space(setup)`), cut it into chunks and hand the chunks to
the executor (local processes or Dask, `experiments.executor`), which scores them with the closed
forms or, given a TokenTrace, exact greedy replay (`experiments.scoring`). The best few configurations per (profile, method)
are then re-scored in the discrete-event simulator with several seeds, for their spread.
Then one answer per deployment (`experiments.deployments`): at each of `--batch-sizes` the closed
forms' best of every (method, drafter) is served by the simulator beside plain decoding, giving
the best configuration per batch and the batch where speculation stops paying; `--export` writes
it as vLLM / SGLang / transformers accept it (`experiments.export`).
Outputs (`experiments.report`): full tables (zstd parquet), the top `--top` per method as CSV,
best configurations, per-deployment answers, the papers' choices beside the sweep's, plots and a
markdown report in `--out`; a short table on stdout.
"""
from __future__ import annotations

import argparse
import functools
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

import methods
from calibrate.profile import Profile
from common.errors import InputError
from common.cli import CliParser, cli_entry
from common.rundir import add_overwrite_option, open_run
from experiments import deployments, scoring
from costmodel.hardware import hardware_names
from experiments.estimate import check_fits, estimate, space_options
from experiments.executor import EXECUTORS, make_executor, progress_bar, progress_enabled
from methods.engines import parse_engines
from experiments.papers import compare
from methods.spec import MethodSpec, Setup

DEFAULT_CTX = 512        # context of a Profile without a recorded workload

BUNDLED_PROFILES = Path(__file__).resolve().parents[1] / "data" / "profiles"
CHUNK_ROWS = 25_000          # configurations per executor task


@dataclass
class SweepOptions:
    methods: list[str] = field(default_factory=lambda: methods.names(sweep_only=True))
    temperature: float | None = None
    dataset: str | None = None
    batch: int = 1
    hardware: str | None = None
    space: dict[str, int] = field(default_factory=lambda: {k: o.default for k, o in methods.space_options().items()})
    ctx_len: int | None = None    # None: each Profile's workload context (else DEFAULT_CTX)
    seed: int = 0
    rescore: int = 2          # best configurations per (profile, method) re-scored in the simulator
    sim_tokens: int = 256     # tokens generated per request: simulated, and priced by the closed forms
    sim_repeats: int = 5      # seeded simulated runs per configuration
    token_trace: str | None = None
    batch_sizes: list[int] | None = None   # per-deployment answers at these batches (None: --batch only)
    top: int = 50             # CSV and markdown rows per (profile, method); parquet keeps all
    export: list[str] = field(default_factory=list)   # engines to write configurations for


@dataclass
class SweepResult:
    tables: dict[str, pd.DataFrame]
    best: pd.DataFrame
    paper_choices: pd.DataFrame | None
    options: dict[str, Any]
    timings: dict[str, float]
    skipped: list[str]
    profile_names: list[str]
    served: pd.DataFrame = field(default_factory=pd.DataFrame)      # every configuration served, per batch
    deployments: pd.DataFrame = field(default_factory=pd.DataFrame)  # best per (deployment, batch)
    stops_paying: pd.DataFrame = field(default_factory=pd.DataFrame)
    profiles: dict[str, Profile] = field(default_factory=dict)


def bundled_profile_paths() -> list[Path]:
    return sorted(BUNDLED_PROFILES.glob("*.json"))


def load_profiles(paths: list[str] | None) -> list[Profile]:
    """The user's profile files, or every bundled one; InputError when there are none."""
    if paths:
        return [Profile.load(p) for p in paths]
    found = bundled_profile_paths()
    if not found:
        raise InputError(f"no bundled profiles in {BUNDLED_PROFILES}; pass --profile FILE")
    return [Profile.load(p) for p in found]


def _chunks(frame: pd.DataFrame, rows: int) -> list[pd.DataFrame]:
    return [frame.iloc[i:i + rows].reset_index(drop=True) for i in range(0, len(frame), rows)] or [frame]


def _space(spec: MethodSpec, setup: Setup, opts: SweepOptions) -> pd.DataFrame:
    """The method's search space on `setup`, given the sweep options its `space` takes by name."""
    space = spec.space(setup, **space_options(spec, opts))
    if opts.token_trace and "monotone" in space:   # exact replay costs a pass over the trace per
        space = space[space.monotone].reset_index(drop=True)   # configuration: keep MCSD's monotonic rule
    return space


def _setting(profile: Profile, opts: SweepOptions, batch: int | None = None) -> scoring.Setting:
    """The scoring setting of one Profile: its forwards costed at --ctx-len, else at the mean
    context of the workload its traces saw (prompt + half the new tokens), else DEFAULT_CTX."""
    ctx = opts.ctx_len if opts.ctx_len is not None else (profile.workload_ctx(opts.dataset) or DEFAULT_CTX)
    return scoring.Setting(temperature=opts.temperature, batch=opts.batch if batch is None else batch,
                           ctx_len=int(round(ctx)), dataset=opts.dataset, token_trace=opts.token_trace,
                           new_tokens=opts.sim_tokens)


def run_sweep(profiles: list[Profile], opts: SweepOptions, executor) -> SweepResult:
    """Score every configuration of every method on every profile; re-score the best in the simulator."""
    timings: dict[str, float] = {}
    skipped: list[str] = []
    setting = functools.partial(_setting, opts=opts)
    t0 = time.perf_counter()
    if opts.hardware:  # measured-table profiles (e.g. a CPU recording) cannot move: skipped, said so
        moved = []
        for p in profiles:
            try:
                moved.append(scoring.retarget(p, opts.hardware))
            except InputError as exc:
                skipped.append(f"{p.name}: {exc}")
        if not moved:
            raise InputError(skipped[0])
        profiles = moved
    tables = _score_tables(profiles, opts, executor, opts.batch, skipped)
    timings["score"] = time.perf_counter() - t0

    t1 = time.perf_counter()
    best = _top(tables, opts.rescore)
    by_name = {p.name: p.to_dict() for p in profiles}
    by_profile = {p.name: p for p in profiles}
    sim_tasks = [
        scoring.SimTask(by_name[best["profile"].iat[i]], best["method"].iat[i], scoring.sim_config(best.iloc[[i]]),
                        setting(by_profile[best["profile"].iat[i]]), opts.seed + i, opts.sim_tokens, opts.sim_repeats)
        for i in range(len(best))
    ]
    sims = executor.map(scoring.simulate_task, sim_tasks, desc="simulating the best") if sim_tasks else []
    if sims:
        best = pd.concat([best.reset_index(drop=True), pd.DataFrame(sims)], axis=1)
    best_one = best.sort_values("speedup", ascending=False).groupby(["profile", "method"], sort=False).head(1)
    timings["simulate"] = time.perf_counter() - t1
    choices = compare(tables, best)

    t2 = time.perf_counter()
    served = _serve_deployments(profiles, opts, executor, tables)
    timings["deployments"] = time.perf_counter() - t2
    return SweepResult(tables=tables, best=best_one.reset_index(drop=True), paper_choices=choices,
                       options=asdict(opts), timings=timings, skipped=skipped,
                       profile_names=[p.name for p in profiles], served=served,
                       deployments=deployments.best_per_batch(served), stops_paying=deployments.stops_paying(served),
                       profiles=by_profile)


def _score_tables(profiles: list[Profile], opts: SweepOptions, executor, batch: int,
                  skipped: list[str]) -> dict[str, pd.DataFrame]:
    """Every configuration of every method on every profile scored by the closed forms at `batch`;
    a (profile, method) without a setup is added to `skipped` with the reason."""
    builds = []        # (profile as dict, method, setup, setting): one space each
    for profile in profiles:
        raw, setting = profile.to_dict(), _setting(profile, opts, batch)
        for method in opts.methods:
            try:
                builds += [(raw, method, setup, setting) for setup in scoring.setups(profile, method, setting)]
            except InputError as exc:
                skipped.append(str(exc))
    tasks: list[scoring.ScoreTask] = []
    with progress_bar(len(builds), f"building the search space (batch {batch})",
                      getattr(executor, "progress", False), unit="space") as bar:
        for raw, method, setup, setting in builds:
            space = _space(methods.get(method), setup, opts)
            tasks += [scoring.ScoreTask(raw, method, setup.base, chunk, setting) for chunk in _chunks(space, CHUNK_ROWS)]
            bar.update()
    if not tasks:
        raise InputError("no (profile, method) pair can be scored: " + "; ".join(skipped[:3]))
    return _rank(executor.map(scoring.score_task, tasks, desc=f"scoring configurations (batch {batch})"))


def _serve_deployments(profiles: list[Profile], opts: SweepOptions, executor,
                       tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """At each batch size: the closed forms' best per (deployment, method, drafter), scored at that
    batch, served by the simulator beside plain decoding (`experiments.deployments`)."""
    by_name = {p.name: p.to_dict() for p in profiles}
    hardware = {p.name: p.hardware for p in profiles}
    ctx = {p.name: _setting(p, opts).ctx_len for p in profiles}
    heldout = {p.name: p.heldout_error() for p in profiles}
    frames = []
    for batch in opts.batch_sizes or [opts.batch]:
        scored = tables if batch == opts.batch else _score_tables(profiles, opts, executor, batch, [])
        cands = deployments.candidates(scored, hardware)
        tasks, rows = deployments.serve_tasks(cands, by_name, batch, ctx, opts.sim_tokens, opts.seed)
        served = executor.map(deployments.serve_task, tasks, desc=f"serving the best (batch {batch})")
        frames.append(deployments.answers(rows, served, batch, heldout))
    return pd.concat(frames, ignore_index=True)


def _rank(scored: list[pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """Concatenate the chunks per method; rank by predicted speedup within each profile."""
    by_method: dict[str, list[pd.DataFrame]] = {}
    for frame in scored:
        by_method.setdefault(str(frame["method"].iloc[0]), []).append(frame)
    tables = {}
    for method in methods.names():
        if method not in by_method:
            continue
        frame = pd.concat(by_method[method], ignore_index=True)
        frame = frame.sort_values(["profile", "speedup"], ascending=[True, False], kind="stable")
        frame["rank"] = frame.groupby("profile").cumcount() + 1
        tables[method] = frame.reset_index(drop=True)
    return tables


def _top(tables: dict[str, pd.DataFrame], n: int) -> pd.DataFrame:
    rows = [frame.groupby("profile").head(n) for frame in tables.values()]
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()


def _replayed() -> list[str]:
    from traces.replay import replayable

    return [m for m in methods.names(sweep_only=True) if m in replayable()]


def parse_methods(text: str) -> list[str]:
    """`methods.parse_methods`, refusing a registered method the sweep does not search."""
    chosen = methods.parse_methods(text)
    searched = methods.names(sweep_only=True)
    for name in chosen:
        if name not in searched:
            raise InputError(f"method '{name}' has no search space (searched: {', '.join(searched)})")
    return chosen


def _recorded(what: str) -> list[str]:
    """The datasets or temperatures the bundled profiles record (for --help)."""
    values = sorted({v for path in bundled_profile_paths() for v in getattr(Profile.load(path), what)()})
    return [f"{v:g}" if isinstance(v, float) else str(v) for v in values]


def build_parser() -> argparse.ArgumentParser:
    p = CliParser(
        prog="python -m experiments.sweep",
        description="Search every speculative-decoding method's configurations on one or more profiles, "
                    "rank them by predicted speedup, re-score the best in the simulator and write a report.",
    )
    p.add_argument("--profile", action="append", metavar="FILE",
                   help="a Profile JSON (calibrate.profile); repeat for several. Default: every bundled "
                        f"profile in {BUNDLED_PROFILES.relative_to(BUNDLED_PROFILES.parents[1])}/")
    p.add_argument("--methods", default="all",
                   help=f"comma-separated methods to search, or 'all' (default). Known: "
                        f"{', '.join(methods.names(sweep_only=True))}")
    p.add_argument("--temperature", type=float, default=None,
                   help="sampling temperature: scores each profile's acceptance models recorded at it "
                        "(default: each profile's lowest recorded temperature, 0 where recorded). Bundled profiles "
                        f"record: {', '.join(_recorded('temperatures'))}")
    p.add_argument("--dataset", default=None,
                   help="acceptance models of this dataset only; default: MT-Bench where a drafter has it, else its "
                        f"first listed dataset. Bundled profiles record: {', '.join(_recorded('datasets'))}")
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
                   help="print the estimate (configurations and peak memory per profile and method) and stop")
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
    p.add_argument("--top", type=int, default=50,
                   help="rows per (profile, method) in the CSV tables and the report (default 50); the zstd "
                        "parquet tables keep every configuration")
    p.add_argument("--out", default="out/sweep", help="output directory (default out/sweep); a directory holding "
                   "another run's files is refused unless --overwrite")
    add_overwrite_option(p)
    p.add_argument("--seed", type=int, default=0, help="seed of every random choice, the simulator's included (default 0)")
    p.add_argument("--executor", choices=EXECUTORS, default="local",
                   help="where evaluations run: local processes (default) or a Dask cluster (needs the 'cluster' extra)")
    p.add_argument("--workers", type=int, default=None,
                   help="worker processes (local) or local Dask workers; default: one per CPU core")
    p.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="with --executor dask: address of a running Dask scheduler (tcp://host:8786); "
                        "default: start a local cluster")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bars on stderr while building the space, scoring and writing, for steps that take "
                        "more than a second (default: only when stderr is a terminal)")
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
                        token_trace=args.token_trace, batch_sizes=batch_sizes, top=args.top, export=engines)


@cli_entry
def main(argv: list[str] | None = None) -> int:
    from experiments.report import stdout_table, write_outputs

    args = build_parser().parse_args(argv)
    opts = options_from_args(args)
    profiles = load_profiles(args.profile)
    if opts.token_trace:        # a trace of another target, drafter or dataset is refused, not relabelled
        opts.dataset = scoring.check_token_trace(opts.token_trace, profiles, opts.dataset)
    scoring.check_recorded(profiles, opts.temperature, opts.dataset)
    progress = progress_enabled(args.progress)
    cost = estimate(profiles, opts, _space, _setting)     # before any space is built (experiments.estimate)
    if args.estimate_only:
        print(cost.describe())
        return 0
    check_fits(cost, opts.space)
    started = time.perf_counter()
    with open_run(args.out, "experiments.sweep", argv, args.overwrite):
        if progress:        # after every refusal, so a refused run prints its one line only
            print(f"estimate: {cost.configurations:,} configurations, ~{cost.bytes / 1e9:.2f} GB at the peak",
                  file=sys.stderr)
        with make_executor(args.executor, workers=args.workers, address=args.scheduler,
                           progress=progress) as executor:
            result = run_sweep(profiles, opts, executor)
        written = write_outputs(result, Path(args.out), progress=progress)
    n = sum(len(f) for f in result.tables.values())
    print(stdout_table(result))
    if result.skipped:
        print(f"{len(result.skipped)} (profile, method) pairs not scored (the profile lacks what the method needs); "
              f"listed in the report", file=sys.stderr)
    print(f"\n{n} configurations on {len(profiles)} profile(s) in {time.perf_counter() - started:.1f} s; "
          f"report: {written['report']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
