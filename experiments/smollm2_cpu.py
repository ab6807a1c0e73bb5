"""`python -m experiments.smollm2_cpu`: re-record the project's own SmolLM2 data on this CPU.

Stages (`--stages`, default all; each recording skips what its output file already holds):
1. `latency`: `traces.timing` of SmolLM2-135M-Instruct, of the vanilla drafter's shape (the
   target's first layer: latency does not depend on weights) and of the LM head with and without
   CORAL's 16:2 router; then one decode-step draft forward of the GLIDE, Kangaroo (exit layer 2)
   and EAGLE/CORAL (plain, 16:2 router) drafters at SmolLM2's shape
   (`traces.drafter_timing.drafter_rows`) -> `latency.parquet`, `drafter_latency.parquet`;
2. `tokens`: teacher-forced TokenTraces of the trained vanilla drafter and Kangaroo adapter;
3. `chains`: untimed greedy StepTraces of the GLIDE and CORAL drafters' chains of one draft
   (`ACCEPTANCE_CHAINS`) on the TokenTraces' prompts: those drafters' first-draft acceptance;
4. `steps`: real greedy StepTraces of every method with the trained drafters (`RUNS`), timed;
5. `profile`: everything calibrated into one Profile (`--profile`), the sweep's default data;
6. `best`: the sweep on that Profile picks each method's best configuration per dataset
   (`best_runs.json`), and those are recorded too, so the best are measured, not only predicted:
   on the first `--limit` prompts, each generation beside plain decoding of its prompt as in
   stage `steps` (the partners in `steps_best-partners_<dataset>.parquet`); their prompt-to-prompt
   spread goes into the Profile (`calibrate.spread`; stage profile re-reads it when they exist);
7. `tables`: the acceptance table (GLIDE Table 1's shape: c, alpha, expected speedup), the checks
   of the papers' qualitative claims, and measured-vs-predicted speedups (closed form and
   simulator from the Profile against the StepTraces' own wall clock) -> `--report` folder.
The drafters come from `python -m training KIND` (`--drafters`, default artifacts/drafters).
Greedy decoding (temperature 0) throughout; MT-Bench first turns, HumanEval, code-edit and lib-edit
(runtime.prompts): the TokenTraces and chains on 48 prompts of each (`--token-prompts`), the recorded best on the first
`--limit`, the step calibration on the first `--step-limit` (documented subsets: a full run does not
fit a 2-core session).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


from common.cli import CliParser, cli_entry, log, parse_stages, require_positive, run_stages

from campaigns.smollm2 import (DATASETS, PLAIN_RUN, STAGES, Run, best_partners_path, best_run, best_runs_path,
                               measure_beside_plain, stage_chains, stage_latency, stage_steps, stage_tokens, step_path,
                               write_steps)
from campaigns.smollm2_profile import stage_profile, with_best_spreads
from campaigns.smollm2_report import ar_context, sweep_result, write_report
from profiles.profile import Profile
from common import atomic


def stage_best(args, log) -> None:
    profile = Profile.load(args.profile)
    chosen: dict[str, list[Run]] = {}
    for dataset in DATASETS:
        best = sweep_result(profile, dataset, ar_context(args, dataset), args.sim_tokens, args.seed).best
        chosen[dataset] = [best_run(best.iloc[[i]]) for i in range(len(best))]
    atomic.write_json(best_runs_path(args), {
        dataset: [{"label": r.label, "method": r.method, "config": r.config.to_dict(), "drafter": r.drafter,
                   "sweep_config": r.priced.label} for r in runs] for dataset, runs in chosen.items()})
    for dataset, runs in chosen.items():         # each beside plain decoding of its prompt, as stage steps
        todo = [run for run in runs if not step_path(args, run.label, dataset).exists()]
        if not todo:
            continue
        measured = measure_beside_plain(args, todo, f"{DATASETS[dataset]}:{args.limit}", log)
        for (run, _), rows in measured.items():
            write_steps(args, run, dataset, rows, best_partners_path(args, dataset) if run == PLAIN_RUN else None)
        log(f"wrote {len(todo)} best step traces of {dataset} and their plain partners")
    with_best_spreads(args, Profile.load(args.profile)).save(args.profile)      # their prompt spread
    log(f"recorded the best runs' prompt spread in {args.profile}")


def stage_tables(args, log) -> None:
    write_report(args, log)


STAGE_FUNCTIONS = {"latency": stage_latency, "tokens": stage_tokens, "chains": stage_chains, "steps": stage_steps,
                   "profile": stage_profile, "best": stage_best, "tables": stage_tables}


def build_parser() -> argparse.ArgumentParser:
    p = CliParser(prog="python -m experiments.smollm2_cpu", description=__doc__.splitlines()[0])
    p.add_argument("--stages", default=",".join(STAGES), help=f"comma-separated subset of {', '.join(STAGES)}")
    p.add_argument("--drafters", type=Path, default=Path("artifacts/drafters"), help="trained drafters' folder")
    p.add_argument("--out", type=Path, default=Path("data/traces/smollm2-cpu"), help="trace folder")
    p.add_argument("--profile", type=Path, default=Path("data/profiles/smollm2-135m-cpu.json"), help="Profile to write")
    p.add_argument("--report", type=Path, default=Path("examples/smollm2_cpu"), help="tables and report folder")
    p.add_argument("--token-prompts", default=None,
                   help="the prompts of the TokenTraces and chains, over mtbench, humaneval, codeedit and libedit (default: "
                        "the bundled 48 per set, campaigns.smollm2.TOKEN_PROMPTS; prompt lookup's "
                        "acceptance is replayed on their outputs)")
    p.add_argument("--limit", type=int, default=12,
                   help="prompts per dataset of the recorded best (the first ones; default 12, as bundled)")
    p.add_argument("--max-new-tokens", type=int, default=32, help="tokens per prompt (default 32, as bundled and as the "
                   "held-out fidelity runs measure)")
    p.add_argument("--step-limit", type=int, default=2,
                   help="prompts per dataset of the step calibration (the first ones; default 2, as bundled: four "
                        "datasets x 34 configurations x 2 repeats fit a 2-core session)")
    p.add_argument("--repeats", type=int, default=2,
                   help="interleaved repeats of the step calibration and the recorded best (default 2, as "
                        "bundled: one repeat left 10-20%% differences between configurations verifying the same "
                        "shape)")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")
    p.add_argument("--sim-tokens", type=int, default=512, help="tokens per simulated run (default 512)")
    p.add_argument("--seed", type=int, default=0, help="seed of the simulator runs (default 0)")
    return p


@cli_entry
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    stages = parse_stages(args.stages, STAGES)
    require_positive(args, ("limit", "max_new_tokens", "threads", "sim_tokens", "step_limit", "repeats"))
    args.out.mkdir(parents=True, exist_ok=True)
    run_stages(stages, STAGE_FUNCTIONS, args, log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
