"""`python -m experiments.capacity`: the GPUs and the money a load takes within an SLO, with and without speculation.

    python -m experiments.capacity --hardware H100 --target-rate 20 --out examples/capacity_vicuna7b_h100
    python -m experiments.capacity --profile mine.json --hardware H100 --target-rate 40 --tp 1,2,4 \
        --gpu-hour-price 3 --slo-tpot-p99 30 --slo-ttft-p99 1000 --prompt-len lognormal:512:0.8:4096

The plan is `capacity.plan`, the report `capacity.report`.
"""
from __future__ import annotations

import argparse
import math
import shlex
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from profiles.profile import Profile
from sweep import scoring
from sweep.executor import EXECUTORS, make_executor
from simulator.workload import add_workload_options, check_load, sample_lengths, trace_option
from common.errors import InputError
from common.cli import CliParser, cli_entry, counts
from costmodel.price import DEFAULT_GPU_HOUR_PRICE, check_gpu_hour_price
from common.progress import add_progress_option, progress_enabled
from costmodel.hardware import hardware_names
from common.rundir import add_overwrite_option, start_run
from methods import names as method_names, parse_methods

from capacity.deploy import check_tp
from capacity.plan import (DEFAULT_PROFILE, SLO_KEYS, CapacityOptions, LoadSpec, Slo, plan)
from capacity.report import cap_note, write_report


def build_parser() -> argparse.ArgumentParser:
    p = CliParser(prog="python -m experiments.capacity", description=__doc__.split("\n\n")[0].split(": ", 1)[1])
    p.add_argument("--profile", default=str(DEFAULT_PROFILE),
                   help=f"Profile JSON of the model pair (default: the bundled {Path(DEFAULT_PROFILE).name})")
    p.add_argument("--hardware", default=None,
                   help=f"move the profile's roofline latency models to this hardware ({', '.join(hardware_names())}); "
                        "default: the hardware the profile was measured on")
    p.add_argument("--methods", default="all", help=f"comma-separated methods or 'all' (known: {', '.join(method_names(sweep_only=True))})")
    p.add_argument("--temperature", type=float, default=None,
                   help="acceptance models at this temperature (default: the profile's lowest recorded)")
    p.add_argument("--target-rate", type=float, default=20.0, help="load to plan GPUs for, requests/s (default 20)")
    add_workload_options(p)
    p.add_argument("--tp", default="1",
                   help="tensor-parallel GPUs per replica, one or several comma-separated (e.g. 1,2,4: per method "
                        "the TP and replicas of fewest GPUs are chosen); each must divide the model's heads (default 1)")
    p.add_argument("--gpu-hour-price", type=float, default=DEFAULT_GPU_HOUR_PRICE,
                   help=f"USD per GPU-hour, for the cost per million output tokens (default {DEFAULT_GPU_HOUR_PRICE:.2f})")
    p.add_argument("--max-batch", type=int, default=None,
                   help="running sequences per replica (default: as many of the workload's mean prompt + output "
                        "as fit in the replica's KV memory, stated per row in the report)")
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
    add_progress_option(p)
    return p


def options_from_args(args) -> CapacityOptions:
    check_gpu_hour_price(args.gpu_hour_price)
    for name in ("target_rate", "max_batch", "duration", "candidates", "cv"):
        value = getattr(args, name)
        if value is None and name == "max_batch":
            continue
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
    opts = CapacityOptions(
        methods=parse_methods(args.methods), hardware=args.hardware, temperature=args.temperature,
        target_rate=args.target_rate, slo=Slo(**{k: (v / 1000 if v else None) for k, v in limits.items()}),
        load=LoadSpec(prompt_len=args.prompt_len, output_len=args.output_len, arrival=args.arrival, cv=args.cv,
                      trace=trace_option(args), duration_s=args.duration, max_batch=args.max_batch),
        candidates=args.candidates, seed=args.seed, tp=counts(args.tp, "--tp"), gpu_hour_price=args.gpu_hour_price)
    runs = 2 * (len(opts.methods) + 1) * len(opts.tp)   # GPUs for the target: two replica counts a method a TP
    check_load([opts.load.workload(opts.target_rate)] * runs, args.max_hours, what=f"--target-rate "
               f"{opts.target_rate:g} req/s for --duration {opts.load.duration_s:g} s ({runs} runs count GPUs for it)",
               lower="lower --target-rate or --duration")
    return opts


@cli_entry
def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    opts = options_from_args(args)
    profile = Profile.load(args.profile)
    scoring.check_recorded([profile], opts.temperature, None)
    check_tp(profile, opts.tp)
    start_run(args.out, "experiments.capacity", argv, args.overwrite)
    started = time.perf_counter()
    with make_executor(args.executor, workers=args.workers, address=args.scheduler,
                       progress=progress_enabled(args.progress)) as executor:
        result = plan(profile, opts, executor)
    command = "python -m experiments.capacity " + " ".join(shlex.quote(a) for a in argv)
    report = write_report(result, opts, Path(args.out), command)
    view = result["best"].astype({"replicas": "Int64", "gpus": "Int64"})
    view["saving"] = ["-" if pd.isna(v) else f"{v:+.0%}" for v in view["saving"]]
    view = view[["method", "label", "tp", "replicas", "gpus", "rate_per_gpu", "usd_per_m_tok", "saving"]].rename(
        columns={"rate_per_gpu": "max req/s/GPU", "usd_per_m_tok": "USD/M out tok", "saving": "saving vs ar"})
    print(view.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    if cap_note(result["best"]):
        print("\n" + cap_note(result["best"]))
    print(f"\ntarget {opts.target_rate:g} req/s at {opts.gpu_hour_price:.2f} USD per GPU-hour (GPUs = TP x replicas); "
          f"report {report} ({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
