"""Record in a Profile how far one prompt's speed strays from its dataset's, from its StepTraces.

    python -m calibrate.spread --profile P --traces DIR [--tokens [--target smollm2]] [--out P2]

A run's speedup is its tokens over its seconds, so what a prompt contributes is its seconds per token:
its steps, each priced by the Profile's step model (`priced_seconds`: the step's context, draft
forwards and verify tokens, no clock's noise), over the tokens they committed. A prompt that copies
more verifies wider steps too, so its seconds per token stray less than its tokens per step (prompt
lookup's widest configurations: about 0.7x on 32 answers of toolz edits). Every StepTrace in DIR
(`steps_*.parquet`) of a dataset the Profile's workload names is read; per dataset, `prompt_spreads`
gives each method's spread (configurations run on at least MIN_SPREAD_PROMPTS prompts say it),
written into the workload entries as `prompt_spread` and `spread_prompts`. With `--tokens` the TokenTraces
in DIR (`tokens_*.parquet`) count too, their steps replayed (`replayed_token_steps`): every method that
replays from a TokenTrace on the trace's draft model and, given `--target` to encode the prompts, every method
that replays from the target's outputs alone (prompt lookup); a Profile whose StepTraces ran too few prompts
(a peer engine's, two each) gets its spread from its 48 calibration answers that way. Nothing a prediction
reads changes: intervals and the prompts a comparison needs read it (`costmodel.uncertainty`). Traces of
prompts the Profile was not calibrated on are refused (their spread would leak held-out prompts into the
intervals judged on them). --out defaults to the Profile itself, rewritten atomically.
"""
from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import json

import numpy as np
import pandas as pd

import methods
from calibrate.engine import StepRun
from common.cli import CliParser, cli_entry
from common.errors import InputError
from costmodel.step import step_cost
from methods.replay import TokenTable
from methods.spec import drafter_fixed, priced_config
from profiles.parts import Workload
from profiles.profile import Profile
from profiles.record import Record
from runtime.models import load_tokenizer
from runtime.prompts import builtin_prompts, encode_prompt
from traces.lookup_replay import replayed_steps
from traces.replay import replay_steps
from traces.schema import read_trace

MIN_SPREAD_PROMPTS = 4      # prompts a configuration needs before its prompt-to-prompt spread is recorded


def priced_seconds(profile: Profile, steps: pd.DataFrame, dataset: str) -> np.ndarray:
    """Each StepTrace row of `steps` (one dataset, any configurations) priced by the Profile's step
    model (`costmodel.step.step_cost` on the configuration's priced shape, engine calibration folded
    in) at the step's context, draft forwards and verify tokens: what the step costs, without the
    noise of a clock (or where there was none: a replayed answer). A `drafter` column names the Profile
    drafter that ran a row (a replayed TokenTrace's); else the one whose fixed fields the config holds."""
    seconds = np.zeros(len(steps))
    steps = steps.reset_index(drop=True)
    drafters = steps["drafter"] if "drafter" in steps else pd.Series("", index=steps.index)
    for (method, _, drafter), rows in steps.assign(drafter=drafters.fillna("")).groupby(
            ["method", "config", "drafter"], sort=False):
        spec = methods.get(str(method))
        ran = StepRun(rows, None, dataset).config
        setup = _setup_that_ran(profile.setups_for(spec, dataset=dataset, drafter=drafter or None), ran)
        config = priced_config(ran, setup.drafter_spec)
        shape = spec.priced_shape(setup, spec.frame_of([config]))
        drafted = rows["draft_forwards"].to_numpy(np.int64)
        reach = np.arange(shape.max_drafted)[None, :] < drafted[:, None]
        seconds[rows.index] = step_cost(profile.seconds, shape, rows["ctx_len"].to_numpy(float), 1, reach=reach,
                                        verify_tokens=rows["verify_tokens"].to_numpy(float)).total
    return seconds


def _prices(profile: Profile, method: str, dataset: str, drafter: str | None = None) -> bool:
    """Whether `profile` can price `method` on `dataset` (a setup with its acceptance there; on `drafter`)."""
    try:
        return bool(profile.setups_for(methods.get(method), dataset=dataset, drafter=drafter))
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


def replayed_token_steps(profile: Profile, frame: pd.DataFrame, dataset: str, drafter: str | None,
                         tokenizer=None) -> pd.DataFrame:
    """StepTrace rows replayed from one TokenTrace (`frame`: teacher-forced along the target's greedy outputs)
    at each method's calibration configurations: every method that replays from a TokenTrace (`spec.replayable`)
    on the trace's draft model `drafter`, where the Profile runs it on the dataset, and, with a `tokenizer` to
    encode the prompts, every method that replays from the outputs alone (`methods.replaying_specs`). A
    TokenTrace keeps no prompt: a step's context is the dataset's mean prompt plus the tokens before it."""
    prompt_tokens = profile.workload[dataset].prompt_tokens
    by_prompt = dict(tuple(frame.groupby("prompt_id", sort=True)))
    tables = [TokenTable.from_frame(rows) for rows in by_prompt.values()]      # read once, replayed per configuration
    parts = []
    for spec in methods.specs():
        if not spec.replayable or drafter is None or not _prices(profile, spec.name, dataset, drafter):
            continue
        setup = profile.setups_for(spec, dataset=dataset, drafter=drafter)[0]
        for config in spec.calibration_configs():
            try:
                shape = spec.priced_shape(setup, spec.frame_of([config]))
            except ValueError:          # a configuration the entry cannot price (cape's bins past its top-k)
                continue
            for table in tables:
                steps = replay_steps(table, spec.name, config)
                drafted, verify = spec.replay_shapes(table, steps["pos"].to_numpy(np.int64), config, shape)
                parts.append(steps.assign(run_id=f"{config.label}#tokens", method=spec.name, drafter=drafter,
                                          config=json.dumps(config.to_dict(), sort_keys=True),
                                          ctx_len=prompt_tokens + steps["pos"], draft_forwards=drafted,
                                          verify_tokens=verify))
    if tokenizer is not None:
        outputs = {pid: rows.sort_values("pos")["token"].tolist() for pid, rows in by_prompt.items()}
        prompts = {p.prompt_id: list(encode_prompt(p, tokenizer)) for p in builtin_prompts(list(outputs))}
        configs = [c for spec in methods.replaying_specs() if _prices(profile, spec.name, dataset)
                   for c in spec.calibration_configs()]
        if configs:
            parts.append(replayed_steps(prompts, outputs, configs))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def _trace_drafter(profile: Profile, models: dict) -> str | None:
    """The Profile drafter a TokenTrace scored: its `draft` name (a peer engine's), or the stem of its
    `drafter` weights (a campaign's: artifacts/drafters/vanilla/vanilla.safetensors); None if neither is one."""
    name = models.get("draft") or Path(str(models.get("drafter", ""))).stem
    return name if name in profile.drafters else None


def with_spreads(profile: Profile, traces: list[Path], tokenizer=None) -> tuple[Profile, dict[str, dict]]:
    """`profile` with each workload dataset's prompt spread from `traces` (StepTraces, and TokenTraces
    replayed by `replayed_token_steps`: the outputs of a dataset once, with `tokenizer`), and what was
    recorded per dataset; InputError for a trace of prompts outside the Profile's calibration."""
    calibrated = set(profile.provenance.calibration_prompts)
    by_dataset: dict[str, list[pd.DataFrame]] = {}
    outputs_replayed: set[str] = set()
    for path in traces:
        kind = "token" if path.name.startswith("tokens_") else "step"
        frame, meta = read_trace(path, kind=kind)
        named = meta.dataset.split(":")[0]           # a campaign's TokenTrace names its prompt spec
        dataset = meta.dataset if meta.dataset in profile.workload else profile.dataset_named(named)
        if kind == "token" and dataset in profile.workload:
            frame = replayed_token_steps(profile, frame, dataset, _trace_drafter(profile, meta.models),
                                         None if dataset in outputs_replayed else tokenizer)
            outputs_replayed.add(dataset)
            if frame.empty:
                continue
        outside = sorted(set(frame["prompt_id"]) - calibrated) if calibrated else []
        if outside:
            raise InputError(f"{path} holds prompts the Profile was not calibrated on ({outside[0]}, "
                             f"{len(outside)} in all): their spread would leak them into the intervals judged on them")
        if dataset in profile.workload:       # a run is one file's: two files' "sd g1#0" are two runs
            by_dataset.setdefault(dataset, []).append(frame.assign(run_id=f"{path.name}/" + frame["run_id"]))
    recorded = {d: prompt_spreads(profile, pd.concat(frames, ignore_index=True), d)
                for d, frames in sorted(by_dataset.items())}
    recorded = {d: r for d, r in recorded.items() if r}
    if not recorded:
        raise InputError("no trace among those given ran a speculative configuration on >= 4 prompts of a "
                         f"dataset the Profile's workload names ({', '.join(profile.workload) or 'none'})")
    workload = {d: Workload.of({**w.to_dict(), **recorded.get(d, {})}, f"workload.{d}")
                for d, w in profile.workload.items()}
    return replace(profile, workload=Record(workload)), recorded


@cli_entry
def main(argv: list[str] | None = None) -> int:
    parser = CliParser(prog="python -m calibrate.spread", description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", required=True, type=Path, help="the Profile to record the spread in")
    parser.add_argument("--traces", required=True, type=Path,
                        help="folder of the Profile's StepTraces (steps_*.parquet)")
    parser.add_argument("--tokens", action="store_true",
                        help="replay the TokenTraces in --traces (tokens_*.parquet) too (default: StepTraces only)")
    parser.add_argument("--target", help="with --tokens: the target model spec whose tokenizer encodes the prompts, so "
                        "that methods replaying from its outputs alone count too (e.g. smollm2; default: none)")
    parser.add_argument("--out", type=Path, help="where the Profile is written (atomically; default --profile)")
    args = parser.parse_args(argv)
    if not args.traces.is_dir():
        raise InputError(f"--traces {args.traces} is not a folder")
    if args.target and not args.tokens:
        raise InputError("--target encodes the prompts of replayed TokenTraces: give --tokens too")
    paths = sorted(args.traces.glob("steps_*.parquet"))
    paths += sorted(args.traces.glob("tokens_*.parquet")) if args.tokens else []
    if not paths:
        raise InputError(f"--traces {args.traces} holds no steps_*.parquet StepTrace"
                         + (" nor tokens_*.parquet TokenTrace" if args.tokens else ""))
    profile = Profile.load(args.profile)
    tokenizer = load_tokenizer(args.target) if args.target else None
    profile, recorded = with_spreads(profile, paths, tokenizer)
    profile.save(args.out or args.profile)
    for dataset, r in recorded.items():
        print(f"{dataset} ({r['spread_prompts']}+ prompts a configuration): "
              + ", ".join(f"{m} {v:.2f}" for m, v in r["prompt_spread"].items()))
    print(f"wrote {args.out or args.profile}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
