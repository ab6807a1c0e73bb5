"""`python -m experiments.serve_load`: a served load priced by the simulator, then served by the engine.

    taskset -c 1 python -m experiments.serve_load --profile data/profiles/batch/smollm2-135m-cpu-batch32.json \\
        --target smollm2 --prompts libedit:59-99 --configs configs.txt --threads 1 --out out/served

(configs.txt: a configuration a line, e.g. "prompt_lookup g5 nmin2 nmax3"; a Profile whose engine pads its
rows, written by `python -m experiments.smollm2_batch`, prices the batches as this engine runs them; one
whose latency tables stop below `--max-batch` is refused before anything is written.)

A fixed request mix (`--requests` held-out prompts of `--prompts` with output lengths of `--output-lens`,
seeded) arrives as a Poisson process at each of `--rates` (requests/s, or xM: M times the capacity the
simulator predicts for plain decoding; or at the times of `--arrival-trace`). Each configuration of
`--configs` (plain decoding always among them) is priced by the simulator first (predictions.csv,
written before anything is served), then served by `traces.serve` on the continuous-batching engine
with `--max-batch` rows, FCFS admission and a KV budget of `--kv-tokens` (each running row reserving
its widest tree's slots, as vLLM reserves lookahead slots). Writes served.csv (per rate and
configuration: throughput, p50/p90 TTFT, TPOT and end-to-end, predicted, measured and the relative
error, the measured quantile's spread over the load's requests (bootstrap) and whether the error lies
within twice it, and the KV memory each method held), requests.csv and steps.csv (measured), step_costs.csv (the
median decode step by rows and the prefill per request, simulated against measured: where the time goes),
report.md.
What it all means is `fidelity.served`.

`--repredict RUN --profile P --out OUT` prices a finished served run again with another Profile (one
recorded after it, say) and sets it against what RUN measured: the same arrivals, request mix, max batch,
KV budget and seeds (RUN's manifest), nothing served; the report says the predictions came after the
measurement. The Profile must not have been calibrated on RUN's prompts.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from calibrate.checks import check_target, dataset_of
from campaigns.measure import Bench, parse_candidate
from common import atomic
from common.cli import CliParser, cli_entry, log, require_positive
from common.errors import InputError
from common.rundir import add_overwrite_option, read_manifest, start_run
from fidelity.run import check_held_out, read_candidates
from fidelity.served import (MULTIPLES, capacity, check_requests, compare_loads, make_loads, measured_run,
                             parse_rates, predict_load, read_arrival_trace, request_mix, request_spread, serve_loads,
                             step_costs)
from fidelity.served_report import served_report
from profiles.profile import Profile
from runtime.prompts import load_prompt_mix
from traces.timing import int_list


def build_parser() -> argparse.ArgumentParser:
    p = CliParser(prog="python -m experiments.serve_load", description=__doc__.splitlines()[0])
    p.add_argument("--profile", required=True, type=Path, help="Profile JSON of the batch engine (batching padded)")
    p.add_argument("--target", help="target model spec the Profile describes (e.g. smollm2); required unless --repredict (default: none)")
    p.add_argument("--prompts", help="held-out prompts the requests draw from, one dataset (set:A-B); required "
                                     "unless --repredict (default: none)")
    p.add_argument("--configs", type=Path, help="file of configurations, one 'label [@drafter]' a line; required "
                                                "unless --repredict (default: none)")
    p.add_argument("--repredict", type=Path, default=None, metavar="RUN",
                   help="price the served run in RUN again with --profile and compare it with what RUN measured "
                        "(its loads, mix and options; nothing is served; default: none, serve a new load)")
    p.add_argument("--out", required=True, type=Path, help="output folder")
    add_overwrite_option(p)
    p.add_argument("--drafters", type=Path, default=Path("artifacts/drafters"), help="trained drafters' folder")
    p.add_argument("--rates", default=",".join(f"x{m:g}" for m in MULTIPLES),
                   help="arrival rates, requests/s, or xM for M times plain decoding's predicted capacity "
                        "(default %(default)s: light, near capacity, overload)")
    p.add_argument("--arrival-trace", type=Path, default=None,
                   help="a CSV whose column arrival_s gives the arrival times instead of --rates (default: none)")
    p.add_argument("--requests", type=int, default=40, help="requests per load (default %(default)s)")
    p.add_argument("--output-lens", default="32,48,64", help="output lengths the mix draws from (default %(default)s)")
    p.add_argument("--max-batch", type=int, default=8, help="rows decoded at once (default %(default)s)")
    p.add_argument("--kv-tokens", type=int, default=3200, help="KV budget in tokens (default %(default)s)")
    p.add_argument("--context", type=int, default=1024, help="the most tokens a request holds (default %(default)s)")
    p.add_argument("--sim-repeats", type=int, default=10, help="simulated seeds per load (default %(default)s)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="seed of the mix, the arrivals and the simulator (default 0)")
    return p


@cli_entry
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else list(argv)
    if args.repredict is not None:
        return repredict(args)
    missing = [f"--{name}" for name in ("target", "prompts", "configs") if getattr(args, name) is None]
    if missing:
        raise InputError(f"{', '.join(missing)} required (unless --repredict RUN)")
    require_positive(args, ("requests", "max_batch", "kv_tokens", "context", "sim_repeats", "threads"))
    output_lens = list(int_list(args.output_lens, "output-lens", 1))
    if args.arrival_trace is None:
        parse_rates(args.rates)
    else:
        read_arrival_trace(args.arrival_trace)
    profile = Profile.load(args.profile)
    chosen = load_prompt_mix(args.prompts)
    check_held_out(profile, [p.prompt_id for p in chosen])
    if len({p.dataset for p in chosen}) != 1:
        raise InputError("--prompts: a served mix draws from one dataset (its acceptance prices every request)")
    dataset = dataset_of(profile, chosen[0].dataset)
    cands = read_candidates(args.configs)
    bench = Bench(args.target, profile.drafters, args.drafters, args.threads, args.seed)
    check_target(profile, bench.target.model)
    encoded = {pid: ids for _, pid, ids in bench.encode(chosen)}
    check_requests(bench, cands, encoded, output_lens, args.max_batch, args.context)
    mix = request_mix(list(encoded.items()), args.requests, output_lens, args.seed)
    plain_capacity = capacity(profile, mix, args.max_batch, args.kv_tokens, args.seed)
    runs = make_loads(mix, plain_capacity, args.rates, args.arrival_trace, args.seed)
    start_run(args.out, "experiments.serve_load", argv, args.overwrite)

    predicted = pd.DataFrame([{"load": name, "rate": rate, "candidate": cand.label,
                               **predict_load(profile, cand, load, args.max_batch, args.kv_tokens, args.seed,
                                              args.sim_repeats, dataset)}
                              for name, rate, load in runs for cand in cands])
    atomic.write_csv(args.out / "predictions.csv", predicted.assign(plain_capacity_req_s=plain_capacity, dataset=dataset))
    log(f"wrote {args.out / 'predictions.csv'} before serving (plain decoding's predicted capacity "
        f"{plain_capacity:.3f} requests/s)")
    started = time.perf_counter()
    measured, requests, steps = serve_loads(bench, cands, runs, encoded, profile, args.max_batch, args.kv_tokens,
                                            args.context, log)
    atomic.write_csv(args.out / "requests.csv", requests)
    atomic.write_csv(args.out / "steps.csv", steps)
    table = compare_loads(predicted, measured, request_spread(requests, args.seed))
    atomic.write_csv(args.out / "served.csv", table)
    minutes = (time.perf_counter() - started) / 60
    costs = step_costs(profile, cands, runs, steps, args.max_batch, args.kv_tokens, args.seed, dataset)
    atomic.write_csv(args.out / "step_costs.csv", costs)
    atomic.write_text(args.out / "report.md", served_report(table, args, profile, plain_capacity, minutes, costs=costs))
    errors = table[[c for c in table.columns if c.endswith("_rel_error")]].abs().to_numpy()
    print(f"served {len(runs)} loads x {len(cands)} configurations in {minutes:.1f} min; |error| median "
          f"{100 * np.nanmedian(errors):.1f}%, worst {100 * np.nanmax(errors):.1f}%; wrote {args.out}")
    return 0


def repredict(args) -> int:
    """`--repredict RUN`: RUN's loads priced by `--profile`, beside what RUN measured (module docstring)."""
    manifest = read_manifest(args.repredict)
    if manifest is None or manifest.get("cli") != "experiments.serve_load" or manifest.get("status") != "ok":
        raise InputError(f"--repredict {args.repredict}: not a finished run of experiments.serve_load (its manifest.json)")
    if args.out.resolve() == args.repredict.resolve():
        raise InputError(f"--out {args.out} is the run priced again: write beside it, not over its measurement")
    served = build_parser().parse_args(manifest["argv"])
    profile = Profile.load(args.profile)
    chosen = load_prompt_mix(served.prompts)
    check_held_out(profile, [p.prompt_id for p in chosen])
    dataset = dataset_of(profile, chosen[0].dataset)
    runs, labels, measured = measured_run(args.repredict)
    cands = [parse_candidate(label) for label in labels]
    start_run(args.out, "experiments.serve_load", args.argv, args.overwrite)
    predicted = pd.DataFrame([{"load": name, "rate": rate, "candidate": cand.label,
                               **predict_load(profile, cand, load, served.max_batch, served.kv_tokens, served.seed,
                                              served.sim_repeats, dataset)}
                              for name, rate, load in runs for cand in cands])
    plain_capacity = capacity(profile, runs[0][2], served.max_batch, served.kv_tokens, served.seed)
    atomic.write_csv(args.out / "predictions.csv", predicted.assign(plain_capacity_req_s=plain_capacity, dataset=dataset))
    spread = request_spread(pd.read_csv(args.repredict / "requests.csv"), served.seed)
    table = compare_loads(predicted, measured, spread)
    atomic.write_csv(args.out / "served.csv", table)
    costs = step_costs(profile, cands, runs, pd.read_csv(args.repredict / "steps.csv"), served.max_batch,
                       served.kv_tokens, served.seed, dataset)
    atomic.write_csv(args.out / "step_costs.csv", costs)
    served.argv, served.profile = manifest["argv"], args.profile
    note = (f"Predicted after the measurement: `python -m experiments.serve_load {' '.join(args.argv)}` priced the "
            f"loads that run `{args.repredict}` served (measured {manifest.get('started', '?')}, commit "
            f"{manifest.get('commit', '?')}) with this Profile; the loads keep that run's names (an xM load: M times "
            "the capacity that run's own Profile predicted).")
    atomic.write_text(args.out / "report.md", served_report(table, served, profile, plain_capacity, float("nan"), note,
                                                             costs))
    errors = table[[c for c in table.columns if c.endswith("_rel_error")]].abs().to_numpy()
    print(f"priced {len(runs)} loads x {len(cands)} configurations of {args.repredict} again; |error| median "
          f"{100 * np.nanmedian(errors):.1f}%, worst {100 * np.nanmax(errors):.1f}%; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
