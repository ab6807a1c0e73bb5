"""The sweep (the main job's library): search every method's configuration space on one or more Profiles.

Steps: load the profiles (default: every `data/profiles/*.json`), move their latency models to
`--hardware` if asked (`profiles.Profile.on_hardware`), enumerate each registered method's space
on each of its setups (`methods`: `spec.space(setup)`), cut it into chunks and hand the chunks to
the executor (local processes or Dask, `sweep.executor`), which scores them with the closed
forms or, given a TokenTrace, exact greedy replay (`sweep.scoring`), and ranks them in
one order (`sweep.ranking`: what fits in memory first). The best few configurations per
(profile, method) are then re-scored in the discrete-event simulator with several seeds, for their
spread, each task seeded from what it is (`common.seeds.derive_seed`).
Then one answer per deployment (`sweep.deployments`): at each of `--batch-sizes` the closed
forms' best of every (method, drafter) is served by the simulator beside plain decoding, giving
the best configuration per batch and the batch where speculation stops paying; `--export` writes
it as vLLM / SGLang / transformers accept it (`sweep.export`).
Outputs (`sweep.report`): full tables (zstd parquet), the top `--top` per method as CSV,
best configurations, per-deployment answers, the papers' choices beside the sweep's, plots and a
markdown report in `--out`; a short table on stdout.
"""
from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

import methods
from calibrate import assumed
from common.bundled import bundled
from profiles.profile import Profile
from common.errors import InputError
from common.seeds import derive_seed
from simulator.batch_load import BatchLoad
from sweep import deployments, export, ranking, scoring
from sweep.spaces import SpaceTask, Unpriced, built_space, rank_tables, score_space
from sweep.estimate import space_options
from methods.spec import MethodSpec, Setup

DEFAULT_CTX = 512        # context of a Profile without a recorded workload

BUNDLED_PROFILES = bundled("profiles")


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
    assumed: str = "missing"  # engine-offered methods a Profile did not measure: priced, acceptance ASSUMED
    draft_model: str | None = None   # a registry name or config.json priced as a draft model beside the measured


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
    exports: list[dict[str, Any]] = field(default_factory=list)      # with --export: sweep.export.plan's entries


def bundled_profile_paths() -> list[Path]:
    return sorted(BUNDLED_PROFILES.glob("*.json"))


def load_profiles(paths: list[str] | None) -> list[Profile]:
    """The user's profile files, or every bundled one; InputError when there are none. A file named
    twice (by any path) is loaded once, with a note on stderr: swept twice, its rows would count twice
    (ties, tables); two files whose Profiles share a name are refused naming both, since every table
    keys its rows by that name."""
    if not paths:
        paths = bundled_profile_paths()
        if not paths:
            raise InputError(f"no bundled profiles in {BUNDLED_PROFILES}; pass --profile FILE")
    unique: dict[Path, str] = {}
    repeated = []
    for path in map(str, paths):
        key = Path(path).resolve()
        if key in unique:
            first = unique[key]
            repeated.append(path if path == first else f"{path} (= {first})")
        else:
            unique[key] = path
    if repeated:
        print(f"note: --profile {', '.join(repeated)} named a file already given: each file is swept once",
              file=sys.stderr)
    profiles, files = [], {}
    for path in unique.values():
        profile = Profile.load(path)
        if profile.name in files:
            raise InputError(f"--profile {path} and {files[profile.name]} both hold a profile named "
                             f"'{profile.name}' (the sweep's tables key rows by it): rename one (its \"name\" field)")
        files[profile.name] = path
        profiles.append(profile)
    return profiles


def with_assumed(profiles: list[Profile], opts: SweepOptions) -> list[Profile]:
    """Each Profile with the engine-offered methods among `opts.methods` it did not measure, priced
    from their architectures and their acceptance ASSUMED (`calibrate.assumed`, `opts.assumed`)."""
    return [assumed.with_assumed(p, opts.methods, opts.assumed, opts.draft_model) for p in profiles]


def space_of(spec: MethodSpec, setup: Setup, opts: SweepOptions) -> pd.DataFrame:
    """The method's search space on `setup`, given the sweep options its `space` takes by name."""
    return built_space(spec, setup, space_options(spec, opts), bool(opts.token_trace))


def setting_of(profile: Profile, opts: SweepOptions, batch: int | None = None) -> scoring.Setting:
    """The scoring setting of one Profile: its forwards costed at --ctx-len, else at the mean
    context of the workload its traces saw (prompt + half the new tokens), else DEFAULT_CTX. A
    Profile that merged an engine's measurement answers for that deployment first: its dataset and
    temperature where none was asked (`Profile.measured`)."""
    measured = None if opts.token_trace else profile.measured()
    dataset = opts.dataset if opts.dataset is not None or measured is None else measured.entry.dataset
    temperature = opts.temperature if opts.temperature is not None or measured is None else measured.entry.temperature
    ctx = opts.ctx_len if opts.ctx_len is not None else (profile.workload_ctx(dataset) or DEFAULT_CTX)
    return scoring.Setting(temperature=temperature, batch=opts.batch if batch is None else batch,
                           ctx_len=int(round(ctx)), dataset=dataset, token_trace=opts.token_trace,
                           new_tokens=opts.sim_tokens)


def run_sweep(profiles: list[Profile], opts: SweepOptions, executor, choices: Callable | None = None,
              scored: Callable[[dict[str, pd.DataFrame]], Any] | None = None) -> SweepResult:
    """Score every configuration of every method on every profile; re-score the best in the simulator
    and serve each deployment's best at every batch size; `choices(tables, best)` sets the papers' own
    choices beside the sweep's (`papers.choices.compare`); `scored(tables)` is called with the ranked
    tables as soon as they are (the command starts writing their files there, `sweep.report.writing_methods`)."""
    timings: dict[str, float] = {}
    skipped: list[str] = []
    t0 = time.perf_counter()
    if opts.hardware:  # measured-table profiles (e.g. a CPU recording) cannot move: skipped, said so
        moved = []
        for p in profiles:
            try:
                moved.append(p.on_hardware(opts.hardware))
            except InputError as exc:
                skipped.append(f"{p.name}: {exc}")
        if not moved:
            raise InputError(skipped[0])
        profiles = moved
    batches = opts.batch_sizes or [opts.batch]
    tables, best_at = _score_tables(profiles, opts, executor, opts.batch, skipped, tuple(batches))
    if not tables:
        raise InputError(f"no (profile, method) pair can be priced at batch {opts.batch}: {skipped[-1]}")
    timings["score"] = time.perf_counter() - t0
    if scored is not None:
        scored(tables)

    t1 = time.perf_counter()
    best = _top(tables, max(opts.rescore, 1))       # --rescore 0: the closed forms' best, not simulated
    by_profile = {p.name: p for p in profiles}
    sim_tasks = _sim_tasks(best if opts.rescore else best.iloc[:0], by_profile, opts)   # --rescore 0: none
    loads = deployments.loads_of(profiles, opts.sim_tokens, lambda p: setting_of(p, opts).ctx_len)
    deployed = deployments.candidates(tables, {p.name: p.hardware for p in profiles})
    serve_tasks, serve_rows = (deployments.serve_tasks(deployed, by_profile, opts.batch, loads, opts.seed,
                                                       every=deployed) if opts.batch in batches else ([], None))
    # the re-scores and the served loads at --batch need nothing of each other: one map keeps every
    # worker busy across both (two maps each waited for their slowest task with a core idle)
    done = executor.map(simulate_or_serve, serve_tasks + sim_tasks,
                        desc="re-scoring the best and serving the deployments") if serve_tasks or sim_tasks else []
    served_now, sims = done[:len(serve_tasks)], done[len(serve_tasks):]
    if sims:
        best = pd.concat([best.reset_index(drop=True), pd.DataFrame(sims)], axis=1)
    best_one = best_with_intervals(ranking.best_of(best, ["profile", "method"])
                              .merge(_ties(tables), on=["profile", "method"], how="left"), by_profile)
    paper_choices = choices(tables, best) if choices is not None else None
    timings["simulate_and_serve"] = time.perf_counter() - t1

    t2 = time.perf_counter()
    known = {}                      # each configuration's alone_s, served once (`deployments.alone_once`)
    served_now = deployments.alone_of(serve_tasks, served_now, known)
    others = _serve_other_batches(profiles, opts, executor, deployed, best_at, loads, skipped, known)
    served = pd.concat([deployments.answers(serve_rows, served_now, batch, loads, by_profile) if batch == opts.batch
                        else others[batch] for batch in batches], ignore_index=True)
    exports = export.plan(served, by_profile, opts.export, loads, opts.seed) if opts.export else []
    timings["other_batches"] = time.perf_counter() - t2
    return SweepResult(tables=tables, best=best_one.reset_index(drop=True), paper_choices=paper_choices,
                       options=asdict(opts), timings=timings, skipped=skipped,
                       profile_names=[p.name for p in profiles], served=served,
                       deployments=deployments.best_per_batch(served), stops_paying=deployments.stops_paying(served),
                       profiles=by_profile, exports=exports)


def _score_tables(profiles: list[Profile], opts: SweepOptions, executor, batch: int, skipped: list[str],
                  other_batches: tuple[int, ...] = ()) -> tuple[dict[str, pd.DataFrame], dict[int, list]]:
    """Every configuration of every method on every profile scored by the closed forms at `batch`,
    and at each of `other_batches` the best per candidate group (`sweep.spaces`); a (profile, method)
    without a setup, or whose latency tables stop short of `batch`, is added to `skipped` with the
    reason. Returns the ranked tables and, per other batch, each task's best rows or Unpriced."""
    tasks: list[SpaceTask] = []
    for profile in profiles:
        setting = setting_of(profile, opts, batch)
        for method in opts.methods:
            try:
                found = scoring.setups(profile, method, setting)
            except InputError as exc:
                skipped.append(str(exc))
                continue
            if found:
                tasks.append(SpaceTask(profile, method, [setup.base for setup in found], setting,
                                       space_options(methods.get(method), opts), bool(opts.token_trace),
                                       other_batches))
    if not tasks:
        raise InputError("no (profile, method) pair can be scored: " + "; ".join(skipped[:3]))
    scored = executor.map(score_space, tasks, desc=f"scoring configurations (batch {batch})")
    skipped += _not_priced([s.table for s in scored], batch)
    tables = rank_tables([s.table for s in scored if not isinstance(s.table, Unpriced)])
    return tables, {b: [s.best_at[b] for s in scored] for b in other_batches if b != batch}


def _not_priced(answers: list, batch: int) -> list[str]:
    """The skipped lines of the (profile, method) tasks a Profile could not price at `batch`."""
    return list(dict.fromkeys(f"profile '{u.profile}' at batch {batch}: not priced, {u.reason} (a batch is not "
                              "extrapolated)" for u in answers if isinstance(u, Unpriced)))


def _sim_tasks(best: pd.DataFrame, by_profile: dict[str, Profile], opts: SweepOptions) -> list[scoring.SimTask]:
    """The simulator's re-score of each row of `best`, each with a seed of its own (profile,
    configuration, load), not a counter."""
    tasks = []
    for i in range(len(best)):
        row, name = best.iloc[i:i + 1], best["profile"].iat[i]
        config = scoring.sim_config(row)
        seed = derive_seed(opts.seed, "stream", name, row["method"].iat[0], sorted(config.items()), opts.sim_tokens)
        tasks.append(scoring.SimTask(by_profile[name], row["method"].iat[0], config, setting_of(by_profile[name], opts),
                                     seed, opts.sim_tokens, opts.sim_repeats))
    return tasks


def simulate_or_serve(task: scoring.SimTask | deployments.ServeTask) -> dict[str, Any]:
    """Executor entry point of the stage after scoring: a re-score in the simulator or a served load."""
    return scoring.simulate_task(task) if isinstance(task, scoring.SimTask) else deployments.serve_task(task)


def _serve_other_batches(profiles: list[Profile], opts: SweepOptions, executor, deployed: pd.DataFrame,
                         best_at: dict[int, list], loads: dict[str, BatchLoad], skipped: list[str],
                         known: dict[tuple, float]) -> dict[int, pd.DataFrame]:
    """The batch sizes of --batch-sizes other than --batch, served in one executor map (one map a batch
    waited for each batch's slowest task with a core idle): at each, the closed forms' best per
    (deployment, method, drafter) there (`best_at`, from the scoring tasks) beside plain decoding
    under each deployment's load (`sweep.deployments`), each configuration served alone once
    (`known`, the alone_s served before). A pair a Profile cannot price at a batch is added to
    `skipped`, and a deployment none of whose methods it prices there answers that it is not priced
    (`deployed`, the deployments scored at --batch, each answers at every batch)."""
    by_name = {p.name: p for p in profiles}
    hardware = {p.name: p.hardware for p in profiles}
    planned = {}
    for batch in sorted(best_at):
        skipped += [reason for reason in _not_priced(best_at[batch], batch) if reason not in skipped]
        cands = deployments.candidates_of([rows for rows in best_at[batch] if not isinstance(rows, Unpriced)], hardware)
        planned[batch] = deployments.serve_tasks(cands, by_name, batch, loads, opts.seed, every=deployed)
    tasks = deployments.alone_once([task for batch_tasks, _ in planned.values() for task in batch_tasks], known)
    served = deployments.alone_of(tasks, executor.map(deployments.serve_task, tasks, desc="serving the best at "
                                                      f"batch {', '.join(map(str, planned))}"), known)
    out, start = {}, 0
    for batch, (batch_tasks, rows) in planned.items():
        out[batch] = deployments.answers(rows, served[start:start + len(batch_tasks)], batch, loads, by_name)
        start += len(batch_tasks)
    return out


def best_with_intervals(best: pd.DataFrame, profiles: dict[str, Profile]) -> pd.DataFrame:
    """The best rows with the 90% interval of each one's long-run speedup and the prompts a run needs
    to tell it from plain decoding (`sweep.scoring.speedup_intervals`)."""
    if best.empty:
        return best
    parts = [pd.DataFrame(scoring.speedup_intervals(profiles[name], rows["dataset"], rows["method"], rows["speedup"],
                                                    rows["tokens_per_step"]), index=rows.index)
             for name, rows in best.groupby("profile", sort=False)]
    return best.join(pd.concat(parts))


def _top(tables: dict[str, pd.DataFrame], n: int) -> pd.DataFrame:
    rows = [ranking.top_of_table(frame, n) for frame in tables.values()]
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()


def _ties(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Per (profile, method): how many other configurations that fit tie with its best, i.e. are
    predicted within the Profile's held-out error of it (`sweep.ranking.ties_with_best`)."""
    rows = []
    for frame in tables.values():
        read = frame[[c for c in ("profile", "method", "speedup", "heldout_error") if c in frame]]
        fitting = read[frame["fits"].to_numpy(dtype=bool)] if "fits" in frame else read
        if fitting.empty:
            continue
        ties = ranking.ties_with_best(fitting, ["profile"]).to_numpy()
        first = np.flatnonzero(~fitting["profile"].duplicated().to_numpy())      # a row per profile
        rows.append(fitting.iloc[first][["profile", "method"]].assign(ties=ties[first]).reset_index(drop=True))
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(columns=["profile", "method", "ties"])
