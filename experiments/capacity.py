"""Capacity planning: how much load one GPU sustains within an SLO, with and without speculation.

    python -m experiments.capacity --hardware H100 --target-rate 20 --out examples/capacity_vicuna7b_h100
    python -m experiments.capacity --profile mine.json --hardware H100 --target-rate 40 \
        --slo-tpot-p99 30 --slo-ttft-p99 1000 --prompt-len lognormal:512:0.8:4096

For one Profile (a model pair), hardware, workload (Poisson/Gamma arrivals or a timestamp trace;
prompt and output length distributions) and SLO (p50/p99 TPOT, p50/p99 TTFT, in ms):

1. candidates: per method, the best configurations of the closed-form sweep (`experiments.sweep`
   scoring at a quarter of the batch limit);
2. per candidate, the highest arrival rate one GPU serves within the SLO, found by bracketing from
   the closed form's estimate then bisection on `simulator.simulate_serving` runs of a fixed
   arrival window (each run seeded);
   a rate passes when no request runs out of memory, the SLO holds and the served rate keeps up
   with the offered one; the best candidate per method is the one with the highest such rate;
3. GPUs for `--target-rate`: the smallest replica count whose simulated cluster meets the SLO;
4. throughput-latency curves of every method's best and of plain decoding;
5. the batch size where speculative decoding stops paying (`simulator.report.batch_crossover`).

Every simulation is an executor task (local processes or Dask, `experiments.executor`).
"""
from __future__ import annotations

import argparse
import math
import shlex
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from methods import BASELINE
from calibrate.profile import Profile
from experiments import scoring
from experiments.executor import EXECUTORS, make_executor
from experiments.sweep import BUNDLED_PROFILES, SweepOptions, run_sweep
from simulator.workload import sample_lengths
from common import atomic
from common.errors import InputError
from common.cli import CliParser, cli_entry
from costmodel.hardware import hardware_names
from costmodel.step import step_seconds
from methods.spec import plain_shape
from common.rundir import add_overwrite_option, start_run
from methods import names as method_names, parse_methods

DEFAULT_PROFILE = BUNDLED_PROFILES / "glide-vicuna-7b-h800.json"
EXAMPLE_DIR = "examples/capacity_vicuna7b_h100"
EXAMPLE_ARGS = ["--hardware", "H100", "--target-rate", "20", "--out", EXAMPLE_DIR]   # the committed example
SLO_KEYS = {"tpot_p50": "tpot_s_p50", "tpot_p99": "tpot_s_p99", "ttft_p50": "ttft_s_p50", "ttft_p99": "ttft_s_p99"}
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
    """The workload shape (everything but the rate) and the cluster shape of one GPU."""

    prompt_len: str = "lognormal:256:0.6:2048"
    output_len: str = "lognormal:128:0.6:512"
    arrival: str = "poisson"
    cv: float = 1.0
    trace: str | None = None
    duration_s: float = 60.0
    max_batch: int = 32


@dataclass
class LoadTask:
    """Executor task: the highest rate one configuration sustains within the SLO."""

    profile: dict[str, Any]
    label: str
    method: str
    config: dict[str, Any]
    load: LoadSpec
    slo: Slo
    seed: int
    start_rate: float = 0.5
    bisections: int = 4
    replicas: int = 1


@dataclass
class RunTask:
    """Executor task: one serving simulation at a fixed rate (curves, GPU counts)."""

    profile: dict[str, Any]
    label: str
    method: str
    config: dict[str, Any]
    load: LoadSpec
    rate: float
    seed: int
    replicas: int = 1


def _serve(profile: Profile, method: str, config: dict, load: LoadSpec, rate: float, seed: int,
           replicas: int = 1) -> dict[str, Any]:
    from simulator import Cluster, Workload, simulate_serving

    workload = Workload(rate=rate, duration_s=load.duration_s, arrival=load.arrival, cv=load.cv,
                        prompt_len=load.prompt_len, output_len=load.output_len, trace=load.trace)
    result = simulate_serving(profile, method, config, workload, Cluster(replicas=replicas, max_batch=load.max_batch),
                              seed)
    summary = result.summary
    summary["kept_up"] = summary["throughput_req_s"] >= KEEP_UP * realised_rate(result.requests)
    return summary


def realised_rate(requests: pd.DataFrame) -> float:
    """Arrivals per second actually drawn (Poisson noise on a short window is tens of per cent)."""
    arrivals = requests["arrival_s"].to_numpy()
    span = float(arrivals.max() - arrivals.min()) if len(arrivals) > 1 else 0.0
    return (len(arrivals) - 1) / span if span > 0 else 0.0


def _passes(slo: Slo, summary: dict[str, Any]) -> bool:
    return slo.violation(summary) <= 1.0 and bool(summary["kept_up"])


def run_task(task: RunTask) -> dict[str, Any]:
    profile = Profile.from_dict(task.profile)
    s = _serve(profile, task.method, task.config, task.load, task.rate, task.seed, task.replicas)
    return {"label": task.label, "method": task.method, "rate": task.rate, "replicas": task.replicas, **_row(s)}


def _row(s: dict[str, Any]) -> dict[str, Any]:
    keys = ("completed", "throughput_req_s", "throughput_tok_s", "tpot_s_p50", "tpot_s_p99", "ttft_s_p50", "ttft_s_p99",
            "oom", "preemptions", "kept_up", "utilisation")
    return {k: s.get(k) for k in keys}


def max_load_task(task: LoadTask) -> dict[str, Any]:
    """From `start_rate` (the closed form's estimate), halving until a rate passes or doubling until
    one fails, then bisection between the last pass and the first failure; the highest passing rate."""
    profile = Profile.from_dict(task.profile)

    def check(rate: float) -> tuple[bool, dict[str, Any]]:
        s = _serve(profile, task.method, task.config, task.load, rate, task.seed, task.replicas)
        return _passes(task.slo, s), s

    ok, first = check(task.start_rate)
    out = {"label": task.label, "method": task.method, "config": task.config}
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


def mean_length(spec: str, seed: int = 0) -> float:
    """Mean of a length distribution spec (simulator.workload's sampler, 4096 draws)."""
    from simulator.workload import sample_lengths

    return float(sample_lengths(spec, 4096, np.random.default_rng(seed), "length").mean())


def candidates(profile: Profile, opts: CapacityOptions, executor) -> list[tuple[str, str, dict[str, Any], float]]:
    """(label, method, simulator config, first rate to try) for plain decoding and the closed-form
    best `opts.candidates` configurations of each method at a quarter of the batch limit. The first
    rate is the closed form's request rate at that batch (tokens/s over the mean output length)."""
    batch = max(1, opts.load.max_batch // 4)
    sweep_opts = SweepOptions(methods=opts.methods, temperature=opts.temperature, batch=batch, rescore=0)
    result = run_sweep([profile], sweep_opts, executor)
    per_request = mean_length(opts.load.output_len, opts.seed)
    ar_tok_s = batch / float(step_seconds(profile.seconds, plain_shape(profile), scoring.Setting().ctx_len, batch)[0])
    found = [("no speculation", BASELINE, {}, ar_tok_s / per_request)]
    for method, table in result.tables.items():
        for i in range(min(opts.candidates, len(table))):
            row = table.iloc[[i]]
            drafter, config = row["drafter"].iloc[0], row["config"].iloc[0]
            label = f"{method} {'' if drafter == '-' else drafter + ' '}{config}"
            found.append((label, method, scoring.sim_config(row), float(row["tokens_per_s"].iloc[0]) / per_request))
    return found


def plan(profile: Profile, opts: CapacityOptions, executor) -> dict[str, Any]:
    """Everything the report shows (see the module docstring)."""
    timings = {}
    t = time.perf_counter()
    if opts.hardware:
        profile = scoring.retarget(profile, opts.hardware)
    raw = profile.to_dict()
    cands = candidates(profile, opts, executor)
    loads = executor.map(max_load_task, [LoadTask(raw, lab, m, c, opts.load, opts.slo, opts.seed, start_rate=r)
                                         for lab, m, c, r in cands], desc="max load within the SLO")
    table = pd.DataFrame([{**{k: v for k, v in r.items() if k != "at"}, **r["at"]} for r in loads])
    timings["max_load"] = time.perf_counter() - t
    if (table["max_rate"] <= 0).all():
        closest = table.sort_values("violation").iloc[0]
        raise InputError(
            f"no configuration meets the SLO ({opts.slo.describe()}) even at {closest['probe_rate']:g} req/s; "
            f"closest: {closest['label']} at {_slo_line(closest)}")
    table["gpus_estimate"] = [math.ceil(opts.target_rate / r) if r > 0 else np.nan for r in table["max_rate"]]
    best = (table[table.max_rate > 0].sort_values("max_rate", ascending=False)
            .groupby("method", sort=False).head(1).reset_index(drop=True))

    t = time.perf_counter()
    best["gpus"] = _gpus_for_target(raw, best, opts, executor)
    timings["gpus"] = time.perf_counter() - t

    t = time.perf_counter()
    top = float(best.max_rate.max())
    rates = np.round(top * np.array([0.1, 0.4, 0.7, 1.0, 1.3]), 4)
    curve_tasks = [RunTask(raw, row.label, row.method, row.config, opts.load, float(r), opts.seed)
                   for row in best.itertuples() for r in rates]
    curves = pd.DataFrame(executor.map(run_task, curve_tasks, desc="throughput-latency curves"))
    timings["curves"] = time.perf_counter() - t

    t = time.perf_counter()
    crossover = _crossover(profile, best, opts)
    timings["crossover"] = time.perf_counter() - t
    return {"profile": profile.name, "hardware": profile.hardware, "all": table, "best": best, "curves": curves,
            "crossover": crossover, "timings": timings}


def _slo_line(row) -> str:
    return (f"TPOT p50 {1000 * row['tpot_s_p50']:.1f} ms, p99 {1000 * row['tpot_s_p99']:.1f} ms, "
            f"TTFT p50 {1000 * row['ttft_s_p50']:.0f} ms, p99 {1000 * row['ttft_s_p99']:.0f} ms, OOM {int(row['oom'])}")


def _gpus_for_target(raw: dict, best: pd.DataFrame, opts: CapacityOptions, executor, extra: int = 1) -> list:
    """Per best configuration: the smallest replica count from the estimate on that meets the SLO."""
    tries = [RunTask(raw, row.label, row.method, row.config, opts.load, opts.target_rate, opts.seed, int(n))
             for row in best.itertuples() for n in range(int(row.gpus_estimate), int(row.gpus_estimate) + extra + 1)]
    runs = executor.map(run_task, tries, desc="GPUs for the target load")
    out = []
    for row in best.itertuples():
        passing = [r["replicas"] for r, t in zip(runs, tries) if t.label == row.label and _passes(opts.slo, r)]
        out.append(min(passing) if passing else np.nan)
    return out


def _crossover(profile: Profile, best: pd.DataFrame, opts: CapacityOptions) -> pd.DataFrame:
    from simulator.report import batch_crossover

    specs = [(row.label, row.method, row.config) for row in best.itertuples()]
    return batch_crossover(profile, specs, list(opts.batches), prompt_len=256, output_len=128, waves=2, seed=opts.seed)


# ---- report --------------------------------------------------------------------------------------

def write_report(result: dict[str, Any], opts: CapacityOptions, out: Path, command: str) -> Path:
    from experiments.plots import _plt
    from simulator.report import crossover_batch, write_crossover_report

    out = Path(out)
    plt, sns = _plt()
    best, curves = result["best"], result["curves"]
    atomic.write_csv(out / "capacity.csv", best.drop(columns=["config"]).assign(config=best.config.map(str)))
    atomic.write_csv(out / "candidates.csv", result["all"].assign(config=result["all"].config.map(str)))
    atomic.write_csv(out / "curves.csv", curves)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    view = curves.assign(tpot_p50_ms=1000 * curves.tpot_s_p50, tpot_p99_ms=1000 * curves.tpot_s_p99,
                         ttft_p99_ms=1000 * curves.ttft_s_p99)
    for ax, col, limit in zip(axes, ("tpot_p50_ms", "tpot_p99_ms", "ttft_p99_ms"),
                              (opts.slo.tpot_p50, opts.slo.tpot_p99, opts.slo.ttft_p99)):
        sns.lineplot(data=view, x="throughput_tok_s", y=col, hue="label", marker="o", ax=ax, sort=False)
        if limit:
            ax.axhline(1000 * limit, color="red", ls="--", lw=1)
        ax.set(xlabel="throughput (tokens/s, one GPU)", ylabel=col.replace("_", " "), yscale="log")
        ax.legend(fontsize=6)
    fig.suptitle(f"throughput-latency: {result['profile']}")
    atomic.save_figure(out / "curves.png", fig)
    plt.close(fig)
    write_crossover_report(out / "crossover", result["crossover"], "no speculation", result["profile"], command)
    ar = best[best.method == BASELINE].iloc[0]
    lines = [
        f"# Capacity plan: {result['profile']}", "",
        f"Regenerate with `{command}`.", "",
        f"Hardware {result['hardware']}; workload {opts.load.arrival} arrivals, prompt {opts.load.prompt_len}, "
        f"output {opts.load.output_len} tokens, batch limit {opts.load.max_batch}, {opts.load.duration_s:g} s of "
        f"arrivals per simulated run, seed {opts.seed}. SLO: {opts.slo.describe()}. Target load **{opts.target_rate:g} req/s**.", "",
        "## Per method: best configuration, highest load one GPU sustains, GPUs for the target", "",
        "| method | configuration | max req/s per GPU | tok/s at max | TPOT p50 / p99 ms | TTFT p99 ms | "
        "GPUs for target | vs no speculation |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in best.itertuples():
        lines.append(f"| {row.method} | {row.label} | {row.max_rate:.2f} | {row.throughput_tok_s:.0f} | "
                     f"{1000 * row.tpot_s_p50:.1f} / {1000 * row.tpot_s_p99:.1f} | {1000 * row.ttft_s_p99:.0f} | "
                     f"{'n/a' if pd.isna(row.gpus) else int(row.gpus)} | {row.max_rate / ar.max_rate:.2f}x load |")
    lines += ["", "Max load: bracketing from the closed form's estimate, then bisection of the arrival rate on `simulator.simulate_serving`; a rate "
              f"passes when no request runs out of memory, the SLO holds and the served rate is at least "
              f"{KEEP_UP:.0%} of the arrival rate drawn over {opts.load.duration_s:g} s of arrivals. GPUs: the smallest number of replicas (least-loaded routing) "
              "whose simulated cluster meets the SLO at the target load, starting from ceil(target / max load).",
              "", "![curves](curves.png)", "", "## Where speculative decoding stops paying", "",
              "![crossover](crossover/crossover.png)", ""]
    for row in best.itertuples():
        if row.method == BASELINE:
            continue
        b = crossover_batch(result["crossover"], "no speculation", row.label)
        lines.append(f"- {row.label}: throughput at or below plain decoding from batch **{b}** on." if b else
                     f"- {row.label}: still ahead of plain decoding at batch {max(opts.batches)}.")
    lines += ["", "Every candidate tried: [candidates.csv](candidates.csv); curves: [curves.csv](curves.csv); "
              "crossover: [crossover/crossover.csv](crossover/crossover.csv).", "",
              "Timings (s): " + ", ".join(f"{k} {v:.1f}" for k, v in result["timings"].items()), ""]
    return atomic.write_text(out / "README.md", "\n".join(lines))


# ---- command line --------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    p = CliParser(prog="python -m experiments.capacity", description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", default=str(DEFAULT_PROFILE),
                   help=f"Profile JSON of the model pair (default: the bundled {Path(DEFAULT_PROFILE).name})")
    p.add_argument("--hardware", default=None,
                   help=f"move the profile's roofline latency models to this hardware ({', '.join(hardware_names())}); "
                        "default: the hardware the profile was measured on")
    p.add_argument("--methods", default="all", help=f"comma-separated methods or 'all' (known: {', '.join(method_names(sweep_only=True))})")
    p.add_argument("--temperature", type=float, default=None,
                   help="acceptance models at this temperature (default: the profile's lowest recorded)")
    p.add_argument("--target-rate", type=float, default=20.0, help="load to plan GPUs for, requests/s (default 20)")
    p.add_argument("--arrival", default="poisson", choices=("poisson", "gamma", "trace"),
                   help="arrival process (default poisson); 'trace' replays --trace")
    p.add_argument("--cv", type=float, default=1.0, help="coefficient of variation of gamma inter-arrivals (default 1)")
    p.add_argument("--trace", default=None, help="CSV with column arrival_s (optional prompt_len, output_len); default: none, Poisson arrivals "
                        "at each probed rate")
    p.add_argument("--prompt-len", default="lognormal:256:0.6:2048",
                   help="prompt length distribution: fixed:N, uniform:LO:HI or lognormal:MEDIAN:SIGMA:MAX")
    p.add_argument("--output-len", default="lognormal:128:0.6:512", help="output length distribution (as --prompt-len)")
    p.add_argument("--max-batch", type=int, default=32, help="running sequences per GPU (default 32)")
    p.add_argument("--duration", type=float, default=60.0,
                   help="seconds of arrivals per simulated run (default 60; longer = steadier tails, slower)")
    p.add_argument("--slo-tpot-p50", type=float, default=20.0, help="median time per output token, ms (default 20)")
    p.add_argument("--slo-tpot-p99", type=float, default=30.0, help="p99 time per output token, ms (default 30)")
    p.add_argument("--slo-ttft-p50", type=float, default=None, help="median time to first token, ms (default none)")
    p.add_argument("--slo-ttft-p99", type=float, default=1000.0, help="p99 time to first token, ms (default 1000)")
    p.add_argument("--candidates", type=int, default=1, help="closed-form best configurations tried per method (default 1)")
    p.add_argument("--out", default="out/capacity", help="output directory (default out/capacity); one holding another run's files is refused unless --overwrite")
    add_overwrite_option(p)
    p.add_argument("--seed", type=int, default=0, help="seed of every simulated run (default 0)")
    p.add_argument("--executor", choices=EXECUTORS, default="local", help="local processes (default) or dask")
    p.add_argument("--workers", type=int, default=None, help="worker processes; default one per CPU core")
    p.add_argument("--scheduler", default=None, help="with --executor dask: address of a running scheduler (default: start a local cluster)")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    return p


def options_from_args(args) -> CapacityOptions:
    for name in ("target_rate", "max_batch", "duration", "candidates", "cv"):
        value = getattr(args, name)
        if not (value > 0 and math.isfinite(value)):  # refuses nan and inf too
            raise InputError(f"--{name.replace('_', '-')} must be a finite number > 0, got {value}")
    if args.temperature is not None and not (args.temperature >= 0 and math.isfinite(args.temperature)):
        raise InputError(f"--temperature must be a finite number >= 0, got {args.temperature}")
    if args.workers is not None and args.workers < 1:
        raise InputError(f"--workers must be >= 1, got {args.workers}")
    limits = {k: getattr(args, f"slo_{k}") for k in SLO_KEYS}
    for k, v in limits.items():
        if v is not None and not (v > 0 and math.isfinite(v)):
            raise InputError(f"--slo-{k.replace('_', '-')} must be > 0 ms, got {v}")
    if args.hardware:
        scoring.check_hardware(args.hardware)
    for what, spec in (("--prompt-len", args.prompt_len), ("--output-len", args.output_len)):
        sample_lengths(spec, 1, np.random.default_rng(0), what)      # checked before any serving
    return CapacityOptions(
        methods=parse_methods(args.methods), hardware=args.hardware, temperature=args.temperature,
        target_rate=args.target_rate, slo=Slo(**{k: (v / 1000 if v else None) for k, v in limits.items()}),
        load=LoadSpec(prompt_len=args.prompt_len, output_len=args.output_len, arrival=args.arrival, cv=args.cv,
                      trace=args.trace, duration_s=args.duration, max_batch=args.max_batch),
        candidates=args.candidates, seed=args.seed)


@cli_entry
def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    opts = options_from_args(args)
    profile = Profile.load(args.profile)
    scoring.check_recorded([profile], opts.temperature, None)
    start_run(args.out, "experiments.capacity", argv, args.overwrite)
    started = time.perf_counter()
    with make_executor(args.executor, workers=args.workers, address=args.scheduler,
                       progress=not args.no_progress) as executor:
        result = plan(profile, opts, executor)
    command = "python -m experiments.capacity " + " ".join(shlex.quote(a) for a in argv)
    report = write_report(result, opts, Path(args.out), command)
    view = result["best"][["method", "label", "max_rate", "gpus"]].rename(columns={"max_rate": "max req/s/GPU"})
    print(view.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    print(f"\ntarget {opts.target_rate:g} req/s; report {report} ({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
