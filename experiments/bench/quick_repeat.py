"""How far the quick re-profile's measurements move when taken again minutes apart on one machine.

    python -m experiments.bench.quick_repeat --profile P.json [--rounds 3] [--threads 1] [--out bench.json]

Each round times what `calibrate.quick` times for the target (its forwards on the quick grid and, for a
batched table, at its batches; `target_correction`) and the engine's own seconds (`engine_ratio`), in one
process, one round after the other. Printed per round: the range of the target's ratios and the engine
ratio; then, per point, the largest over the smallest ratio across rounds (its median and worst), and the
engine ratio's range. A Profile the quick re-profile moves is never more exact than these: a prediction
made from one re-measurement and judged against a run minutes later inherits this spread.
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

import numpy as np

from calibrate.quick import engine_ratio, measuring, target_correction
from common import atomic
from common.cli import CliParser, cli_entry
from common.errors import InputError
from common.rundir import claim_file
from profiles.profile import Profile


def rounds(profile: Profile, n_rounds: int, threads: int, seed: int = 0) -> list[dict]:
    """`n_rounds` re-measurements of the target's ratios and the engine ratio, as `calibrate.quick` takes them."""
    timer, model = measuring(profile, threads, seed)
    out = []
    for _ in range(n_rounds):
        correction = target_correction(profile, model, timer, seed)
        ratios = np.concatenate([np.ravel(correction.ratio), np.ravel(correction.batch_ratio[1:])])
        out.append({"ratios": ratios.tolist(), "engine_ratio": engine_ratio(profile, model, correction, seed)})
    return out


def spread(measured: list[dict]) -> dict:
    """Per point, the largest ratio over the smallest across rounds (median and worst); the engine ratio's range."""
    ratios = np.array([r["ratios"] for r in measured])
    per_point = ratios.max(axis=0) / ratios.min(axis=0)
    engine = [r["engine_ratio"] for r in measured]
    return {"point_max_over_min_median": float(np.median(per_point)), "point_max_over_min_worst": float(per_point.max()),
            "engine_ratio_min": min(engine), "engine_ratio_max": max(engine),
            "engine_ratio_median": statistics.median(engine)}


@cli_entry
def main(argv: list[str] | None = None) -> int:
    parser = CliParser(prog="python -m experiments.bench.quick_repeat", description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", required=True, type=Path,
                        help="a Profile whose target is priced by a measured table")
    parser.add_argument("--rounds", type=int, default=3, help="re-measurements, one after the other (default 3)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--out", type=Path,
                        help="write the rounds and the spread here as JSON (atomically; default: printed only)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    args = parser.parse_args(argv)
    if args.rounds < 2:
        raise InputError(f"--rounds must be >= 2 to say how far a re-measurement moves, got {args.rounds}")
    if args.threads < 1:
        raise InputError(f"--threads must be >= 1, got {args.threads}")
    profile = Profile.load(args.profile)
    if args.out is not None:
        claim_file(args.out, args.overwrite)
    measured = rounds(profile, args.rounds, args.threads)
    for i, r in enumerate(measured):
        print(f"round {i}: target ratios {min(r['ratios']):.3f}-{max(r['ratios']):.3f}, "
              f"engine ratio {r['engine_ratio']:.3f}")
    result = spread(measured)
    print(f"per point, largest over smallest ratio across rounds: median {result['point_max_over_min_median']:.3f}, "
          f"worst {result['point_max_over_min_worst']:.3f}; engine ratio {result['engine_ratio_min']:.3f}-"
          f"{result['engine_ratio_max']:.3f}")
    if args.out is not None:
        atomic.write_json(args.out, {"profile": profile.name, "threads": args.threads, "rounds": measured, **result})
    return 0


if __name__ == "__main__":
    sys.exit(main())
