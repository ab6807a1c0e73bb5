"""Capacity planning (the library of `python -m experiments.capacity`): how much load a replica sustains
within an SLO, with and without speculation, and the GPUs and money a target load takes.

For one Profile (a model pair), hardware, workload (Poisson, Gamma or fixed-rate arrivals, or a
timestamp trace; prompt and output length distributions) and SLO (p50/p99 TPOT, p50/p99 TTFT, in ms):

1. candidates: per method, the best configurations of the closed-form sweep (`experiments.sweep`
   scoring at a quarter of plain decoding's batch cap);
2. per candidate and tensor-parallel degree (`capacity.deploy`: a replica of tp GPUs, its batch cap
   what fits in its KV memory unless `--max-batch` is given), the highest arrival rate one replica
   serves within the SLO, found by bracketing from the closed form's estimate then bisection on
   `simulator.simulate_serving` runs of a fixed arrival window (each run seeded); a rate passes when
   no request runs out of memory, the SLO holds and the served rate keeps up with the offered one;
3. per method and TP, the best candidate's replicas for `--target-rate`: the smallest count whose
   simulated cluster meets the SLO; per method, the TP and replicas of fewest GPUs, its cost per
   million output tokens at `--gpu-hour-price`, and its served latency at the target;
4. throughput-latency curves of every method's choice;
5. the batch size where speculative decoding stops paying (`simulator.report.batch_crossover`).

Every simulation is an executor task (local processes or Dask, `sweep.executor`).
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from capacity.deploy import add_costs, batch_cap, check_tp, cheapest, fits_nowhere
from costmodel import uncertainty
from costmodel.price import DEFAULT_GPU_HOUR_PRICE
from methods import BASELINE, names as method_names
from profiles.profile import Profile
from sweep import scoring
from sweep.run import BUNDLED_PROFILES, SweepOptions, run_sweep
from common.errors import InputError
from costmodel.step import step_seconds
from simulator.workload import OUTPUT_LEN, PROMPT_LEN, ArrivalTrace, Workload, realised_rate
from methods.spec import plain_shape
from simulator import Cluster, Parallelism, simulate_serving
from simulator.batch_load import BatchLoad
from simulator.report import batch_crossover

DEFAULT_PROFILE = BUNDLED_PROFILES / "glide-vicuna-7b-h800.json"
EXAMPLE_DIR = "examples/capacity_vicuna7b_h100"
EXAMPLE_ARGS = ["--hardware", "H100", "--target-rate", "20", "--tp", "1,2", "--out", EXAMPLE_DIR]   # the committed example
SLO_KEYS = {"tpot_p50": "tpot_s_p50", "tpot_p99": "tpot_s_p99", "ttft_p50": "ttft_s_p50", "ttft_p99": "ttft_s_p99"}
SERVED = ("throughput_req_s", "throughput_tok_s") + tuple(f"{m}_s_{q}" for m in ("ttft", "tpot", "itl")
                                                         for q in ("mean", "p50", "p99"))
MIN_REQUESTS = 10      # the lowest rate probed still brings this many arrivals
KEEP_UP = 0.85         # served / arrived request rate below this over a run: the queue grows, the rate fails


@dataclass(frozen=True)
class Slo:
    """Latency limits in seconds; None = not constrained."""

    tpot_p50: float | None = None
    tpot_p99: float | None = None
    ttft_p50: float | None = None
    ttft_p99: float | None = None

    def violation(self, summary: dict[str, Any]) -> float:
        """max over the limits of measured / limit (<= 1 meets the SLO); inf on OOM or no output."""
        if summary.get("oom", 0) > 0 or summary.get("completed", 0) == 0:
            return math.inf
        ratios = [summary[SLO_KEYS[k]] / v for k, v in asdict(self).items() if v is not None]
        return max(ratios) if ratios else 0.0

    def describe(self) -> str:
        return ", ".join(f"{k.replace('_', ' ')} <= {1000 * v:g} ms" for k, v in asdict(self).items() if v) or "none"


@dataclass(frozen=True)
class LoadSpec:
    """The workload shape (everything but the rate) and a replica's batch cap (None: what fits in its
    KV memory, `capacity.deploy.batch_cap`; a task's load always carries a number)."""

    prompt_len: str = PROMPT_LEN
    output_len: str = OUTPUT_LEN
    arrival: str = "poisson"
    cv: float = 1.0
    trace: ArrivalTrace | None = None
    duration_s: float = 60.0
    max_batch: int | None = None

    def batch_load(self, seed: int) -> BatchLoad:
        """The crossover's load: this shape's mean prompt and output lengths (`seed`'s draws), fixed."""
        one = self.workload(1.0)
        return BatchLoad(prompt_len=max(1, int(round(one.mean_prompt(seed)))),
                         output_len=max(2, int(round(one.mean_output(seed)))))

    def workload(self, rate: float) -> Workload:
        """This shape at `rate` requests/s (a trace's shape at that rate: `simulator.workload.Workload`)."""
        return Workload(rate=rate, duration_s=self.duration_s, arrival=self.arrival, cv=self.cv,
                        prompt_len=self.prompt_len, output_len=self.output_len, trace=self.trace)


@dataclass
class LoadTask:
    """Executor task: the highest rate one configuration sustains within the SLO."""

    profile: Profile
    label: str
    method: str
    config: dict[str, Any]
    load: LoadSpec
    slo: Slo
    seed: int
    start_rate: float = 0.5
    bisections: int = 4
    replicas: int = 1
    tp: int = 1
    cap_source: str = ""


@dataclass
class RunTask:
    """Executor task: one serving simulation at a fixed rate (curves, GPU counts)."""

    profile: Profile
    label: str
    method: str
    config: dict[str, Any]
    load: LoadSpec
    rate: float
    seed: int
    replicas: int = 1
    tp: int = 1


def _serve(profile: Profile, method: str, config: dict, load: LoadSpec, rate: float, seed: int,
           replicas: int = 1, tp: int = 1) -> dict[str, Any]:
    cluster = Cluster(replicas=replicas, max_batch=load.max_batch, parallel=Parallelism(tp=tp))
    result = simulate_serving(profile, method, config, load.workload(rate), cluster, seed)
    summary = result.summary
    summary["kept_up"] = summary["throughput_req_s"] >= KEEP_UP * realised_rate(result.requests)
    return summary


def _passes(slo: Slo, summary: dict[str, Any]) -> bool:
    return slo.violation(summary) <= 1.0 and bool(summary["kept_up"])


def run_task(task: RunTask) -> dict[str, Any]:
    profile = task.profile
    s = _serve(profile, task.method, task.config, task.load, task.rate, task.seed, task.replicas, task.tp)
    return {"label": task.label, "method": task.method, "rate": task.rate, "replicas": task.replicas, "tp": task.tp,
            **_row(s)}


def _row(s: dict[str, Any]) -> dict[str, Any]:
    keys = ("completed", *SERVED, "oom", "preemptions", "kept_up", "utilisation", "peak_batch")   # SERVED holds the SLO's
    return {k: s.get(k) for k in keys}


def max_load_task(task: LoadTask) -> dict[str, Any]:
    """From `start_rate` (the closed form's estimate), halving until a rate passes or doubling until
    one fails, then bisection between the last pass and the first failure; the highest passing rate."""
    profile = task.profile

    def check(rate: float) -> tuple[bool, dict[str, Any]]:
        s = _serve(profile, task.method, task.config, task.load, rate, task.seed, task.replicas, task.tp)
        return _passes(task.slo, s), s

    ok, first = check(task.start_rate)
    out = {"label": task.label, "method": task.method, "config": task.config, "tp": task.tp,
           "batch_cap": task.load.max_batch, "cap_source": task.cap_source}
    lo, hi, at = (task.start_rate, None, first) if ok else (None, task.start_rate, None)
    closest = first
    for _ in range(6):                       # bracket the largest passing rate
        if lo is not None and hi is not None:
            break
        rate = lo * 2 if hi is None else hi / 2
        if lo is None and rate * task.load.duration_s < MIN_REQUESTS:
            break                            # too few arrivals to measure anything lower
        ok, s = check(rate)
        if ok:
            lo, at = rate, s
        else:
            hi = rate
            closest = s if task.slo.violation(s) < task.slo.violation(closest) else closest
    if lo is None:
        return {**out, "max_rate": 0.0, "violation": task.slo.violation(closest), "at": _row(closest),
                "probe_rate": hi}
    if hi is not None:
        for _ in range(task.bisections):
            mid = 0.5 * (lo + hi)
            ok, s = check(mid)
            lo, hi, at = (mid, hi, s) if ok else (lo, mid, at)
    return {**out, "max_rate": lo, "violation": task.slo.violation(at), "at": _row(at), "probe_rate": lo}


# ---- the plan ----------------------------------------------------------------------------------

@dataclass
class CapacityOptions:
    methods: list[str] = field(default_factory=lambda: method_names(sweep_only=True))
    hardware: str | None = None
    temperature: float | None = None
    target_rate: float = 20.0
    slo: Slo = field(default_factory=lambda: Slo(tpot_p50=0.020, tpot_p99=0.030, ttft_p99=1.0))
    load: LoadSpec = field(default_factory=LoadSpec)
    candidates: int = 1
    seed: int = 0
    batches: tuple[int, ...] = (1, 4, 16, 64)
    tp: tuple[int, ...] = (1,)
    gpu_hour_price: float = DEFAULT_GPU_HOUR_PRICE


def candidates(profile: Profile, opts: CapacityOptions, executor) -> list[tuple[str, str, dict[str, Any], float]]:
    """(label, method, simulator config, first rate to try) for plain decoding and the closed-form
    best `opts.candidates` configurations of each method at a quarter of plain decoding's batch cap
    on the smallest TP it fits. The first rate is the closed form's request rate at that batch
    (tokens/s over the mean output length)."""
    caps = [batch_cap(profile, BASELINE, {}, opts.load, tp, opts.seed)[0] for tp in opts.tp]
    if not any(caps):
        raise InputError(f"does not fit at --tp {max(opts.tp)}: {fits_nowhere(profile, opts.tp)}")
    batch = max(1, next(c for c in caps if c) // 4)
    sweep_opts = SweepOptions(methods=opts.methods, temperature=opts.temperature, batch=batch, rescore=0)
    result = run_sweep([profile], sweep_opts, executor)
    per_request = opts.load.workload(1.0).mean_output(opts.seed)
    ar_tok_s = batch / float(step_seconds(profile.seconds, plain_shape(profile), scoring.Setting().ctx_len, batch)[0])
    found = [("no speculation", BASELINE, {}, ar_tok_s / per_request)]
    for method, table in result.tables.items():
        for i in range(min(opts.candidates, len(table))):
            row = table.iloc[[i]]
            drafter, config = row["drafter"].iloc[0], row["config"].iloc[0]
            label = config if drafter == "-" else f"{config} (drafter {drafter})"
            found.append((label, method, scoring.sim_config(row), float(row["tokens_per_s"].iloc[0]) / per_request))
    return found


def load_tasks(profile: Profile, opts: CapacityOptions, cands) -> tuple[list[LoadTask], list[dict[str, Any]]]:
    """A max-load search per candidate and TP whose replica fits, its load at that replica's batch cap;
    and the (candidate, TP) pairs that do not fit."""
    tasks, unfit = [], []
    for tp in opts.tp:
        for label, method, config, rate in cands:
            cap, source = batch_cap(profile, method, config, opts.load, tp, opts.seed)
            if not cap:
                unfit.append({"label": label, "method": method, "config": config, "tp": tp, "max_rate": 0.0,
                              "violation": math.inf, "cap_source": "does not fit"})
                continue
            tasks.append(LoadTask(profile, label, method, config, replace(opts.load, max_batch=cap), opts.slo,
                                  opts.seed, start_rate=rate * tp, tp=tp, cap_source=source))
    return tasks, unfit


def plan(profile: Profile, opts: CapacityOptions, executor) -> dict[str, Any]:
    """Everything the report shows (see the module docstring)."""
    timings = {}
    t = time.perf_counter()
    if opts.hardware:
        profile = profile.on_hardware(opts.hardware)
    check_tp(profile, opts.tp)
    cands = candidates(profile, opts, executor)
    tasks, unfit = load_tasks(profile, opts, cands)
    loads = executor.map(max_load_task, tasks, desc="max load within the SLO")
    table = pd.DataFrame([{**{k: v for k, v in r.items() if k != "at"}, **r["at"]} for r in loads] + unfit)
    timings["max_load"] = time.perf_counter() - t
    if (table["max_rate"] <= 0).all():
        closest = table[table["violation"] < math.inf].sort_values("violation")
        if closest.empty:
            raise InputError(f"no configuration meets the SLO ({opts.slo.describe()}): every request ran out of memory")
        closest = closest.iloc[0]
        raise InputError(
            f"no configuration meets the SLO ({opts.slo.describe()}) even at {closest['probe_rate']:g} req/s; "
            f"closest: {closest['label']} (TP {int(closest['tp'])}) at {slo_line(closest)}")
    table["rate_per_gpu"] = table["max_rate"] / table["tp"]
    table["gpus_estimate"] = replicas_at(opts.target_rate, table["max_rate"])
    per_tp = (table[table.max_rate > 0].sort_values("max_rate", ascending=False)
              .groupby(["method", "tp"], sort=False).head(1).reset_index(drop=True))

    t = time.perf_counter()
    replicas, served = _replicas_for_target(profile, per_tp, opts, executor)
    per_tp["replicas"] = replicas
    per_tp["gpus"] = per_tp["replicas"] * per_tp["tp"]
    per_tp = pd.concat([per_tp, pd.DataFrame(served)], axis=1)
    mean_output = opts.load.workload(1.0).mean_output(opts.seed)
    best = with_rate_interval(add_costs(cheapest(per_tp), opts.target_rate, mean_output, opts.gpu_hour_price),
                              profile.heldout_error(), opts.target_rate)
    timings["gpus"] = time.perf_counter() - t

    t = time.perf_counter()
    top = float(best.rate_per_gpu.max())
    fractions = np.array([0.1, 0.4, 0.7, 1.0, 1.3])
    curve_tasks = [RunTask(profile, row.label, row.method, row.config, replace(opts.load, max_batch=int(row.batch_cap)),
                           float(np.round(top * f * row.tp, 4)), opts.seed, tp=int(row.tp))
                   for row in best.itertuples() for f in fractions]
    curves = pd.DataFrame(executor.map(run_task, curve_tasks, desc="throughput-latency curves"))
    timings["curves"] = time.perf_counter() - t

    t = time.perf_counter()
    crossover_load = opts.load.batch_load(opts.seed)
    crossover = _crossover(profile, best, opts, crossover_load)
    timings["crossover"] = time.perf_counter() - t
    return {"profile": profile.name, "hardware": profile.hardware, "all": table, "per_tp": per_tp, "best": best,
            "curves": curves, "crossover": crossover, "crossover_load": crossover_load,
            "heldout_error": profile.heldout_error(), "timings": timings}


def with_rate_interval(best: pd.DataFrame, error: float | None, target_rate: float) -> pd.DataFrame:
    """Each row's highest rate within the SLO as a 90% interval (`costmodel.uncertainty.interval`
    at the Profile's held-out error: the relative error of a throughput the step model prices) and
    the GPUs the target would take at either end (TP x replicas from the per-replica rate, as the
    plan's own first estimate is made); no interval without a held-out error."""
    if error is None:
        return best.assign(max_rate_lo=np.nan, max_rate_hi=np.nan, gpus_lo=np.nan, gpus_hi=np.nan)
    low, high = uncertainty.interval(best["max_rate"], error)
    tp = pd.array(best["tp"].to_numpy(), dtype="Int64")
    return best.assign(max_rate_lo=low, max_rate_hi=high, gpus_lo=replicas_at(target_rate, high) * tp,
                       gpus_hi=replicas_at(target_rate, low) * tp)


def replicas_at(target_rate: float, rates) -> pd.arrays.IntegerArray:
    """Replicas a target load takes at each per-replica rate, whole numbers (missing where none serves
    anything)."""
    rates = np.asarray(rates, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        need = np.where((rates > 0) & np.isfinite(rates), np.ceil(target_rate / np.where(rates > 0, rates, 1.0)), np.nan)
    return pd.array(need, dtype="Int64")


def slo_line(row) -> str:
    return (f"TPOT p50 {1000 * row['tpot_s_p50']:.1f} ms, p99 {1000 * row['tpot_s_p99']:.1f} ms, "
            f"TTFT p50 {1000 * row['ttft_s_p50']:.0f} ms, p99 {1000 * row['ttft_s_p99']:.0f} ms, OOM {int(row['oom'])}")


def _replicas_for_target(profile: Profile, per_tp: pd.DataFrame, opts: CapacityOptions, executor,
                         extra: int = 1) -> tuple[list, list[dict[str, Any]]]:
    """Per row (a method's best at one TP): the smallest replica count from the estimate on that meets
    the SLO at the target (nan: none tried), and that cluster's served numbers (`target_*`)."""
    tries = [RunTask(profile, row.label, row.method, row.config, replace(opts.load, max_batch=int(row.batch_cap)),
                     opts.target_rate, opts.seed, int(n), int(row.tp))
             for row in per_tp.itertuples() for n in range(int(row.gpus_estimate), int(row.gpus_estimate) + extra + 1)]
    runs = executor.map(run_task, tries, desc="GPUs for the target load")
    replicas, served = [], []
    for row in per_tp.itertuples():
        passing = [r for r, t in zip(runs, tries) if (t.label, t.tp) == (row.label, row.tp) and _passes(opts.slo, r)]
        first = min(passing, key=lambda r: r["replicas"]) if passing else {}
        replicas.append(first.get("replicas", np.nan))
        served.append({f"target_{k}": first.get(k, np.nan) for k in (*SERVED, "peak_batch")})
    return replicas, served


def _crossover(profile: Profile, best: pd.DataFrame, opts: CapacityOptions, load: BatchLoad) -> pd.DataFrame:
    """On a replica of the largest TP chosen (every chosen configuration fits there), under the load
    every command serves a batch size under (`simulator.batch_load`) at this workload's mean lengths:
    the sweep's deployments at the same lengths serve the same numbers. Plain decoding is the
    baseline even where it met the SLO at no rate."""
    specs = [(row.label, row.method, row.config) for row in best.itertuples()]
    if BASELINE not in set(best["method"]):
        specs.append(("no speculation", BASELINE, {}))
    return batch_crossover(profile, specs, list(opts.batches), load, seed=opts.seed,
                           parallel=Parallelism(tp=int(best["tp"].max())))
