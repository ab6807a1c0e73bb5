"""`python -m experiments.transformers_peer`: calibrate a Profile of transformers' own `generate`
(SmolLM2 on this CPU) from its own runs, so that `python -m experiments.fidelity --engine
transformers` can predict it on held-out prompts before measuring it.

    python -m experiments.transformers_peer                  # latency and steps (minutes), then the Profile
    python -m experiments.fidelity --engine transformers --profile data/profiles/smollm2-135m-cpu-transformers.json \
        --target smollm2 --prompts mtbench:30-33,humaneval:30-33,codeedit:30-33 --configs CONFIGS --out out/peer

Stages and what they write: `campaigns.transformers_peer`.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from common.cli import CliParser, cli_entry, log, parse_stages, require_positive, run_stages
from common.errors import InputError
from campaigns.transformers_peer import (PROFILE, TRACES, stage_latency, stage_profile, stage_steps,
                                                     stage_tokens)

STAGES = {"latency": stage_latency, "tokens": stage_tokens, "steps": stage_steps, "profile": stage_profile}


def build_parser() -> argparse.ArgumentParser:
    p = CliParser(prog="python -m experiments.transformers_peer", description=__doc__.split("\n\n")[0].replace("\n", " "))
    p.add_argument("--stages", default=",".join(STAGES), help=f"comma-separated subset of {', '.join(STAGES)}")
    p.add_argument("--drafters", type=Path, default=Path("artifacts/drafters"), help="trained drafters' folder")
    p.add_argument("--out", type=Path, default=TRACES, help="the peer's StepTrace folder")
    p.add_argument("--smollm2", type=Path, default=Path("data/traces/smollm2-cpu"),
                   help="the SmolLM2 recordings whose TokenTraces' greedy outputs prompt lookup is replayed on "
                        "(default data/traces/smollm2-cpu)")
    p.add_argument("--profile", type=Path, default=PROFILE, help="Profile to write")
    p.add_argument("--step-limit", type=int, default=2, help="calibration prompts per dataset (the first ones), as the SmolLM2 campaign's steps")
    p.add_argument("--repeats", type=int, default=2, help="interleaved repeats")
    p.add_argument("--max-new-tokens", type=int, default=32, help="tokens per prompt, as the SmolLM2 campaign's")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")
    return p


@cli_entry
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    stages = parse_stages(args.stages, STAGES)
    if not stages:
        raise InputError(f"unknown stage '{args.stages}' (known: {', '.join(STAGES)})")
    require_positive(args, ("step_limit", "repeats", "max_new_tokens", "threads"))
    import torch

    torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    run_stages(stages, STAGES, args, log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
