"""`python -m calibrate.vllm --data FOLDER --out PROFILE.json`: the vLLM H100 deployment Profile.

    python -m calibrate.vllm --data SPECDECODE_DATA \
        --out data/profiles/llama-3.1-8b-h100-vllm.json

FOLDER holds the study's four files (combined_<dataset>.jsonl); --grid the project's H100 graph grid.
What the Profile is built of and from where: `calibrate.vllm` (docs/vllm_h100.md). Bad input: one
line, exit 2, nothing written.
"""
from __future__ import annotations

import sys
import time

from calibrate.vllm.build import build
from calibrate.vllm.grid import GRID
from common.cli import CliParser, cli_entry
from common.rundir import add_overwrite_option, claim_file


def build_parser() -> CliParser:
    p = CliParser(prog="python -m calibrate.vllm", description=__doc__.split("\n\n")[0].split(": ", 1)[1])
    p.add_argument("--data", required=True, help="folder of the study's combined_<dataset>.jsonl files")
    p.add_argument("--grid", default=str(GRID), help="the project's H100 graph grid (graph_grid.jsonl)")
    p.add_argument("--out", required=True, help="the Profile's JSON file")
    add_overwrite_option(p)
    return p


@cli_entry
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    out = claim_file(args.out, args.overwrite)
    started = time.perf_counter()
    profile = build(args.data, args.grid)
    profile.save(out)
    fit = profile.provenance.latency_fit
    grid, engine = fit["grid"], fit["engine"]
    print(f"wrote {out} in {time.perf_counter() - started:.0f} s: bw_eff {grid['bw_eff']}, flops_eff {grid['flops_eff']}, "
          f"corner {grid['corner']}; per step {engine['overhead_s'] * 1e3:.3f} ms, EAGLE {engine['speculation_s'] * 1e3:.3f} ms "
          f"+ {engine['drafter_launch_s'] * 1e3:.3f} ms a draft forward")
    for line in profile.provenance.warnings:
        print(f"warning: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
