"""What a sweep will cost before it builds anything: configurations, memory and time per (profile, method).

The counts come from each method's own `space_size` (methods.spec; MCSD counts its trees per
running product instead of enumerating them), so the estimate and the space cannot disagree on
the rules. Everything else is measured on a small sample of the same work, run by the sweep's own
code, and scaled (`Cost`):
- the closed forms: bytes per row of a space and of its scored table, the working memory per row
  while a chunk is scored, and CPU seconds per row, priced over the sweep's generation length
  (`--sim-tokens`; past SAMPLE_TOKENS the sample is priced at the three LONG_TOKENS, its memory
  carried on linearly and its time as a + c * tokens^p, so a long generation is never priced to
  estimate it);
- the simulator: a stream's and a served request's fixed and per-token seconds and bytes, from
  samples of STREAM_TOKENS and SERVE_TOKENS (the longer one lengthened until its time clearly
  rises over the shorter's), carried on linearly (a simulated generation's steps are arrays of
  its length; one step's events serve a whole batch, so serving takes about the same time at
  any batch).
At its peak the sweep holds every space chunk and PEAK_COPIES scored copies of each row (the
scored chunks, their ranked concatenation, the plain copy written as parquet); with --batch-sizes
beyond --batch, one more scored copy per batch is alive while it is served; each worker holds one
chunk, stream or served batch at a time. Time is the sum of the parts over the workers.

A sweep whose estimate exceeds the memory available (psutil) or `--max-hours` is refused in one
line, with the estimate, before any space is built or any file written.
"""
from __future__ import annotations

import dataclasses
import math
import time
import tracemalloc
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

import methods
from profiles.profile import Profile
from common.errors import InputError, duration
from sweep import deployments, scoring

SAMPLE_ROWS = 2_000      # rows of the sample that are scored
PEAK_COPIES = 3          # scored copies of a row alive at the peak (see the module docstring)
CHUNK_ROWS = 25_000      # configurations per executor task (sweep.run)
SAMPLE_TOKENS = 512      # the longest generation the closed forms' sample is priced over; past it
LONG_TOKENS = (128, 256, 512)  # they are priced at these and their growth carried on
STREAM_TOKENS = (500, 2_000)   # sample streams: the simulator's fixed cost and its cost per token
SERVE_TOKENS = (32, 128)       # sample requests served: the same for serving
GROWTH, GROW_LIMIT_S = 4, 0.2  # the longer sample run lengthened (x GROWTH, up to these CPU seconds)
TIMINGS = 3              # each sample timed this many times, the least kept (closed forms: over this many row sets)
FLAT = 0.1               # a rise in time smaller than this fraction is the noise of CPU time
MAX_HOURS = 6.0          # default --max-hours


@dataclass
class Cost:
    """One method's measured costs at the sweep's generation length (module docstring)."""

    space_b: float = 0.0      # bytes per row of the space
    scored_b: float = 0.0     # bytes per row of a scored table
    work_b: float = 0.0       # working bytes per row while a chunk is scored
    score_s: float = 0.0      # seconds per row scored
    stream_s: float = 0.0     # seconds of one simulated stream
    stream_b: float = 0.0     # bytes one simulated stream holds
    serve_s: float = 0.0      # seconds of one configuration served (at any batch: WAVES x B requests)
    serve_b: float = 0.0      # bytes one served request holds


@dataclass
class Estimate:
    table: pd.DataFrame      # profile, method, setups, configurations, bytes, work_bytes, *_s, seconds
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
        """Seconds of the sweep's phases, one after the other: each its work shared by the workers,
        or its longest single task (a chunk, a configuration's repeats), whichever is longer."""
        t = self.table
        if not len(t):
            return {"the closed forms": 0.0, "the simulator's re-scores": 0.0, "serving the best": 0.0}
        return {"the closed forms": max(t["score_s"].sum() / self.workers, t["chunk_s"].max()),
                "the simulator's re-scores": max(t["simulate_s"].sum() / self.workers, t["repeats_s"].max()),
                "serving the best": t["serve_s"].sum() / self.workers}

    @property
    def seconds(self) -> float:
        return float(sum(self.phases().values()))

    def describe(self) -> str:
        """Per (profile, method) lines and the total, for stderr."""
        lines = [f"  {r.profile} / {r.method}: {r.configurations:,} configurations on {r.setups} setup(s), "
                 f"~{_gb(r.bytes + r.work_bytes)}, ~{duration(r.seconds)} of work" for r in self.table.itertuples()]
        return "\n".join(["estimate before building:", *lines,
                          f"  total: {self.configurations:,} configurations, ~{_gb(self.bytes)} at the peak, "
                          f"~{duration(self.seconds)} on {self.workers} worker(s)"])


def _gb(n: float) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.0f} MB"


def available_memory() -> int:
    """Bytes the system can still give this process (psutil: free + reclaimable page cache)."""
    import psutil

    return int(psutil.virtual_memory().available)


def _process_bytes() -> int:
    import psutil

    return int(psutil.Process().memory_info().rss)


def estimate(profiles: list[Profile], opts, space: Callable, setting: Callable, workers: int = 1) -> Estimate:
    """Configurations, peak bytes and seconds of sweeping `profiles` with `opts` (a SweepOptions) on
    `workers` processes, without building any space larger than the sample or pricing any generation
    longer than SAMPLE_TOKENS. `space(spec, setup, opts)` and `setting(profile, opts)` are the sweep's own."""
    batches = opts.batch_sizes or [opts.batch]
    extra_batches = len([b for b in batches if b != opts.batch])
    copies = PEAK_COPIES + extra_batches
    declared = methods.space_options()          # each option at its sample value: a small space of the same kind
    sample_opts = dataclasses.replace(opts, space={k: min(v, declared[k].sample or v) for k, v in opts.space.items()})
    rows = []
    costs: dict[str, Cost] = {}                 # method -> its costs, measured on the first profile that has it
    for profile in profiles:
        scored_setting = setting(profile, opts)
        plain = len(batches)                     # plain decoding, served once per deployment and batch
        for method in opts.methods:
            spec = methods.get(method)
            try:
                found = scoring.setups(profile, method, scored_setting)
            except InputError:
                continue                      # the sweep lists it as not scored
            takes = space_options(spec, opts)
            count = sum(spec.space_size(setup, **takes) for setup in found)
            if method not in costs:
                costs[method] = _measure(profile, spec, found[0], sample_opts, space, scored_setting, opts)
            c = costs[method]
            rescored, served = min(opts.rescore, count), len(found) * len(batches) + plain
            plain = 0
            works = {"a chunk of closed forms priced over": min(count, CHUNK_ROWS) * c.work_b,
                     "a simulated generation of": c.stream_b if rescored else 0.0,
                     "a served batch of generations of": deployments.WAVES * max(batches) * c.serve_b}
            what = max(works, key=works.get)
            rows.append({"profile": profile.name, "method": method, "setups": len(found), "configurations": count,
                         "bytes": int(count * (c.space_b + copies * c.scored_b)), "work_bytes": int(works[what]),
                         "work": what,
                         "score_s": count * c.score_s * (1 + extra_batches),
                         "simulate_s": rescored * opts.sim_repeats * c.stream_s, "serve_s": served * c.serve_s,
                         "chunk_s": min(count, CHUNK_ROWS) * c.score_s,
                         "repeats_s": opts.sim_repeats * c.stream_s if rescored else 0.0})
    table = pd.DataFrame(rows, columns=["profile", "method", "setups", "configurations", "bytes", "work_bytes", "work",
                                        "score_s", "simulate_s", "serve_s", "chunk_s", "repeats_s"])
    table["seconds"] = table[["score_s", "simulate_s", "serve_s"]].sum(axis=1)
    return Estimate(table=table, base_bytes=_process_bytes(), workers=max(1, int(workers)))


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


def _timed(work: Callable) -> float:
    """CPU seconds of `work()` (wall time on a shared machine says more about the others' work)."""
    start = time.process_time()
    work()
    return time.process_time() - start


def _grown(values: list[float], lengths: list[int], tokens: int) -> float:
    """A time a + c * length^p measured at one length (returned as is) or at three doubling
    lengths (a, c and p in [0, 2] from the two differences, so a fixed cost does not hide the
    growth; Lookahead's pool trajectory grows faster than linearly), at `tokens`. A rise within
    FLAT of the time, or after a fall, is noise: most closed forms cost the same per row from 128
    to 8,192 tokens, and a power fitted to noise priced 10^9 tokens at 10^11 seconds. (Memory is
    carried on linearly: no closed form holds more than a row per token.)"""
    if len(values) == 1:
        return values[0]
    rise, last = values[2] - values[1], values[1] - values[0]
    if rise <= FLAT * values[2] or last <= 0:       # flat within the noise: the fixed cost
        return values[2]
    power = min(max(math.log2(rise / last), 0.0), 2.0)
    unit = rise / (lengths[2] ** power - lengths[1] ** power) if power else rise / math.log(2)
    grown = (tokens ** power - lengths[2] ** power) if power else math.log(tokens / lengths[2])
    return values[2] + unit * grown


def _measure(profile: Profile, spec, setup, sample_opts, space: Callable, setting, opts) -> Cost:
    """One method's `Cost`, measured on a sample of its space on `setup` by the sweep's own code."""
    sample = space(spec, setup, sample_opts)
    if sample.empty:
        return Cost()
    sample = sample.iloc[:SAMPLE_ROWS].reset_index(drop=True)
    tokens = int(setting.new_tokens or SAMPLE_TOKENS)

    def score(rows: pd.DataFrame, length: int) -> Callable:
        at = dataclasses.replace(setting, new_tokens=length)
        return lambda: scoring.score_task(scoring.ScoreTask(profile, spec.name, setup.base, rows, at))

    # a warm-up, then per length one row set traced (working memory); where a growth is fitted,
    # TIMINGS other row sets timed at every length, the same rows at every length (rows differ in
    # cost more than the lengths do), in TIMINGS interleaved rounds (each pricing cold: a method
    # caches what a space shares at one length for at most a round), the least time per set and
    # length kept, and the median of the sets' own growths (one hiccup moves one set)
    lengths = [tokens] if tokens <= SAMPLE_TOKENS else list(LONG_TOKENS)
    repeats = TIMINGS if len(lengths) > 1 else 1      # one length: one set, as large as the others
    parts = _split(sample, 1 + len(lengths) + repeats)
    score(parts[0], min(lengths))()
    work_b, scored = [], None
    for length, traced in zip(lengths, parts[1:]):
        scored, peak = _traced(score(traced, length))
        work_b.append(peak / len(traced))
    timed = parts[1 + len(lengths):]
    rounds = [[[_timed(score(rows, length)) / len(rows) for length in lengths] for rows in timed]
              for _ in range(repeats)]
    grown = [_grown(list(np.min(per_set, axis=0)), lengths, tokens) for per_set in zip(*rounds)]
    cost = Cost(space_b=sample.memory_usage(deep=True).sum() / len(sample),
                scored_b=scored.memory_usage(deep=True).sum() / len(scored),
                work_b=_linear(work_b[-2:], lengths[-2:], tokens), score_s=float(np.median(grown)))
    config = scoring.sim_config(scored.iloc[[0]])
    if opts.rescore:
        cost.stream_s, cost.stream_b = _linear_cost(
            lambda n: lambda: scoring.simulate_task(scoring.SimTask(profile, spec.name, config, setting, 0, n, 1)),
            STREAM_TOKENS, opts.sim_tokens)
    prompt = scoring.centred_prompt(setting.ctx_len, min(opts.sim_tokens, SERVE_TOKENS[1]))
    cost.serve_s, cost.serve_b = _linear_cost(
        lambda n: lambda: deployments.serve_task(deployments.ServeTask(profile, spec.name, config, 1, prompt, n, 0)),
        SERVE_TOKENS, opts.sim_tokens)
    cost.serve_b /= deployments.WAVES                   # per request
    return cost


def _split(frame: pd.DataFrame, parts: int) -> list[pd.DataFrame]:
    """`parts` disjoint row sets of `frame` (repeating rows where it has fewer)."""
    size = max(1, len(frame) // parts)
    return [frame.iloc[(i * size) % len(frame):(i * size) % len(frame) + size].reset_index(drop=True)
            for i in range(parts)]


def _linear_cost(run: Callable[[int], Callable], sample: tuple[int, int], tokens: int) -> tuple[float, float]:
    """(seconds, peak bytes) of `run(tokens)()`: measured at `tokens` when it is at most sample[1],
    else a fixed cost and a cost per token from two runs, carried on linearly (a simulated
    generation's steps are arrays of its length). The longer run starts at sample[1] and is made
    GROWTH times longer until it takes at least twice the shorter one's time, GROW_LIMIT_S, or
    `tokens`: the vectorised engine's cost per token is a fraction of a microsecond, lost in the
    noise of a fixed cost over a span of a few thousand tokens."""
    if tokens <= sample[1]:
        run(tokens)()                                                 # warm-up
        return _least_time(run(tokens)), float(_traced(run(tokens))[1])
    short, long = sample
    run(short)()                                                      # warm-up
    short_s, long_s = _least_time(run(short)), _least_time(run(long))
    while long_s < 2 * short_s and long_s < GROW_LIMIT_S and long * GROWTH <= tokens:
        long *= GROWTH
        long_s = _least_time(run(long))
    peaks = [float(_traced(run(n))[1]) for n in (short, long)]
    return _linear([short_s, long_s], [short, long], tokens), _linear(peaks, [short, long], tokens)


def _least_time(work: Callable) -> float:
    """The least of TIMINGS CPU times of `work()`: the noise of a shared machine only adds."""
    return min(_timed(work) for _ in range(TIMINGS))


def _linear(values: list[float], lengths: list[int], tokens: int) -> float:
    """A cost a + b * length measured at two lengths, at `tokens` (b >= 0; one length: as measured)."""
    if len(values) == 1:
        return values[0]
    per_token = max(values[1] - values[0], 0.0) / (lengths[1] - lengths[0])
    return max(values[0] - per_token * lengths[0], 0.0) + per_token * tokens


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
            given = _given(opts.space)
            raise InputError(f"{given}: the sweep would hold {est.configurations:,} configurations, "
                             f"~{_gb(est.bytes)} at its peak, but {_gb(limit)} of memory is available{where}; "
                             f"lower {_names(opts.space)}, or pass fewer --methods / --profile")
        worst = est.table.sort_values("work_bytes", ascending=False).iloc[0]
        raise InputError(f"{_given({'sim_tokens': opts.sim_tokens})}: each of {est.workers} worker(s) would hold "
                         f"~{_gb(worst.work_bytes)} at once ({worst.profile} / {worst.method}: {worst.work} that many "
                         f"tokens), ~{_gb(est.bytes)} in all, but {_gb(limit)} of memory is available; lower --sim-tokens")
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


def _given(options: dict) -> str:
    return " ".join(f"--{k.replace('_', '-')} {v}" for k, v in options.items())


def _names(options: dict) -> str:
    return ", ".join("--" + k.replace("_", "-") for k in options)
