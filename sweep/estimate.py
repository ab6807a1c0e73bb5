"""What a sweep will cost before it builds anything, and the guard that holds it to `--max-hours`.

Before: the configurations per (profile, method) are each method's own `space_size` (MCSD counts its
trees without enumerating them), so the estimate and the space cannot disagree on the rules. Bytes
and seconds are those counts times a cost per row and per token measured once per method by the
sweep's own code (`measure`; `python -m experiments.bench.sweep --costs sweep/costs.json` measured the
bundled table, `COSTS`, and says on which machine; a method it lacks is priced as the dearest one):
- a scored row: SAMPLE_ROWS rows of its space scored (its bytes, the scored table's, the working
  memory), and their CPU seconds against an eighth of them: the slope is a row's cost, the rest a
  scoring call's (a chunk of at most CHUNK_ROWS rows pays it once: the method's arrays, the frame),
  each the median of TIMED_REPEATS, timed without the memory tracer (which slowed them several-fold).
  Priced per row alone on a small sample, timed under the tracer, every row had paid a share of its
  call: 15x MCSD's cost, a 54 s estimate for the default sweep's 13 s (now 7 s: the three phases
  below; start-up, the figures and the files, about as much again on 2 cores, are not counted). A
  closed form costs about the same per row at any generation length, so nothing is grown with
  `--sim-tokens`;
- a simulated token: one stream of STREAM_TOKENS tokens (the vectorised stream's fixed cost is a small
  share of it), and a served token: one request of SERVE_TOKENS, both carried on linearly (a
  generation's steps are arrays of its length; one step's events serve a whole batch).
At its peak the sweep holds PEAK_COPIES scored copies of each row (an extra batch of
`--batch-sizes` keeps only its best rows, `sweep.spaces`, and costs EXTRA_BATCH_SHARE of a row's
scoring); each worker holds one task at a time: one (profile, method)'s space and PEAK_COPIES
scored copies of it (its chunks, their concatenation, the ranked table) with one chunk's working
memory, or one stream, or one served batch. The longest closed-form task is one (profile, method).

A sweep whose estimate exceeds the memory available or `--max-hours` is refused in one line, with the
estimate, before anything is built or written. An estimate is an estimate: `Deadline` stops a sweep
that runs past `--max-hours` all the same, between two of its tasks, in one line, before any output.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import statistics
import time
import tracemalloc
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import psutil

import methods
from common.errors import InputError, duration
from common.memory import available as available_memory, gb
from profiles.profile import Profile
from simulator.batch_load import WAVES
from sweep import deployments, scoring

SAMPLE_ROWS = 4_000        # rows of a space scored to measure its cost per row and per scoring call
TIMED_REPEATS = 3          # each timing the median of this many
STREAM_TOKENS = 65_536     # tokens of the one simulated stream that prices a token: its fixed cost a small share
SERVE_TOKENS = 512         # tokens of the one served request that does (serving steps one by one)
PEAK_COPIES = 3            # scored copies of a row alive at the peak: chunks (a worker's) or the tasks' frames (the
                           # parent's), their concatenation, the ranked table or parquet
CHUNK_ROWS = 25_000        # configurations a task scores at once (sweep.run)
MAX_HOURS = 6.0            # default --max-hours
EXTRA_BATCH_SHARE = 0.15   # a row priced at one more batch size, in rows scored: the default sweep's scoring took
                           # 4.8 s at one batch and 6.7 s at four (--batch-sizes 1,8,32,128; 2 cores)
COSTS = Path(__file__).with_name("costs.json")   # each method's Cost, measured once


@dataclass
class Cost:
    """One method's costs, measured once (module docstring)."""

    space_b: float = 0.0       # bytes per row of the space
    scored_b: float = 0.0      # bytes per row of a scored table
    work_b: float = 0.0        # working bytes per row while a chunk is scored
    score_s: float = 0.0       # CPU seconds per row scored
    score_call_s: float = 0.0  # CPU seconds per scoring call (a chunk of at most CHUNK_ROWS rows), beside its rows
    stream_s: float = 0.0      # CPU seconds per simulated token
    stream_b: float = 0.0      # bytes per simulated token
    serve_s: float = 0.0       # CPU seconds per served token
    serve_b: float = 0.0       # bytes per served token


@dataclass
class Estimate:
    table: pd.DataFrame      # profile, method, setups, configurations, bytes, work_bytes, work, *_s, seconds
    base_bytes: int          # this process before the sweep (interpreter, libraries, profiles)
    workers: int = 1

    @property
    def configurations(self) -> int:
        return int(self.table["configurations"].sum()) if len(self.table) else 0

    @property
    def bytes(self) -> int:
        """The peak: what the sweep keeps, and each worker's largest working set."""
        if not len(self.table):
            return self.base_bytes
        return self.base_bytes + int(self.table["bytes"].sum()) + self.workers * int(self.table["work_bytes"].max())

    def phases(self) -> dict[str, float]:
        """Seconds of the sweep's phases, one after the other: each its work shared by the workers, or
        its longest single task (a (profile, method)'s space, a configuration's repeats), whichever is longer."""
        t = self.table
        if not len(t):
            return {"the closed forms": 0.0, "the simulator's re-scores": 0.0, "serving the best": 0.0}
        return {"the closed forms": max(t["score_s"].sum() / self.workers, t["task_s"].max()),
                "the simulator's re-scores": max(t["simulate_s"].sum() / self.workers, t["repeats_s"].max()),
                "serving the best": t["serve_s"].sum() / self.workers}

    @property
    def seconds(self) -> float:
        return float(sum(self.phases().values()))

    def describe(self) -> str:
        """Per (profile, method) lines and the total, for stderr."""
        lines = [f"  {r.profile} / {r.method}: {r.configurations:,} configurations on {r.setups} setup(s), "
                 f"~{gb(r.bytes + r.work_bytes)}, ~{duration(r.seconds)} of work" for r in self.table.itertuples()]
        return "\n".join(["estimate before building:", *lines,
                          f"  total: {self.configurations:,} configurations, ~{gb(self.bytes)} at the peak, "
                          f"~{duration(self.seconds)} on {self.workers} worker(s) of scoring, re-scores and serving "
                          "(start-up, figures and writing not counted)"])


def estimate(profiles: list[Profile], opts, setting: Callable, workers: int = 1) -> Estimate:
    """Configurations, peak bytes and seconds of sweeping `profiles` with `opts` (a SweepOptions) on
    `workers` processes; `setting(profile, opts)` is the sweep's own."""
    batches = opts.batch_sizes or [opts.batch]
    extra_batches = len([b for b in batches if b != opts.batch])
    rows, costs = [], load_costs()
    for profile in profiles:
        scored_setting = setting(profile, opts)
        plain = len(batches)                     # plain decoding, served once per deployment and batch
        for method in opts.methods:
            spec = methods.get(method)
            try:
                found = scoring.setups(profile, method, scored_setting)
            except InputError:
                continue                         # the sweep lists it as not scored
            sizes = [spec.space_size(setup, **space_options(spec, opts)) for setup in found]
            count = sum(sizes)
            c = costs.get(method) or max(costs.values(), key=lambda cost: cost.score_s)
            scoring_s = count * c.score_s + sum(-(-n // CHUNK_ROWS) for n in sizes) * c.score_call_s
            rescored, served = min(opts.rescore, count), len(found) * len(batches) + plain
            plain = 0
            stream_s, serve_s = c.stream_s * opts.sim_tokens, c.serve_s * opts.sim_tokens * WAVES
            works = {"a space scored and ranked, its rows": (count * (c.space_b + PEAK_COPIES * c.scored_b)
                                                             + min(count, CHUNK_ROWS) * c.work_b),
                     "a simulated generation of": c.stream_b * opts.sim_tokens if rescored else 0.0,
                     "a served batch of generations of": WAVES * max(batches) * c.serve_b * opts.sim_tokens}
            what = max(works, key=works.get)
            rows.append({"profile": profile.name, "method": method, "setups": len(found), "configurations": count,
                         "bytes": int(count * PEAK_COPIES * c.scored_b),
                         "work_bytes": int(works[what]), "work": what,
                         "score_s": scoring_s * (1 + EXTRA_BATCH_SHARE * extra_batches),
                         "simulate_s": rescored * opts.sim_repeats * stream_s,
                         "serve_s": served * 2 * serve_s,      # at batch B, B at once, then one alone
                         "task_s": scoring_s,
                         "repeats_s": opts.sim_repeats * stream_s if rescored else 0.0})
    table = pd.DataFrame(rows, columns=["profile", "method", "setups", "configurations", "bytes", "work_bytes", "work",
                                        "score_s", "simulate_s", "serve_s", "task_s", "repeats_s"])
    table["seconds"] = table[["score_s", "simulate_s", "serve_s"]].sum(axis=1)
    return Estimate(table=table, base_bytes=int(psutil.Process().memory_info().rss), workers=max(1, int(workers)))


@functools.lru_cache(maxsize=1)
def load_costs() -> dict[str, Cost]:
    """Each method's Cost as `COSTS` holds it."""
    raw = json.loads(COSTS.read_text())
    return {method: Cost(**values) for method, values in raw["methods"].items()}


def measure(profile: Profile, spec, setup, space: pd.DataFrame, setting) -> Cost:
    """One method's `Cost` on `setup`, measured once by the sweep's own code: SAMPLE_ROWS rows of
    `space` (evenly spaced through it, so that they are its mix) scored, one stream of STREAM_TOKENS
    tokens and one served request of SERVE_TOKENS."""
    if space.empty:
        return Cost()
    rows = np.unique(np.linspace(0, len(space) - 1, min(len(space), SAMPLE_ROWS)).astype(int))
    sample = space.iloc[rows].reset_index(drop=True)
    task = scoring.ScoreTask(profile, spec.name, setup.base, sample, setting)
    few = dataclasses.replace(task, configs=sample.iloc[:max(1, len(sample) // 8)])
    scored, work_b, whole_s = _measured(lambda: scoring.score_task(task))
    few_s = _measured(lambda: scoring.score_task(few))[2]
    slope = (whole_s - few_s) / max(1, len(sample) - len(few.configs))
    row_s = slope if slope > 0 else whole_s / len(sample)      # a space too small to tell: all of it per row
    config = scoring.sim_config(scored.iloc[[0]])
    stream = scoring.SimTask(profile, spec.name, config, setting, 0, STREAM_TOKENS, 1)
    _, stream_b, stream_s = _measured(lambda: scoring.simulate_task(stream))
    served = deployments.ServeTask(profile, spec.name, config, 1, deployments.load_of(setting.ctx_len, SERVE_TOKENS), 0)
    _, serve_b, serve_s = _measured(lambda: deployments.serve_task(served))
    per_row, per_request = len(sample), SERVE_TOKENS * WAVES     # a served task: WAVES requests
    return Cost(space_b=sample.memory_usage(deep=True).sum() / per_row,
                scored_b=scored.memory_usage(deep=True).sum() / per_row, work_b=work_b / per_row,
                score_s=row_s, score_call_s=max(0.0, whole_s - row_s * len(sample)),
                stream_s=stream_s / STREAM_TOKENS, stream_b=stream_b / STREAM_TOKENS,
                serve_s=serve_s / per_request, serve_b=serve_b / per_request)


def space_options(spec, opts) -> dict:
    """The sweep options a method's `space` (and `space_size`) takes: those it declares (`spec.options`)."""
    return {k: opts.space[k] for k in spec.options}


def _traced(work: Callable) -> tuple[object, int]:
    """(what `work()` returns, the peak bytes it allocated: tracemalloc, numpy's arrays included)."""
    tracing = tracemalloc.is_tracing()
    if not tracing:
        tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    try:
        out = work()
        return out, max(0, tracemalloc.get_traced_memory()[1] - base)
    finally:
        if not tracing:
            tracemalloc.stop()


def _measured(work: Callable) -> tuple[object, int, float]:
    """(what `work()` returns, the peak bytes it allocates, its median CPU seconds over TIMED_REPEATS
    runs): after a warm-up run (imports, caches), the bytes traced in one run and the seconds timed
    in others (the tracer slows them)."""
    work()
    out, peak = _traced(work)
    return out, peak, statistics.median(_timed(work)[1] for _ in range(TIMED_REPEATS))


def _timed(work: Callable) -> tuple[object, float]:
    """(what `work()` returns, its CPU seconds: wall time on a shared machine says more about the others)."""
    start = time.process_time()
    out = work()
    return out, time.process_time() - start


def check_fits(est: Estimate, opts, available: int | None = None, max_hours: float = MAX_HOURS) -> None:
    """InputError (one line: the estimate, the limit and the options to lower) when the sweep will
    not fit in memory or would run past `max_hours`."""
    limit = available_memory() if available is None else available
    if est.bytes > limit:
        kept = est.bytes - est.workers * (int(est.table["work_bytes"].max()) if len(est.table) else 0)
        if kept >= est.bytes - kept:            # the spaces and their scored tables
            where = ""
            if len(est.table):
                worst = est.table.sort_values("bytes", ascending=False).iloc[0]
                where = f"; largest: {worst.profile} / {worst.method} {int(worst.configurations):,} configurations"
            raise InputError(f"{_given(opts.space)}: the sweep would hold {est.configurations:,} configurations, "
                             f"~{gb(est.bytes)} at its peak, but {gb(limit)} of memory is available{where}; "
                             f"lower {_names(opts.space)}, or pass fewer --methods / --profile")
        worst = est.table.sort_values("work_bytes", ascending=False).iloc[0]
        raise InputError(f"{_given({'sim_tokens': opts.sim_tokens})}: each of {est.workers} worker(s) would hold "
                         f"~{gb(worst.work_bytes)} at once ({worst.profile} / {worst.method}: {worst.work} that many "
                         f"tokens), ~{gb(est.bytes)} in all, but {gb(limit)} of memory is available; lower --sim-tokens")
    if est.seconds > max_hours * 3600:
        taken = {k: v for m in est.table["method"].unique() for k, v in space_options(methods.get(m), opts).items()}
        options = {"the closed forms": {**taken, "sim_tokens": opts.sim_tokens},
                   "the simulator's re-scores": {"sim_tokens": opts.sim_tokens, "sim_repeats": opts.sim_repeats,
                                                 "rescore": opts.rescore},
                   "serving the best": {"sim_tokens": opts.sim_tokens}}
        phases = est.phases()
        part = max(phases, key=phases.get)
        raise InputError(f"{_given(options[part])}: the sweep would run ~{duration(est.seconds)} on {est.workers} "
                         f"worker(s) ({part}: ~{duration(phases[part])}), beyond --max-hours {max_hours:g}; "
                         f"lower {_names(options[part])}, pass fewer --methods / --profile, or raise --max-hours")


@dataclass
class Deadline:
    """`--max-hours` held while the sweep runs: `check()` between tasks raises one line once it passed
    (nothing has been written by then: the sweep writes its outputs at the end)."""

    max_hours: float = MAX_HOURS
    started: float = dataclasses.field(default_factory=lambda: time.monotonic())    # the clock read when called

    def check(self, doing: str = "") -> None:
        spent = time.monotonic() - self.started
        if spent > self.max_hours * 3600:
            raise InputError(f"the sweep ran past --max-hours {self.max_hours:g} ({duration(spent)}"
                             f"{', ' + doing if doing else ''}) and stopped, nothing written; its estimate was "
                             "short: lower the options it named, or raise --max-hours")


def _given(options: dict) -> str:
    return " ".join(f"--{k.replace('_', '-')} {v}" for k, v in options.items())


def _names(options: dict) -> str:
    return ", ".join("--" + k.replace("_", "-") for k in options)
