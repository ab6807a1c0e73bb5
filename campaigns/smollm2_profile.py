"""The SmolLM2 CPU campaign's calibration (stage `profile` of `python -m experiments.smollm2_cpu`): the
recorded traces fitted into the bundled Profile: latency tables, acceptance per (drafter, dataset), the
methods' own acceptance parts (lookahead's pool on its steps, prompt lookup replayed on every TokenTrace
output), the engine calibration, the workload and its prompt spreads. The recording half is
`campaigns.smollm2`.
"""
from __future__ import annotations

import datetime as dt
import functools
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

import methods
from calibrate.engine import StepRun, fit_engine, workload
from calibrate.fit_acceptance import DEFAULT_CONF_KS, fit_step_acceptance, fit_token_acceptance
from calibrate.latency import fit_latency
from calibrate.spread import with_spreads
from campaigns.smollm2 import (ACCEPTANCE_CHAINS, CHAIN_RUNS, DATASETS, DRAFTERS, RUNS, TARGET_ARCH, TOKEN_DRAFTERS,
                               best_runs, chain_path, step_path, token_path, token_prompt_count)
from common.rundir import git_commit
from costmodel.cape import PAPER_BINS
from costmodel.params import get_arch
from profiles.machine import Machine
from profiles.parts import EngineTerms, Workload
from profiles.profile import Profile
from runtime.models import load_tokenizer
from runtime.prompts import builtin_prompts, encode_prompt
from traces.lookup_replay import replayed_steps
from traces.schema import read_trace, timed_on


# latency rows' model specs -> Profile models (and the trained vanilla drafter's file: its Profile model);
# the full-head layer is what the vanilla drafter costs exported to another engine
LATENCY_NAMES = {"smollm2": TARGET_ARCH, "layers:1": "vanilla-full-1l"}


def latency_rows(args) -> pd.DataFrame:
    frames = [read_trace(args.out / name, kind="latency")[0] for name in ("latency.parquet", "drafter_latency.parquet")]
    rows = pd.concat(frames, ignore_index=True)
    trained = str(args.drafters / DRAFTERS["vanilla"].file)
    names = {**LATENCY_NAMES, trained: DRAFTERS["vanilla"].model}
    if trained not in set(rows["model"]):       # recordings of a full-head vanilla drafter: its shape is layers:1
        names["layers:1"] = DRAFTERS["vanilla"].model
    rows["model"] = rows["model"].replace(names)
    return rows


def own_steps(args, method: str, dataset: str, steps: dict) -> tuple[pd.DataFrame | None, list[Path]]:
    """The StepTraces a method with an acceptance part of its own (`MethodSpec.fit_steps`) is fitted on
    (None: RUNS records none of it): its calibration configurations' (`steps`, (run, dataset) -> frame)
    and, once stage best has recorded them, the best's steps on the first --limit calibration prompts:
    2 prompts a dataset alone left lookahead's pool fitted low (the best's own configuration priced 1-3%
    under what its 12 prompts measured)."""
    own = [run for run in RUNS if run.method == method]
    if not own:
        return None, []
    best = [run for run in best_runs(args).get(dataset, [])
            if run.method == method and step_path(args, run.label, dataset).exists()]
    frame = pd.concat([*(steps[run, dataset] for run in own),
                       *(read_trace(step_path(args, run.label, dataset), kind="step")[0] for run in best)],
                      ignore_index=True)
    return frame, [step_path(args, run.label, dataset) for run in own + best]


def stage_profile(args, log) -> None:
    """Latency tables per model, acceptance per (drafter, dataset), drafters with their kinds."""
    rows = latency_rows(args)
    latency = {}
    for model, group in rows[rows["role"].isin(["target", "draft"])].groupby("model"):
        fitted = fit_latency(group, "table", arch=None, hardware="CPU", dtype="fp32", name=model).to_dict()
        fitted["fit"] = {k: v for k, v in fitted["fit"].items() if not (isinstance(v, float) and np.isnan(v))}
        latency[model] = fitted
    steps = {(run, dataset): read_trace(step_path(args, run.label, dataset), kind="step")[0]
             for dataset in DATASETS for run in RUNS}                   # every StepTrace, read once
    acceptance, sources, chained = {}, [], set()
    for dataset in DATASETS:
        for drafter in TOKEN_DRAFTERS:
            path = token_path(args, drafter, dataset)
            frame, _ = read_trace(path, kind="token")
            acceptance[f"{drafter}/{dataset}/T0"] = fit_token_acceptance(  # every K CAPE's paper bins use
                frame, drafter=drafter, dataset=dataset, temperature=0.0,
                conf_ks=sorted(set(DEFAULT_CONF_KS) | set(PAPER_BINS)), source=f"token trace {path.name}")
            sources.append(path)
        for drafter, run in ACCEPTANCE_CHAINS.items():     # drafters without a teacher-forced trace
            chains, timed = chain_path(args, run.label, dataset), step_path(args, CHAIN_RUNS[drafter].label, dataset)
            ones = read_trace(chains, kind="step")[0]
            chained |= set(ones["prompt_id"])
            acceptance[f"{drafter}/{dataset}/T0/steps"] = fit_step_acceptance(
                pd.concat([ones, steps[CHAIN_RUNS[drafter], dataset]], ignore_index=True), drafter=drafter,
                dataset=dataset, temperature=0.0, source=f"greedy chains {chains.name} ({ones['prompt_id'].nunique()} "
                f"prompts) and step trace {timed.name}")
            sources += [chains, timed]
        for spec in methods.specs():        # methods with an acceptance part of their own
            frame, paths = own_steps(args, spec.name, dataset, steps)
            source = "step traces " + ", ".join(p.name for p in paths)
            fit = spec.fit_steps
            if spec.name in OUTPUT_REPLAYED and frame is not None:
                frame, paths, source = replayed_from_outputs(args, spec, dataset, sweep=True)
                fit = spec.fit_replayed
            own = None if frame is None else fit(frame, dataset=dataset, temperature=0.0, source=source)
            if own is not None:
                acceptance[f"{spec.name}/{dataset}"] = own
                sources += paths
    step_runs = [StepRun(frame, run.drafter, dataset) for (run, dataset), frame in steps.items()]
    calibrated = sorted({pid for r in step_runs for pid in r.frame["prompt_id"]} | chained
                        | {pid for dataset in DATASETS for d in TOKEN_DRAFTERS
                           for pid in read_trace(token_path(args, d, dataset), kind="token")[0]["prompt_id"]})
    profile = Profile.build(
        name="smollm2-135m on this CPU (project recordings)", hardware="CPU", dtype="fp32", target=TARGET_ARCH,
        models={TARGET_ARCH: get_arch(TARGET_ARCH).to_dict()}, latency=latency, acceptance=acceptance,
        drafters={name: spec.to_dict() for name, spec in DRAFTERS.items()},
        machine=timed_on(args.out / "latency.parquet", Machine(datasheet="CPU")).to_dict(),
        provenance={"built_by": "python -m experiments.smollm2_cpu", "commit": git_commit(),
                    "created": dt.datetime.now(dt.timezone.utc).isoformat(),
                    "sources": [str(p) for p in [args.out / "latency.parquet", args.out / "drafter_latency.parquet",
                                                  *sources]],
                    "assumptions": [f"greedy decoding; MT-Bench (turn 1), HumanEval, code-edit and lib-edit (edit requests on HumanEval's "
                                    f"and boltons' functions): TokenTraces on "
                                    f"{token_prompt_count(args)} prompts of each, the step calibration on the first {args.step_limit}, "
                                    f"{args.max_new_tokens} new tokens", "latency: measured tables (fp32, 2 threads); "
                                    "drafters timed at one token per forward", "drafters trained by python -m training",
                                    "engine: step parts fitted on the StepTraces of RUNS (calibrate.engine)"],
                    "calibration_prompts": calibrated})
    profile = replace(profile, workload={d: Workload.of(w, d) for d, w in workload(step_runs).items()})
    profile = with_best_spreads(args, replace(profile, engine=EngineTerms.of(fit_engine(profile, step_runs))))
    heldout = profile.engine.fit["heldout"]
    log(f"engine calibration: held-out (leave one configuration out) speedup error median "
        f"{100 * heldout['speedup_error_median']:.1f}%, p90 {100 * heldout['speedup_error_p90']:.1f}%")
    profile.save(args.profile)
    log(f"wrote {args.profile}")


# methods whose greedy steps follow from a prompt and the target's output alone: their acceptance is
# fitted on every TokenTrace prompt's output replayed (`--limit` prompts), not on the few timed ones
OUTPUT_REPLAYED = tuple(spec.name for spec in methods.replaying_specs())


def replayed_from_outputs(args, spec, dataset: str, drop_first_step: bool = False,
                          sweep: bool = False) -> tuple[pd.DataFrame, list[Path], str]:
    """(StepTrace rows, source files, source text) of `spec`'s calibration configurations (`sweep`:
    and every configuration of its sweep space) replayed (`traces.lookup_replay`, each generation's
    first step left out with `drop_first_step`) on the greedy outputs a TokenTrace of `dataset` holds."""
    path = token_path(args, next(iter(TOKEN_DRAFTERS)), dataset)
    frame, _ = read_trace(path, kind="token")
    outputs = {pid: rows.sort_values("pos")["token"].tolist() for pid, rows in frame.groupby("prompt_id", sort=False)}
    tokenizer = _tokenizer()
    prompts = {p.prompt_id: list(encode_prompt(p, tokenizer)) for p in builtin_prompts(list(outputs))}
    configs = list(spec.calibration_configs())
    if sweep:
        labels = {c.label for c in configs}
        configs += [c for c in spec.configs_of(spec.space(None)) if c.label not in labels]
    steps = replayed_steps(prompts, outputs, configs, drop_first_step=drop_first_step)
    first = ", first steps left out" if drop_first_step else ""
    return steps, [path], f"replayed on the greedy outputs of {len(outputs)} prompts in {path.name}{first}"


@functools.lru_cache(maxsize=1)
def _tokenizer():
    """SmolLM2's tokenizer, read once (the profile stage replays every dataset)."""
    return load_tokenizer("smollm2")


def with_best_spreads(args, profile: Profile) -> Profile:
    """`profile` with each dataset's prompt-to-prompt spread (`calibrate.spread`) from the recorded best
    (stage best, `--limit` prompts each: the step calibration's `--step-limit` are too few to say it);
    unchanged until stage best has recorded them."""
    paths = sorted(args.out.glob("steps_best-*.parquet"))        # their plain partners add nothing (T = 1)
    return with_spreads(profile, paths)[0] if paths else profile
