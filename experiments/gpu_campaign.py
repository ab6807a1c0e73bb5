"""`python -m experiments.gpu_campaign`: the GPU calibration campaign (latency, drafters, replayed loops), in one command.

Four stages, each writing into `--out` (atomically):
1. latency profiles of the registry's real architectures (random weights), by running
   `python -m traces.timing` once per architecture -> `latency_<arch>.parquet`;
2. the drafters at the papers' shapes (GLIDE: one layer at the target's width with cross-attention;
   Kangaroo: exit layer 2 plus adapter; an EAGLE layer with the 32k/128k/152k heads, with and
   without CORAL's router; `traces.drafter_timing`) -> `drafter_latency.parquet` (LatencyTrace, role
   `draft`); from both, decode cost coefficients c = drafter / target latency and each target's
   fraction of the bandwidth bound (costmodel weights + KV bytes over the datasheet bandwidth) -> `coefficients.csv`;
3. speculative loops at real sizes in replayed-acceptance mode (`traces.replayed`): acceptance
   from a recorded TokenTrace (`--token-trace`) and, for a method without a drafter, its own steps
   of a StepTrace (`--step-trace`); every method's campaign configurations (`spec.campaign`), each
   repeated `--repeats` times, against plain decoding -> `replayed_steps.parquet`, `runs.csv`;
4. the fidelity table: measured tokens/s next to the tokens/s predicted from the latency
   profiles alone: a Profile of the fitted `calibrate.latency` table models prices each run's own
   steps through the method's step shape and `costmodel.step` (the one step-cost model)
   -> `fidelity.csv`, `report.md` (median and worst relative error, run-to-run spread).
`--tiny` runs all four on a CPU in a few minutes with a tiny random model and, unless traces are
given, a seeded synthetic TokenTrace (marked as such in the report).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import pandas as pd
import torch

import methods
from common import atomic
from traces import schema
from common.errors import InputError
from common.cli import CliParser, cli_entry
from common.rundir import add_overwrite_option, start_run
from runtime.cache import MODES, default_mode
from runtime.graph import mode_agreement
from traces.drafter_timing import write_drafter_latency
from traces.timer import Timer, hardware_name
from traces.replayed import (random_prompts, sources_from_step_trace,
                             sources_from_token_trace)

from campaigns.gpu import (BASELINE, CONFIGS, DRAFTER_ARCHITECTURES, GPU_ARCHITECTURES, campaign_profile, coefficient_pairs, coefficients, fidelity_table, loop_models, profile_architectures, replayed_acceptance, report, run_loops, synthetic_token_trace)


def parse_args(argv):
    p = CliParser(prog="python -m experiments.gpu_campaign", description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="output directory (profiles, steps, fidelity table, report); one "
                   "holding another run's files is refused unless --overwrite (or --skip-profiles, which reuses them)")
    add_overwrite_option(p)
    p.add_argument("--tiny", action="store_true", help="tiny random models and grids: the whole campaign on a CPU")
    p.add_argument("--token-trace", help="TokenTrace parquet (greedy, e.g. SmolLM2) whose ranks drive acceptance; required without --tiny "
                   "(default with --tiny: a seeded synthetic trace)")
    p.add_argument("--step-trace", help="lookahead StepTrace parquet whose accepted lengths drive lookahead (default: none; with --tiny a "
                   "synthetic one)")
    p.add_argument("--prompts", type=int, default=None, help="prompts of the trace to replay (default 4; 2 with --tiny)")
    p.add_argument("--prompt-len", type=int, default=None, help="random prompt length in tokens (default 128; 16 with --tiny)")
    p.add_argument("--max-new-tokens", type=int, default=None,
                   help="output tokens per prompt at most (default 128; 24 with --tiny)")
    p.add_argument("--repeats", type=int, default=None, help="timed repeats of every configuration (default 3; 2 with --tiny)")
    p.add_argument("--skip-profiles", action="store_true", help="reuse latency_*.parquet already in --out")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    p.add_argument("--seed", type=int, default=0, help="seed of weights, prompts and synthetic acceptance (default 0)")
    p.add_argument("--mode", choices=MODES, default=None,
                   help="runtime mode of every timed forward and loop: eager, static or graph (CUDA graphs) "
                        "(default graph on a GPU, eager on a CPU); a non-eager mode is first checked against "
                        "eager logits")
    return p.parse_args(argv)


def check_mode_agreement(target, mode: str, tiny: bool, log) -> dict[str, Any]:
    """Refuse to time `mode` unless its target logits match eager ones (`runtime.graph.mode_agreement`)."""
    if mode == "eager":
        return {"mode": mode}
    found = mode_agreement(target, mode, tokens=(1, 4, 64), ctx_len=16 if tiny else 512)
    for n, diff, agree in found.points:
        log(f"{mode} vs eager, {n} tokens: max |logit difference| {diff:.3g}, argmax agreement {agree:.1%}")
    if not found.ok:
        raise InputError(f"{mode} mode disagrees with eager: max |logit difference| {found.max_abs:.3g} "
                         f"exceeds {found.bound:.3g}; not timing it (rerun with --mode eager)")
    log(f"{mode} mode agrees with eager (max |logit difference| {found.max_abs:.3g} <= {found.bound:.3g})")
    return {"mode": mode, "max_logit_difference": found.max_abs, "tolerance": found.bound}


@cli_entry
def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    for name, full, tiny in (("prompts", 4, 2), ("prompt_len", 128, 16), ("max_new_tokens", 128, 24), ("repeats", 3, 2)):
        if getattr(args, name) is None:
            setattr(args, name, tiny if args.tiny else full)
    if min(args.prompts, args.prompt_len, args.max_new_tokens, args.repeats) < 1:
        raise InputError("--prompts, --prompt-len, --max-new-tokens and --repeats must be >= 1")
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda" and not torch.cuda.is_available():
        raise InputError("--device cuda asked for, but no CUDA device is available")
    if not args.tiny and device.type != "cuda":
        raise InputError("the full campaign needs a GPU; use --tiny to run it at tiny shapes on a CPU")
    if not args.tiny and not args.token_trace:
        raise InputError("--token-trace is required outside --tiny (record one with python -m traces.record --teacher-forced)")
    out = Path(args.out)
    if not args.skip_profiles:  # --skip-profiles continues in a previous run's folder
        start_run(out, "experiments.gpu_campaign", argv, args.overwrite)
    out.mkdir(parents=True, exist_ok=True)
    log = lambda msg: print(msg, flush=True)  # noqa: E731
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    names = GPU_ARCHITECTURES if not args.tiny else ("tiny",)
    grid = ({"tokens": "1,4,16,64,256", "ctx": "0,64", "batch": "1", "repeats": "2"} if args.tiny else {})
    hardware = hardware_name(device)
    mode = args.mode or default_mode(device)
    # 0. the mode's logits against eager ones, before anything is timed (the target freed again)
    target, drafter, model_names = loop_models(args.tiny, device, dtype)
    agreement = check_mode_agreement(target, mode, args.tiny, log)
    del target, drafter
    if device.type == "cuda":
        torch.cuda.empty_cache()

    # 1. latency profiles
    paths = sorted(out.glob("latency_*.parquet")) if args.skip_profiles else \
        profile_architectures(out, names, grid, str(device), log, mode)
    frames = [schema.read_trace(p, "latency")[0] for p in paths]
    # 2. drafter shapes
    timer = Timer(device, warmup=1, repeats=2 if args.tiny else 10)
    ctxs = (0, 64) if args.tiny else (0, 512, 1024, 2048, 4096)
    dframe = write_drafter_latency(out / "drafter_latency.parquet", ("tiny",) if args.tiny else DRAFTER_ARCHITECTURES, ctxs,
                                   timer, device, dtype, args.seed, mode)
    log(f"drafter shapes: {len(dframe)} rows")
    # 3. replayed loops
    target, drafter, model_names = loop_models(args.tiny, device, dtype)
    if args.token_trace:
        token_frame, _ = schema.read_trace(args.token_trace, "token")
        acceptance = f"TokenTrace {args.token_trace}"
    else:
        token_frame = synthetic_token_trace([f"p{i}" for i in range(args.prompts)], args.max_new_tokens, args.seed)
        acceptance = "synthetic TokenTrace (seeded; --tiny without --token-trace)"
    token_sources = sources_from_token_trace(token_frame)
    chosen = sorted(token_sources)[: args.prompts]
    token_sources = {pid: token_sources[pid] for pid in chosen}
    step_sources = None
    drafterless = [s.name for s in methods.specs() if not s.drafter_kinds and s.name != methods.BASELINE]
    if args.step_trace:
        step_frame, _ = schema.read_trace(args.step_trace, "step")
        step_sources = {}
        for method in set(step_frame["method"]) & set(drafterless):
            found = sources_from_step_trace(step_frame[step_frame.method == method])
            step_sources[method] = {pid: found[pid] for pid in sorted(found)[: args.prompts]}
    elif args.tiny:
        lengths = pd.DataFrame({"step": range(args.max_new_tokens),
                                "accepted": [1 + (i % 3 == 0) for i in range(args.max_new_tokens)]})
        step_sources = {m: {pid: sources_from_step_trace(lengths.assign(prompt_id=pid))[pid] for pid in chosen}
                        for m in drafterless}
    prompts = random_prompts(chosen, args.prompt_len, target.config.vocab_size, args.seed)
    look_ids = sorted({pid for sources in (step_sources or {}).values() for pid in sources})
    look_prompts = random_prompts(look_ids, args.prompt_len, target.config.vocab_size, args.seed)
    runs, steps = run_loops(target, drafter, CONFIGS, token_sources, step_sources, prompts, look_prompts,
                            args.repeats, args.max_new_tokens, log, mode)
    atomic.write_csv(out / "runs.csv", runs)
    schema.write_trace(out / "replayed_steps.parquet", steps,
                       schema.RunMetadata(kind="step", models={"target": model_names["target"],
                                                               "draft": model_names["draft_model"]},
                                          hardware=hardware, dtype=str(dtype).replace("torch.", ""), seed=args.seed,
                                          extra={"mode": "replayed acceptance", "acceptance": acceptance,
                                                 "runtime": agreement}))
    # 4. fidelity
    dtype_name = "bf16" if device.type == "cuda" else "fp32"
    profile = campaign_profile(frames + [dframe], model_names, target.config.arch_numbers(), hardware, dtype_name,
                               replayed_acceptance(token_frame, CONFIGS))
    coeffs = coefficients(pd.concat(frames + [dframe], ignore_index=True), coefficient_pairs(args.tiny),
                          hardware, dtype_name)
    atomic.write_csv(out / "coefficients.csv", coeffs)
    table = fidelity_table(runs, steps, [BASELINE, *CONFIGS], profile, args.prompt_len)
    atomic.write_csv(out / "fidelity.csv", table)
    meta = {"hardware": hardware, "dtype": str(dtype).replace("torch.", ""), "acceptance": acceptance,
            "runtime mode": mode}
    atomic.write_text(out / "report.md", report(table, meta, coeffs))
    spec = table[table.label != BASELINE.label]
    log(f"{len(spec)} configurations; |error| median {spec.rel_error.abs().median():.1%}, "
        f"worst {spec.rel_error.abs().max():.1%}; wrote {out / 'report.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
