"""Command line for the discrete-event simulator.

    python -m experiments.simulate stream --profile P.json --method sd --config '{"gamma": 4}' --out out/sim
    python -m experiments.simulate serve  --profile P.json --method sd --config '{"gamma": 4}' \
        --rates 2,4,8 --duration 600 --replicas 4 --max-batch 32 --out out/serve
    python -m experiments.simulate crossover --profile data/profiles/glide-vicuna-7b-h800.json \
        --out examples/batch_crossover

stream: one request's decode loop (optionally replayed from a TokenTrace); serve: arrivals to a
cluster at one or more offered loads; crossover: throughput against batch size with and without
speculative decoding. Each writes CSV, summary JSON, plots and prints a short table.
"""
from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
from pathlib import Path

import pandas as pd

from methods import BASELINE
import methods
from simulator import Cluster, Parallelism, Workload, simulate_serving, simulate_stream
from simulator.methods import SETUP_OPTIONS, build_step_model, load_profile
from simulator.leaning import profile_spread
from simulator.replay import prompt_ids, replay_draws
from simulator.workload import add_workload_options, check_load, realised_rate, trace_option
from simulator.batch_load import BatchLoad
from simulator.report import batch_crossover, write_crossover_report, write_run
from common import atomic
from common.bundled import bundled
from common.errors import InputError
from common.cli import CliParser, cli_entry
from common.progress import add_progress_option, progress_bar, progress_enabled
from common.rundir import add_overwrite_option, start_run


def _rates(text: str) -> list[float]:
    try:
        rates = [float(r) for r in text.split(",") if r.strip()]
    except ValueError:
        raise InputError(f"--rates '{text}' is not a comma-separated list of numbers") from None
    if not rates or any(not r > 0 for r in rates):
        raise InputError(f"arrival rates must be > 0 requests/s, got '{text}'")
    return rates


def _ints(text: str, what: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise InputError(f"{what} '{text}' is not a comma-separated list of integers") from None
    if not values or any(v < 1 for v in values):
        raise InputError(f"{what} must be integers >= 1, got '{text}'")
    return values


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profile", required=True, help="Profile JSON (profiles.schema layout), e.g. data/profiles/*.json")
    p.add_argument("--out", required=True, help="output directory for CSV, JSON and plots (manifest.json lists them); "
                   "one holding another run's files is refused unless --overwrite")
    add_overwrite_option(p)
    p.add_argument("--seed", type=int, default=0, help="seed of every random choice (default 0)")
    add_progress_option(p)


def bundled_examples() -> list[list[str]]:
    """One `stream` command per bundled paper profile: the paper's own method (the file name's
    prefix), its default configuration, on the profile's first drafter for it. --help shows them
    and tests/test_cli_help.py runs every one, so the examples stay true to the bundled data."""
    examples = []
    for path in sorted(bundled("profiles").glob("*.json")):
        method = path.name.split("-")[0]
        if method not in methods.names(sweep_only=True):
            continue                            # not a paper's profile (the project's own recordings)
        spec, profile = methods.get(method), load_profile(path)
        setup = spec.setups(profile)[0]
        chosen = spec.config()
        try:                                    # the default configuration, else the first the sweep searches
            build_step_model(profile, method, {**chosen.to_dict(), "drafter": setup.drafter})
        except InputError:
            chosen = spec.configs_of(spec.space(setup).iloc[:1])[0]
        config = {k: v for k, v in chosen.to_dict().items() if v is not None}
        config.update({"drafter": setup.drafter} if setup.drafter else {})
        examples.append(["stream", "--profile", f"data/profiles/{path.name}", "--method", method,
                         "--config", json.dumps(config), "--out", f"out/sim/{path.stem}"])
    return examples


def _epilog() -> str:
    lines = ["  python -m experiments.simulate " + shlex.join(e) for e in bundled_examples()]
    return "examples (one per bundled paper profile, each runs as written):\n\n" + "\n".join(lines)


def _method(p: argparse.ArgumentParser) -> None:
    p.add_argument("--method", required=True, choices=methods.names(), help="decoding method")
    p.add_argument("--config", default="{}",
                   help="the method's config keys plus setup keys (" + ", ".join(SETUP_OPTIONS) + ") as JSON, "
                        "or a label ('sd g4'); unknown keys are refused; see the examples in "
                        "`python -m experiments.simulate --help` (default: {}, the method's default configuration)")


def _parser() -> argparse.ArgumentParser:
    parser = CliParser(prog="python -m experiments.simulate", description=__doc__.split("\n\n")[0],
                       epilog=_epilog)
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("stream", help="one request's decode loop")
    _common(s)
    _method(s)
    s.add_argument("--n-tokens", type=int, default=256, help="output tokens per request (default 256)")
    s.add_argument("--prompt-len", type=int, default=128, help="prompt tokens (default 128)")
    s.add_argument("--repeats", type=int, default=20, help="independent streams, seeds seed..seed+repeats-1 (default 20)")
    s.add_argument("--engine", choices=("fast", "simpy"), default="fast", help="vectorised or event-by-event engine")
    s.add_argument("--token-trace", help="TokenTrace parquet: replay its prompts exactly instead of drawing "
                   "acceptance (default: draw from the profile's acceptance model)")
    s.add_argument("--per-step", action="store_true", help="also write steps.csv")
    v = sub.add_parser("serve", help="a serving cluster under load")
    _common(v)
    _method(v)
    v.add_argument("--rates", default=None,
                   help="offered loads in requests/s, comma-separated; with --arrival trace each replays the "
                        "trace's shape at that rate (default: 1, or the trace as recorded)")
    v.add_argument("--duration", type=float, default=300.0, help="seconds of arrivals (default 300; a trace replayed as recorded keeps its own)")
    add_workload_options(v)
    v.add_argument("--replicas", type=int, default=1, help="replicas (default 1)")
    v.add_argument("--max-batch", type=int, default=32, help="batch limit per replica (default 32)")
    v.add_argument("--tp", type=int, default=1, help="tensor-parallel GPUs per replica")
    v.add_argument("--pp", type=int, default=1, help="pipeline stages per replica")
    v.add_argument("--lp", type=int, default=1, help="branch-parallel GPUs (a method whose verify forward has branches and no draft)")
    v.add_argument("--draft-own-gpu", action="store_true", help="the draft model on its own GPU")
    v.add_argument("--gpu-mem-gb", type=float, help="memory per GPU (default: the profile's hardware)")
    v.add_argument("--per-step", action="store_true", help="also write iterations.csv")
    v.add_argument("--acceptance-spread", default="0",
                   help="how far one request's tokens per step strays from the average, relative to the gain: "
                        "'profile' (the Profile's prompt spread, each prompt's own step noise taken out) or a "
                        "number (default 0: every request drafts alike)")
    c = sub.add_parser("crossover", help="throughput against batch size, with and without speculative decoding")
    _common(c)
    c.add_argument("--configs", default=None,
                   help=f"JSON {{label: [method, config]}} compared with plain decoding (label '{BASELINE}'); "
                        "default: every swept method's default configuration the profile can run")
    c.add_argument("--batches", default="1,2,4,8,16,32,64,128,192", help="batch sizes, comma-separated")
    c.add_argument("--prompt-len", type=int, default=256, help="prompt tokens (default 256)")
    c.add_argument("--output-len", type=int, default=256, help="output tokens (default 256)")
    return parser


def _print(frame: pd.DataFrame, columns: list[str]) -> None:
    cols = [c for c in columns if c in frame]
    print(frame[cols].to_string(index=False, float_format=lambda x: f"{x:.4g}"))


def run_stream(args) -> None:
    profile = load_profile(args.profile)
    step = build_step_model(profile, args.method, args.config)      # refuses a bad config before any run
    if args.repeats < 1 and not args.token_trace:
        raise InputError(f"--repeats must be >= 1, got {args.repeats}")
    if args.n_tokens < 2 and not args.token_trace:
        raise InputError(f"--n-tokens must be >= 2 (the prefill emits the first), got {args.n_tokens}")
    start_run(args.out, "experiments.simulate", args.argv, args.overwrite)
    if args.token_trace:
        rows, steps = [], []
        for pid in prompt_ids(args.token_trace):
            draws = replay_draws(args.token_trace, profile, args.method, args.config, pid)
            res = simulate_stream(profile, args.method, args.config, int(draws.accepted.sum()) + 1, args.seed,
                                  prompt_len=args.prompt_len, engine=args.engine, draws=draws, per_step=args.per_step)
            rows.append(dict(res.summary, prompt_id=pid))
            if res.steps is not None:
                steps.append(res.steps.assign(prompt_id=pid))
    else:
        rows, steps = [], []
        with progress_bar(args.repeats, "streams", progress_enabled(args.progress), unit="stream") as bar:
            for i in range(args.repeats):
                res = simulate_stream(profile, args.method, args.config, args.n_tokens, args.seed + i,
                                      prompt_len=args.prompt_len, engine=args.engine, per_step=args.per_step)
                rows.append(res.summary)
                if res.steps is not None:
                    steps.append(res.steps.assign(seed=args.seed + i))
                bar.update()
    table = pd.DataFrame(rows)
    out = Path(args.out)
    atomic.write_csv(out / "streams.csv", table)
    atomic.write_json(out / "summary.json", {
        "method": args.method, **step.describe(), "streams": len(table),
        **{f"{k}_mean": float(table[k].mean()) for k in ("ttft_s", "tpot_s", "e2e_s", "tokens_per_step", "speedup")},
        **{f"{k}_p99": float(table[k].quantile(0.99)) for k in ("tpot_s", "e2e_s")}})
    if steps:
        atomic.write_csv(out / "steps.csv", pd.concat(steps, ignore_index=True))
    _print(table, ["seed", "prompt_id", "steps", "tokens_per_step", "ttft_s", "tpot_s", "e2e_s", "speedup"])


def acceptance_spread(value: str, profile, step) -> dict:
    """`--acceptance-spread`: the Workload's per-request spread, 'profile' (the Profile's prompt spread of
    the method on the dataset its acceptance entry is of) or a number >= 0 (`simulator.leaning`)."""
    if value == "profile":
        return profile_spread(profile, step.setup.acceptance.dataset or None, step.config.method)
    try:
        number = float(value)
    except ValueError:
        number = float("nan")
    if not (number >= 0 and math.isfinite(number)):
        raise InputError(f"--acceptance-spread must be 'profile' or a finite number >= 0, got {value!r}")
    return {"acceptance_spread": number}


def run_serve(args) -> None:
    for option, value in (("--cv", args.cv), ("--duration", args.duration)):
        if not (value > 0 and math.isfinite(value)):  # refuses nan and inf (--cv even when arrivals are poisson)
            raise InputError(f"{option} must be a finite number > 0, got {value}")
    trace = trace_option(args)
    profile = load_profile(args.profile)
    step = build_step_model(profile, args.method, args.config)      # refuses a bad config before any run
    within_measured(profile, step, args.method, args.max_batch, "--max-batch")
    spread = acceptance_spread(args.acceptance_spread, profile, step)
    cluster = Cluster(replicas=args.replicas, max_batch=args.max_batch, gpu_mem_gb=args.gpu_mem_gb,
                      parallel=Parallelism(tp=args.tp, pp=args.pp, lp=args.lp, draft_on_own_gpu=args.draft_own_gpu))
    rates = _rates(args.rates) if args.rates is not None else [None if trace is not None else 1.0]
    workloads = [Workload(rate=rate, duration_s=args.duration, arrival=args.arrival, cv=args.cv,
                          prompt_len=args.prompt_len, output_len=args.output_len, trace=trace, **spread)
                 for rate in rates]
    check_load(workloads, args.max_hours, args.per_step, "the offered loads",
               "lower --rates or --duration" if trace is None or args.rates else "give a shorter --arrival-trace")
    requests, summaries, iterations = [], [], []
    start_run(args.out, "experiments.simulate", args.argv, args.overwrite)
    bar = progress_bar(len(rates), "offered loads", progress_enabled(args.progress), unit="load")
    for workload in workloads:
        res = simulate_serving(profile, args.method, args.config, workload, cluster, args.seed, per_step=args.per_step)
        rate = workload.rate if workload.rate is not None else realised_rate(res.requests)
        label = f"{rate:g} req/s" + (" (trace as recorded)" if workload.rate is None else "")
        requests.append(res.requests.assign(label=label, offered_rate=rate))
        summaries.append(dict(res.summary, label=label, offered_rate=rate))
        if res.iterations is not None:
            iterations.append(res.iterations.assign(label=label))
        bar.update()
    bar.close()
    write_run(Path(args.out), pd.concat(requests, ignore_index=True), summaries,
              pd.concat(iterations, ignore_index=True) if iterations else None)
    _print(pd.DataFrame(summaries), ["offered_rate", "completed", "oom", "preemptions", "throughput_tok_s",
                                     "ttft_s_p50", "ttft_s_p99", "tpot_s_p50", "tpot_s_p99", "e2e_s_p99"])


def within_measured(profile, step, label: str, batch: int, option: str) -> None:
    """InputError where `batch` lies past the latency tables of the models `step` runs: a measured
    table is not extrapolated in batch (`profiles.latency`)."""
    measured = profile.max_batch(step.priced_models)
    if batch > measured:
        raise InputError(f"{option}: {label} on '{profile.name}' is priced by latency tables measured up to batch "
                         f"{measured:g}, and batch {batch} lies past them (a batch is not extrapolated): give "
                         f"{option} {int(measured)} or less, or a Profile recorded at larger batches")


def default_configs(profile) -> dict[str, list]:
    """{label: [method, config]}: every swept method's default configuration on `profile`, where it runs."""
    out = {}
    for spec in methods.specs():
        if not spec.sweep:
            continue
        try:
            build_step_model(profile, spec.name, spec.config().to_dict())
        except InputError:
            continue
        out[spec.config().label] = [spec.name, spec.config().to_dict()]
    if not out:
        raise InputError(f"profile '{profile.name}' runs no speculative method: pass --configs")
    return out


def run_crossover(args) -> None:
    profile = load_profile(args.profile)
    try:
        configs = json.loads(args.configs) if args.configs is not None else default_configs(profile)
    except json.JSONDecodeError as exc:
        raise InputError(f"--configs is not valid JSON ({exc.msg})") from None
    if not isinstance(configs, dict) or not all(isinstance(v, list) and len(v) == 2 for v in configs.values()):
        raise InputError("--configs must be a JSON object {label: [method, config]}")
    runs = [(BASELINE, BASELINE, {})] + [(label, m, c) for label, (m, c) in configs.items()]
    batches = _ints(args.batches, "--batches")
    for label, method, config in runs:
        step = build_step_model(profile, method, config)      # refuses a bad config before any run
        within_measured(profile, step, label, max(batches), "--batches")
    start_run(args.out, "experiments.simulate", args.argv, args.overwrite)
    load = BatchLoad(prompt_len=args.prompt_len, output_len=args.output_len)
    table = batch_crossover(profile, runs, batches, load, seed=args.seed, progress=progress_enabled(args.progress))
    command = "python -m experiments.simulate " + shlex.join(args.argv)
    write_crossover_report(Path(args.out), table, BASELINE, profile.name, command, load, profile.heldout_error())
    _print(table, ["label", "batch", "throughput_tok_s", "tpot_ms", "oom", "preemptions"])


@cli_entry
def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else list(argv)
    {"stream": run_stream, "serve": run_serve, "crossover": run_crossover}[args.command](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
