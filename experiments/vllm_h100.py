"""`python -m experiments.vllm_h100`: vLLM on one H100, EAGLE-3 and n-gram speculation over the study's
request streams at batch 1-128, predicted (ours, the study's step-time fit, the study's simulator).

    python -m experiments.vllm_h100 --data SPECDECODE_DATA --out examples/vllm_h100_llama8b

--data holds SpecDecode-Bench's combined_<dataset>.jsonl files (repository SpecDecode-Bench/simulator,
data/llama3.1-8B/); --profile the vLLM Profile (`python -m calibrate.vllm`). Writes predictions.csv,
loops.csv, vllm_<dataset>.json, figures and report.md (`papers.specdecode.report`).
"""
from __future__ import annotations

import os
import shlex
import sys
import time

import pandas as pd

from calibrate.vllm import facts
from calibrate.vllm.streams import CACHE, DATASETS, read_streams
from common.bundled import bundled
from common.cli import CliParser, cli_entry, counts
from common.errors import InputError
from common.rundir import add_overwrite_option, start_run
from costmodel.price import DEFAULT_GPU_HOUR_PRICE
from papers.specdecode import run
from papers.specdecode.deploy import DeployOptions, best_per_batch, capacity
from papers.specdecode.report import write_report
from profiles.profile import Profile

PROFILE = bundled("profiles", "llama-3.1-8b-h100-vllm.json")


def build_parser() -> CliParser:
    p = CliParser(prog="python -m experiments.vllm_h100", description=__doc__.split("\n\n")[0].split(": ", 1)[1])
    p.add_argument("--data", required=True, help="folder of the study's combined_<dataset>.jsonl files")
    p.add_argument("--profile", default=str(PROFILE), help="the vLLM Profile (python -m calibrate.vllm)")
    p.add_argument("--out", default="out/vllm_h100", help="output folder; another run's is refused unless --overwrite")
    add_overwrite_option(p)
    p.add_argument("--batches", default="1,8,16,32,64,128", help="concurrencies (max_num_seqs) to predict")
    p.add_argument("--ks", default="1,3,5", help="draft lengths (num_speculative_tokens)")
    p.add_argument("--seed", type=int, default=0, help="seed of the order the requests are served in")
    p.add_argument("--max-batched-tokens", type=int, default=facts.MAX_BATCHED_TOKENS["serve"],
                   help="vLLM's token budget a step (8192: vllm serve on an H100; 16384: the offline LLM class)")
    p.add_argument("--slo-tpot-ms", type=float, default=20.0, help="median TPOT the deployment answer keeps within")
    p.add_argument("--target-rate", type=float, default=10.0, help="requests/s to plan GPUs for")
    p.add_argument("--gpu-hour-price", type=float, default=DEFAULT_GPU_HOUR_PRICE,
                   help=f"USD per GPU-hour, for the cost per million tokens (default {DEFAULT_GPU_HOUR_PRICE:.2f})")
    p.add_argument("--proposals-cache", default=str(CACHE),
                   help="folder keeping vLLM's n-gram proposals replayed per input file ('none': replay anew)")
    p.add_argument("--workers", type=int, default=None, help="processes (default: the cores this process may use)")
    return p


PROTOCOL = (
    "Each dataset's requests (all of them), in one order drawn by numpy default_rng(seed).permutation, the same for "
    "every run of that dataset, wait from time 0; vLLM's V1 scheduler keeps B of them running (max_num_seqs = B), "
    "running rows first (1 + their proposed tokens, or a prompt's rest chunked to the step's token budget), then "
    "admits waiting ones in order while places, budget and KV blocks allow (`simulator.closed_loop`). Each request "
    "replays its own prompt length, output length and steps at k (`traces.span_replay.ReplayRequest.steps`; plain "
    "decoding its stored output, EAGLE its own run's spans, n-gram its spans with what vLLM's rule proposed at each "
    "step, `traces.stream_steps`). Throughput: the tokens generated while the loop keeps B in flight (from the first "
    "step to the last request's admission) over that time; the whole run's, drain included, is `run_speedup`. "
    "Speedup: over plain decoding at the same B and calibration. Oracle: k + 1 tokens a step until the output ends, "
    "priced as the method. TPOT: median over the requests finished while B were in flight of (finish - first "
    "token) / (output - 1).")


@cli_entry
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    options = run.Options(counts(args.batches, "--batches"), counts(args.ks, "--ks"), args.seed, args.max_batched_tokens)
    if options.max_batched_tokens < 1:
        raise InputError(f"--max-batched-tokens must be >= 1, got {options.max_batched_tokens}")
    deploy = DeployOptions(args.slo_tpot_ms, args.target_rate, args.gpu_hour_price)
    profile = Profile.load(args.profile)
    if profile.target != facts.TARGET or "eagle3" not in profile.drafters:
        raise InputError(f"{args.profile}: not a vLLM Profile of {facts.TARGET} with EAGLE-3 (python -m calibrate.vllm)")
    workers = args.workers or len(os.sched_getaffinity(0))
    out = start_run(args.out, "python -m experiments.vllm_h100", argv, args.overwrite).root
    started = time.perf_counter()
    cache = None if args.proposals_cache.lower() == "none" else args.proposals_cache
    streams = read_streams(args.data, DATASETS, workers, cache)
    loops, peer = run.predict(profile, streams, options, workers)
    predictions = pd.concat([run.speedups(loops), peer], ignore_index=True).sort_values(
        ["dataset", "method", "k", "calibration", "batch"]).reset_index(drop=True)
    best = best_per_batch(predictions)
    plan = capacity(loops, best, deploy)
    seconds = time.perf_counter() - started
    shown = os.path.relpath(args.profile)
    meta = {"command": "python -m experiments.vllm_h100 " + shlex.join(sys.argv[1:] if argv is None else argv),
            "seconds": seconds, "cores": workers, "profile": shown, "protocol": PROTOCOL,
            "inputs": {s.file: s.sha256 for s in streams.values()}, "options": {**vars(args), "profile": shown},
            "sanity": run.sanity_lines(profile, loops), "notes": run.NOTES}
    write_report(out, predictions, loops, best, plan, profile, meta, deploy)
    print(f"wrote {out}: {len(predictions)} predictions in {seconds:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
