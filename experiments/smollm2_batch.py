"""`python -m experiments.smollm2_batch`: record the SmolLM2 batch engine on this CPU and build its Profile.

Stages (`--stages`, default all; a recording already on disk is kept): `latency` (the batch grid of
the target, the vanilla drafter and GLIDE), `steps` (BatchStepTraces of every batched method at
batch 1-32 beside plain decoding), `chains` (untimed chains of the draft lengths the drafters'
acceptance lacks, on every dataset's calibration prompts) and `profile` (data/profiles/batch/smollm2-135m-cpu-batch32.json); what
each does is `campaigns.smollm2_batch`. Run it on one pinned core with one thread, as it was
recorded: `taskset -c 1 python -m experiments.smollm2_batch --threads 1`.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from campaigns.smollm2_batch import (BATCHES, MIN_PROMPTS, PROMPTS, RUNS, STAGES, selected_runs, stage_chains,
                                     stage_latency, stage_profile, stage_steps)
from common.cli import CliParser, cli_entry, log, parse_stages, require_positive, run_stages
from traces.timing import int_list

STAGE_FUNCTIONS = {"latency": stage_latency, "steps": stage_steps, "chains": stage_chains, "profile": stage_profile}


def build_parser() -> argparse.ArgumentParser:
    p = CliParser(prog="python -m experiments.smollm2_batch", description=__doc__.splitlines()[0])
    p.add_argument("--stages", default=",".join(STAGES), help=f"comma-separated subset of {', '.join(STAGES)}")
    p.add_argument("--drafters", type=Path, default=Path("artifacts/drafters"), help="trained drafters' folder")
    p.add_argument("--out", type=Path, default=Path("data/traces/smollm2-cpu-batch32"),
                   help="trace folder (default %(default)s)")
    p.add_argument("--profile", type=Path, default=Path("data/profiles/batch/smollm2-135m-cpu-batch32.json"),
                   help="Profile to write (default %(default)s)")
    p.add_argument("--base-profile", type=Path, default=Path("data/profiles/smollm2-135m-cpu.json"),
                   help="the Profile whose acceptance entries, drafters and workload are carried (default %(default)s)")
    p.add_argument("--batches", default=BATCHES, help="batch sizes (default %(default)s)")
    p.add_argument("--prompts", default=PROMPTS,
                   help="calibration prompts of the BatchStepTraces, one dataset (default %(default)s)")
    p.add_argument("--min-prompts", type=int, default=MIN_PROMPTS,
                   help="a run at batch B decodes the first max(B, this) prompts (default %(default)s)")
    p.add_argument("--max-new-tokens", type=int, default=32, help="tokens per prompt (default %(default)s)")
    p.add_argument("--repeats", type=int, default=1, help="interleaved repeats of the step recordings (default %(default)s)")
    p.add_argument("--rounds", type=int, default=2,
                   help="passes over the latency grid, each point the median of its passes (default %(default)s)")
    p.add_argument("--runs", default="all",
                   help="the configurations to record, comma-separated labels (default: all of "
                        + "; ".join(c.label for c in RUNS) + "); plain decoding is always recorded")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default %(default)s)")
    return p


@cli_entry
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    stages = parse_stages(args.stages, STAGES)
    require_positive(args, ("min_prompts", "max_new_tokens", "repeats", "rounds", "threads"))
    int_list(args.batches, "batches", 1)
    selected_runs(args.runs)
    args.out.mkdir(parents=True, exist_ok=True)
    run_stages(stages, STAGE_FUNCTIONS, args, log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
