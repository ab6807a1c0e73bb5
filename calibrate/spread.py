"""Record in a Profile how far one prompt's speed strays from its dataset's, from its StepTraces.

    python -m calibrate.spread --profile P --traces DIR [--out P2]

A run's speedup is its tokens over its seconds, so what a prompt contributes is its seconds per token:
its steps, each priced by the Profile's step model (`priced_seconds`: the step's context, draft
forwards and verify tokens, no clock's noise), over the tokens they committed. A prompt that copies
more verifies wider steps too, so its seconds per token stray less than its tokens per step (prompt
lookup's widest configurations: about 0.7x on 32 answers of toolz edits). Every StepTrace in DIR
(`steps_*.parquet`) of a dataset the Profile's workload names is read; per dataset, `prompt_spreads`
gives each method's spread (configurations run on at least MIN_SPREAD_PROMPTS prompts say it),
written into the workload entries as `prompt_spread` and `spread_prompts`. Nothing a prediction
reads changes: intervals and the prompts a comparison needs read it (`costmodel.uncertainty`). Traces of prompts the Profile was not calibrated on are refused
(their spread would leak held-out prompts into the intervals judged on them). --out defaults to
the Profile itself, rewritten atomically.
"""
from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import methods
from calibrate.engine import StepRun
from common.cli import CliParser, cli_entry
from common.errors import InputError
from costmodel.step import step_cost
from methods.spec import drafter_fixed, priced_config
from profiles.parts import Workload
from profiles.profile import Profile
from profiles.record import Record
from traces.schema import read_trace

MIN_SPREAD_PROMPTS = 4      # prompts a configuration needs before its prompt-to-prompt spread is recorded


def priced_seconds(profile: Profile, steps: pd.DataFrame, dataset: str) -> np.ndarray:
    """Each StepTrace row of `steps` (one dataset, any configurations) priced by the Profile's step
    model (`costmodel.step.step_cost` on the configuration's priced shape, engine calibration folded
    in) at the step's context, draft forwards and verify tokens: what the step costs, without the
    noise of a clock (or where there was none: a replayed answer)."""
    seconds = np.zeros(len(steps))
    for (method, _), rows in steps.reset_index(drop=True).groupby(["method", "config"], sort=False):
        spec = methods.get(str(method))
        ran = StepRun(rows, None, dataset).config
        setup = _setup_that_ran(profile.setups_for(spec, dataset=dataset), ran)
        config = priced_config(ran, setup.drafter_spec)
        shape = spec.priced_shape(setup, spec.frame_of([config]))
        drafted = rows["draft_forwards"].to_numpy(np.int64)
        reach = np.arange(shape.max_drafted)[None, :] < drafted[:, None]
        seconds[rows.index] = step_cost(profile.seconds, shape, rows["ctx_len"].to_numpy(float), 1, reach=reach,
                                        verify_tokens=rows["verify_tokens"].to_numpy(float)).total
    return seconds


def _prices(profile: Profile, method: str, dataset: str) -> bool:
    """Whether `profile` can price `method` on `dataset` (a setup with its acceptance there)."""
    try:
        return bool(profile.setups_for(methods.get(method), dataset=dataset))
    except InputError:
        return False


def _setup_that_ran(setups: list, config) -> Any:
    """The setup whose drafter ran `config`: of those whose fixed fields (a trained router's) the
    config holds, the one fixing the most (a router drafter over its base); else the first."""
    def fixes(setup) -> dict[str, Any]:
        return drafter_fixed(setup.drafter_spec)
    held = [s for s in setups if all(getattr(config, k) == v for k, v in fixes(s).items())]
    return max(held, key=lambda s: len(fixes(s))) if held else setups[0]


def prompt_spreads(profile: Profile, steps: pd.DataFrame, dataset: str) -> dict[str, Any]:
    """One dataset's StepTraces -> {"prompt_spread": {method: spread}, "spread_prompts": n}: per
    configuration (run), the relative standard deviation over prompts of a prompt's seconds per token
    (`priced_seconds` over its tokens) divided by the share of tokens speculation added, (T - 1) / T, T
    the run's tokens per step (a prompt strays in what the drafts add, not in the token every step
    commits); the median over the method's runs, and the fewest prompts a run had. Plain decoding
    (T = 1), runs of fewer than MIN_SPREAD_PROMPTS prompts and a method the Profile cannot price on the
    dataset (it predicts nothing a spread would widen) say nothing; {} when no run does."""
    spreads: dict[str, list[float]] = {}
    prompts = []
    for (method, _), run in steps.groupby(["method", "run_id"], sort=True):
        tokens = float(run["accepted"].sum() / len(run))
        few = run["prompt_id"].nunique() < MIN_SPREAD_PROMPTS
        if few or tokens <= 1.0 + 1e-9 or not _prices(profile, method, dataset):
            continue
        per_prompt = run.assign(seconds=priced_seconds(profile, run, dataset)).groupby("prompt_id").agg(
            tokens=("accepted", "sum"), seconds=("seconds", "sum"))
        per_token = per_prompt["seconds"] / per_prompt["tokens"]
        spreads.setdefault(str(method), []).append(float(per_token.std(ddof=1) / per_token.mean()
                                                         / ((tokens - 1.0) / tokens)))
        prompts.append(len(per_prompt))
    if not spreads:
        return {}
    return {"prompt_spread": {m: round(float(np.median(v)), 4) for m, v in sorted(spreads.items())},
            "spread_prompts": int(min(prompts))}


def with_spreads(profile: Profile, traces: list[Path]) -> tuple[Profile, dict[str, dict]]:
    """`profile` with each workload dataset's prompt spread from `traces`, and what was recorded
    per dataset; InputError for a trace of prompts outside the Profile's calibration."""
    calibrated = set(profile.provenance.calibration_prompts)
    by_dataset: dict[str, list[pd.DataFrame]] = {}
    for path in traces:
        frame, meta = read_trace(path, kind="step")
        outside = sorted(set(frame["prompt_id"]) - calibrated) if calibrated else []
        if outside:
            raise InputError(f"{path} holds prompts the Profile was not calibrated on ({outside[0]}, "
                             f"{len(outside)} in all): their spread would leak them into the intervals judged on them")
        if meta.dataset in profile.workload:       # a run is one file's: two files' "sd g1#0" are two runs
            by_dataset.setdefault(meta.dataset, []).append(frame.assign(run_id=f"{path.name}/" + frame["run_id"]))
    recorded = {d: prompt_spreads(profile, pd.concat(frames, ignore_index=True), d)
                for d, frames in sorted(by_dataset.items())}
    recorded = {d: r for d, r in recorded.items() if r}
    if not recorded:
        raise InputError("no StepTrace among those given ran a speculative configuration on >= 4 prompts of a "
                         f"dataset the Profile's workload names ({', '.join(profile.workload) or 'none'})")
    workload = {d: Workload.of({**w.to_dict(), **recorded.get(d, {})}, f"workload.{d}")
                for d, w in profile.workload.items()}
    return replace(profile, workload=Record(workload)), recorded


@cli_entry
def main(argv: list[str] | None = None) -> int:
    parser = CliParser(prog="python -m calibrate.spread", description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", required=True, type=Path, help="the Profile to record the spread in")
    parser.add_argument("--traces", required=True, type=Path, help="folder of the Profile's StepTraces (steps_*.parquet)")
    parser.add_argument("--out", type=Path, help="where the Profile is written (atomically; default --profile)")
    args = parser.parse_args(argv)
    if not args.traces.is_dir():
        raise InputError(f"--traces {args.traces} is not a folder")
    paths = sorted(args.traces.glob("steps_*.parquet"))
    if not paths:
        raise InputError(f"--traces {args.traces} holds no steps_*.parquet StepTrace")
    profile, recorded = with_spreads(Profile.load(args.profile), paths)
    profile.save(args.out or args.profile)
    for dataset, r in recorded.items():
        print(f"{dataset} ({r['spread_prompts']}+ prompts a configuration): "
              + ", ".join(f"{m} {v:.2f}" for m, v in r["prompt_spread"].items()))
    print(f"wrote {args.out or args.profile}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
