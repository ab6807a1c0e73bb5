"""`python -m traces.timing`: time model forwards over a grid and write LatencyTrace rows.

Latency does not depend on the weights, so every forward here runs on whatever the loader gives
(trained, GGUF, or a real architecture with random weights, `random:vicuna-7b`). The grid is
tokens per forward (query tokens per sequence) x context length (tokens already in the KV cache)
x batch size. The cache is filled with random keys/values of the right length instead of a
prefill (its contents do not change the time), and cropped back after every timed forward.

What is timed, per role:
- `target`: the model's full forward over n new tokens with logits at every position (what a
  verification forward computes);
- `draft`: each `--drafter`: another model spec (same loader), or `layers:K`, the target's first K
  layers with its head (a cheap same-vocabulary drafter);
- `lm_head` / `router_head`: the target's final norm + LM head on n x batch hidden states, plain
  and through CORAL's LM-head router with N groups, top-n active (`--router N:n`); no attention,
  so these are timed at context 0 only.

Each point: `--warmup` untimed runs, then timed runs: `--repeats` of them, or fewer (never below
`--min-repeats`) once the point has used `--point-seconds`; the row holds the median and the
number of timed runs. On a GPU each run is timed with CUDA events around the forward alone (no
host synchronisation inside it); on a CPU with perf_counter. A point that stands out from its
neighbours (longer than with more context, a jump over the next smaller context, or longer than a
forward doing more work where its shape is not so at other contexts: a stall of a shared machine,
not the model) is timed again, up to three rounds, keeping the faster median
(`traces.timer.retime_outliers`). `--rounds R` passes over the whole grid R times and keeps each
point's lower median of the passes' medians (`traces.timer.across_rounds`): on a shared machine
whose speed drifts for minutes at a time, a point's samples then come from R spells, not one.
`--retime TRACE` times again only the points of an earlier grid that stand out, on the machine and
with the options that timed it (`traces.retime`).
`--mode` (default graph on a GPU, eager on a CPU) picks the runtime mode of the cache forwards
(runtime.cache): in graph mode each point's forward is captured in its warm-up and replayed when
timed; every row says its mode (heads are plain eager ops). `--cache batch` times each forward as the
continuous-batching engine runs it (`runtime.engine.batch`): every row of a `runtime.ragged.BatchKVCache`
holding the context, the ids, positions and per-row mask its `inputs` builds (built once per point,
outside the timing: that host work is the engine's, which its calibration fits per row); the file's
metadata says which cache. `--linear plain` times the
projections as `F.linear` instead of `runtime.linear`'s few-row CPU path. `--engine transformers`
times transformers' own modules instead of this project's (`traces.timing_transformers`), for a
peer engine that runs them; the file's metadata says which engine and path.
"""
from __future__ import annotations

import argparse
from typing import Sequence

import pandas as pd
import torch

from profiles.machine import Machine, this_machine
from traces import schema
from traces.forwards import CACHES, Finished, Grid, build_router, profile_head, profile_model
from traces.retime import GRID_AXES, EarlierGrid
from traces.timer import Timer, across_rounds, hardware_name
from runtime.drafters.router import LMHeadRouter
from common.errors import InputError
from common.cli import CliParser, cli_entry
from common.rundir import add_overwrite_option, git_commit, resumable_output
from common.progress import add_progress_option, progress_enabled
from runtime.cache import MODES, default_mode
from runtime.linear import use_skinny
from runtime.llama import Llama
from runtime.engine.__main__ import load_drafter
from runtime.models import load_model
from traces.timing_transformers import load_units

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
DTYPE_NAMES = {**{v: k for k, v in DTYPES.items()}, torch.float64: "fp64"}
# Default grids: the GPU one is the full picture; the CPU one is thinned so that a 135M model's
# grid (with loading) finishes in a few minutes on two cores.
GPU_GRID = {"tokens": (1, 2, 4, 8, 16, 32, 64, 128, 256), "ctx": (0, 512, 1024, 2048, 4096), "batch": (1, 2, 4, 8)}
CPU_GRID = {"tokens": (1, 4, 16, 64, 256), "ctx": (0, 1024, 4096), "batch": (1, 2)}
LINEAR_PATHS = ("few-row", "plain")   # runtime.linear on or off (--linear)
ENGINES = ("specsim", "transformers")  # whose forwards are timed (--engine)


def int_list(text: str, name: str, minimum: int) -> tuple[int, ...]:
    """`1,2,4` -> (1, 2, 4); every value >= minimum."""
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise InputError(f"--{name} must be comma-separated integers, got '{text}'") from None
    if not values or min(values) < minimum:
        raise InputError(f"--{name} needs integers >= {minimum}, got '{text}'")
    return tuple(sorted(set(values)))


def parse_router(text: str) -> tuple[int, int]:
    """`16:4` -> (16 groups, top-4 active)."""
    parts = text.split(":")
    try:
        groups, top_n = (int(p) for p in parts)
    except ValueError:
        raise InputError(f"--router takes GROUPS:TOP_N like 16:4, got '{text}'") from None
    if not 1 <= top_n <= groups:
        raise InputError(f"--router {text}: need 1 <= top-n <= groups")
    return groups, top_n


# ----------------------------------------------------------------------------- command line

def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = CliParser(prog="python -m traces.timing", description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True,
                        help="target: smollm2, tiny[:seed], random:<architecture>, a .gguf file, a local path or hub id")
    parser.add_argument("--drafter", action="append", default=[],
                        help="drafter to time as role 'draft' (repeatable): a model spec, or layers:K for the "
                             "target's first K layers")
    parser.add_argument("--router", action="append", default=[],
                        help="CORAL LM-head router variant GROUPS:TOP_N to time as role 'router_head' (repeatable); "
                             "the plain head is then timed too as role 'lm_head'")
    parser.add_argument("--no-target", action="store_true", help="skip the target's own forwards")
    def grid_help(axis: str) -> str:
        return f"(default {','.join(map(str, GPU_GRID[axis]))} on a GPU, {','.join(map(str, CPU_GRID[axis]))} on a CPU)"

    parser.add_argument("--tokens", default=None,
                        help="query tokens per sequence per forward, comma-separated " + grid_help("tokens"))
    parser.add_argument("--ctx", default=None,
                        help="context lengths already in the KV cache, comma-separated " + grid_help("ctx"))
    parser.add_argument("--batch", default=None, help="batch sizes, comma-separated " + grid_help("batch"))
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs before each point (default %(default)s)")
    parser.add_argument("--repeats", type=int, default=5,
                        help="timed runs per point at most; the median is kept (default %(default)s)")
    parser.add_argument("--min-repeats", type=int, default=3,
                        help="timed runs per point at least (default %(default)s)")
    parser.add_argument("--point-seconds", type=float, default=None,
                        help="stop repeating a point (after --min-repeats) once it used this many seconds "
                             "(default 2 on a CPU, unlimited on a GPU)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="passes over the whole grid; each point keeps the lower median of its passes' medians "
                             "(several on a machine whose speed drifts) (default %(default)s)")
    parser.add_argument("--retime", metavar="TRACE", default=None,
                        help="repair an earlier LatencyTrace: time again only its points that stand out from their "
                             "neighbours, keeping the faster median, and keep every other point and its grid; on the "
                             "machine that timed it, with the options it was timed with (one round) "
                             "(default: time the whole grid)")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default=None,
                        help="weights and activations dtype (default bf16 on a GPU, fp32 on a CPU)")
    parser.add_argument("--device", default=None, help="cpu or cuda[:i] (default: cuda if available)")
    parser.add_argument("--hardware", default=None, help="hardware name written to the rows (default: detected)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--seed", type=int, default=0, help="seed of random weights, inputs and cache contents")
    parser.add_argument("--mode", choices=MODES, default=None,
                        help="runtime mode of the forwards: eager, static (fixed KV cache) or graph (static, CUDA "
                             "graphs replayed) (default graph on a GPU, eager on a CPU)")
    parser.add_argument("--linear", choices=LINEAR_PATHS, default="few-row",
                        help="how projections multiply: few-row (runtime.linear's CPU path for 1-8 rows, as this "
                             "project's engine runs) or plain (F.linear throughout, as transformers' own modules run) "
                             "(default few-row)")
    parser.add_argument("--cache", choices=CACHES, default="kv",
                        help="kv: one KV cache of equal rows (runtime.cache); batch: the continuous-batching engine's "
                             "cache and per-row masks (runtime.ragged; eager, this project's engine) (default %(default)s)")
    parser.add_argument("--engine", choices=ENGINES, default="specsim",
                        help="whose forwards: this project's (specsim) or transformers' own modules and DynamicCache "
                             "(transformers: eager, no --router; for a peer engine that runs transformers) "
                             "(default %(default)s)")
    parser.add_argument("--out", required=True,
                        help="output LatencyTrace parquet file; finished points are journalled to OUT.partial.jsonl "
                             "as they come, and a run with the same options resumes from it")
    parser.add_argument("--resume", action="store_true",
                        help="insist on resuming an interrupted run (refused if OUT.partial.jsonl is missing or was "
                             "written with other options); without it a run with the same options resumes anyway")
    add_overwrite_option(parser, "replace an existing OUT, or discard an interrupted run's journal with other options")
    add_progress_option(parser)
    parser.add_argument("--quiet", dest="progress", action="store_const", const=False, default=None,
                    help="the same as --no-progress")
    return parser.parse_args(argv)


def earlier_grid(args: argparse.Namespace, grid: Grid, here: Machine, mode: str) -> tuple[EarlierGrid, Grid]:
    """`--retime`: the earlier trace, checked against this machine and command, and the grid it timed (a
    grid asked for as well must be the same)."""
    if args.rounds != 1:
        raise InputError("--retime times the stalled points once more: no --rounds")
    earlier = EarlierGrid.read(args.retime, here,
                               {"cache": args.cache, "linear": args.linear, "engine": args.engine, "mode": mode})
    for axis, values in zip(GRID_AXES, earlier.axes):
        if getattr(args, axis) is not None and values and tuple(getattr(grid, axis)) != values:
            raise InputError(f"--retime {args.retime} timed --{axis} {','.join(map(str, values))}, not "
                             f"{getattr(args, axis)}")
    return earlier, Grid(*(values or getattr(grid, axis) for axis, values in zip(GRID_AXES, earlier.axes)))


@cli_entry
def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        device = torch.device(args.device) if args.device else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    except RuntimeError:
        raise InputError(f"--device '{args.device}' is not a torch device (cpu, cuda, cuda:1)") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise InputError("--device cuda asked for, but no CUDA device is available")
    defaults = GPU_GRID if device.type == "cuda" else CPU_GRID
    grid = Grid(*(int_list(getattr(args, axis) or ",".join(map(str, defaults[axis])), axis, 0 if axis == "ctx" else 1)
                  for axis in GRID_AXES))
    if args.warmup < 0 or args.repeats < 1 or args.min_repeats < 1 or args.rounds < 1:
        raise InputError("--warmup must be >= 0, --repeats, --min-repeats and --rounds >= 1")
    if args.point_seconds is not None and not args.point_seconds > 0:
        raise InputError(f"--point-seconds must be > 0, got {args.point_seconds}")
    point_seconds = args.point_seconds if args.point_seconds is not None else (
        float("inf") if device.type == "cuda" else 2.0)
    routers = [parse_router(r) for r in args.router]
    if args.threads is not None:
        torch.set_num_threads(max(1, args.threads))
    dtype_name = args.dtype or ("bf16" if device.type == "cuda" else "fp32")
    dtype = DTYPES[dtype_name]
    hardware = args.hardware or hardware_name(device)
    mode = args.mode or default_mode(device)
    machine = this_machine(torch.get_num_threads(), str(device))
    earlier = None
    if args.retime:
        earlier, grid = earlier_grid(args, grid, machine, mode)

    settings = {k: v for k, v in vars(args).items() if k not in ("out", "quiet", "overwrite", "resume")}
    log = resumable_output(args.out, {**settings, "tokens": list(grid.tokens), "ctx": list(grid.ctx),
                                      "batch": list(grid.batch), "device": str(device), "dtype": dtype_name,
                                      "hardware": hardware, "mode": mode},
                           args.overwrite, args.resume)
    units: list[tuple[str, str, Llama | LMHeadRouter | None, bool]] = []  # name, role, module, is_head
    if args.cache == "batch" and (args.engine != "specsim" or mode != "eager"):
        raise InputError("--cache batch times this project's batch engine, which runs eager: --engine specsim, --mode eager")
    if args.engine == "transformers":
        if routers or mode != "eager":
            raise InputError("--engine transformers times eager forwards only: no --router, --mode eager")

        units = [(name, role, fwd, False) for name, role, fwd in load_units(args.model, args.drafter, dtype, device,
                                                                              quiet=args.progress is False)
                 if role != "target" or not args.no_target]
        target_name = args.model
    else:
        target = load_model(args.model, dtype=dtype, device=device, seed=args.seed)
        model = target.model.to(device=device, dtype=dtype)
        target_name = target.name
        if not args.no_target:
            units.append((target.name, "target", model, False))
        for spec in args.drafter:
            drafter = load_drafter(spec, target)  # layers:K, or a model with the target's vocabulary
            units.append((drafter.name, "draft", drafter.model.to(device=device, dtype=dtype), False))
    if routers:
        units.append((f"{target.name}:lm_head", "lm_head", None, True))
        for groups, top_n in routers:
            units.append((f"{target.name}:router{groups}:{top_n}", "router_head",
                          build_router(model, groups, top_n, args.seed), True))
    if not units:
        raise InputError("nothing to profile: --no-target without --drafter or --router")

    total = sum(len(grid.points(with_context=not head)) for _, _, _, head in units)
    timer = Timer(device, args.warmup, args.repeats, args.min_repeats, point_seconds)
    from tqdm import tqdm

    rows: list[dict] = []
    with tqdm(total=total * args.rounds, disable=not progress_enabled(args.progress), unit="point",
              desc="profile") as progress, use_skinny(args.linear == "few-row"):
        for round_ in range(args.rounds):
            for name, role, module, is_head in units:
                progress.set_postfix_str(f"{role} {name}")
                done = Finished(log, f"{role}/{name}" + (f"#{round_}" if args.rounds > 1 else ""),
                                earlier.unit(role, name) if earlier else None)
                found = (profile_head(model, module, grid, timer, args.seed, progress, done) if is_head
                         else profile_model(module, grid, timer, args.seed, progress, done, mode, args.cache))
                rows += [{"model": name, "hardware": hardware, "dtype": dtype_name, "role": role,
                          "mode": "eager" if is_head else mode, **r} for r in found]
    frame = across_rounds(pd.DataFrame(rows, columns=[*schema.LATENCY_COLUMNS, "mode"]))
    metadata = schema.RunMetadata(
        kind="latency", models={"target": target_name, **{f"draft{i}": s for i, s in enumerate(args.drafter)}},
        hardware=hardware, dtype=dtype_name, seed=args.seed, commit=git_commit(),
        extra={"device": str(device), "threads": torch.get_num_threads(), "warmup": args.warmup,
               "point_seconds": None if point_seconds == float("inf") else point_seconds,
               "tokens": list(grid.tokens), "ctx": list(grid.ctx), "batch": list(grid.batch),
               "routers": [f"{g}:{n}" for g, n in routers], "torch": torch.__version__, "linear": args.linear,
               "engine": args.engine, "rounds": args.rounds, "cache": args.cache,
               "machine": machine.to_dict(),
               **({"retimed_from": earlier.path, "retimed_points": earlier.retimed(frame)} if earlier else {})},
    )
    schema.write_trace(args.out, frame, metadata)
    log.remove()
    if args.progress is not False:      # the result line, left out with --quiet / --no-progress
        again = f" ({metadata.extra['retimed_points']} timed again)" if earlier else ""
        print(f"wrote {len(frame)} latency rows to {args.out}{again}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
