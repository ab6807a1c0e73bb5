"""The transformers peer (the library of `python -m experiments.transformers_peer`): SmolLM2 decoded
by transformers' own `generate` on this CPU, calibrated like the project's engine and predicted.

Stages:
0. `latency`: the forwards' latency tables of SmolLM2 and of the assistant's shape (the target's
   first layer with the full head), transformers' own modules timed (`traces.timing --engine
   transformers`: its attention, DynamicCache and `F.linear`, not this project's forward) ->
   `latency.parquet` in `--out`;
1. `tokens`: TokenTraces of the assistant: transformers' assistant model and target scored
   teacher-forced on the greedy outputs the SmolLM2 TokenTraces hold (`--smollm2`, 48 prompts per
   dataset) -> `tokens_vanilla-hf_<dataset>.parquet`. Under greedy decoding an assisted step's
   drafts, up to its first miss, are the assistant's argmax along the output, so every draft
   length's acceptance follows from one forward per prompt (`calibrate.fit_acceptance`), as it does
   for the project's drafters: far more prompts than the timed steps afford;
2. `steps`: StepTraces of the calibration configurations (`CALIBRATION`: plain decoding, prompt
   lookup, the exported vanilla drafter as assistant model) on the first `--step-limit` prompts of
   each dataset, every generation beside plain decoding of its prompt
   (`campaigns.measure.Bench(engine="transformers")`), written as the hf-assisted
   recorder writes them;
3. `profile`: a Profile of the peer: those latency tables, acceptance (the assistant's from its
   TokenTraces, with the acceptance `calibrate.ingest`'s hf-assisted importer reads back from
   transformers' own steps beside it as a check; prompt lookup's replayed on
   the SmolLM2 recordings' greedy outputs, `--smollm2`, since acceptance is the model's and the
   data's, not the engine's) and the engine
   calibration fitted on its steps (what transformers pays beyond the isolated forwards).
`python -m experiments.fidelity --engine transformers --profile <the Profile>` then predicts other
configurations on held-out prompts before measuring them.
"""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import methods
from campaigns.smollm2 import (DATASETS, LATENCY_CTX, LATENCY_TOKENS, TARGET_ARCH, calibration_prompts,
                                          run_module, slug)
from campaigns.smollm2_profile import replayed_from_outputs
from campaigns.measure import Candidate, Bench
from profiles.parts import Drafter, typed_drafters, EngineTerms, Workload
from campaigns.smollm2 import TOKEN_DRAFTERS, token_path as smollm2_token_path
from campaigns.transformers_engine import assistant_from_vanilla, teacher_forced_rows
from runtime.models import load_model, load_transformers
from runtime.prompts import builtin_prompts, encode_prompt, load_prompt_mix
from traces import schema
from common.rundir import git_commit
from calibrate.engine import StepRun, fit_engine, workload
from calibrate.fit_acceptance import fit_token_acceptance
from calibrate.ingest.hf_assisted import ingest
from calibrate.ingest.result import IngestOptions
from calibrate.latency import fit_latency
from profiles.profile import Profile
from costmodel.params import get_arch
from traces.schema import read_trace

TRACES = Path("data/traces/smollm2-cpu-transformers")
PROFILE = Path("data/profiles/smollm2-135m-cpu-transformers.json")
ASSISTANT = "vanilla-hf"
REPLAYED = methods.replaying_specs()      # their steps from SmolLM2's outputs
DRAFTERS: dict[str, Drafter] = typed_drafters({
    ASSISTANT: {"kind": "draft_model", "model": "vanilla-full-1l", "file": "vanilla/vanilla.safetensors"},
    **{name: entry for spec in REPLAYED for name, entry in spec.drafters(TARGET_ARCH).items()},
})
CALIBRATION: list[Candidate] = [
    Candidate(methods.parse_label(methods.BASELINE)),
    *(Candidate(methods.parse_label(f"prompt_lookup g{g} nmin1 nmax{n}")) for g, n in ((2, 1), (4, 2), (6, 3))),
    *(Candidate(methods.parse_label(f"sd g{g}"), ASSISTANT) for g in (2, 4, 6)),
]


LATENCY_ROUNDS = 3       # passes over the grid (traces.timing --rounds): this CPU's speed drifts for minutes
LATENCY_NAMES = {"smollm2": TARGET_ARCH, "layers:1": DRAFTERS[ASSISTANT].model}   # timed spec -> Profile model


def stage_latency(args, log) -> None:
    """The target's and the assistant shape's forwards, transformers' own modules timed."""
    out = args.out / "latency.parquet"
    if not out.exists():
        run_module("traces.timing", ["--model", "smollm2", "--drafter", "layers:1", "--engine", "transformers",
                                     "--rounds", str(LATENCY_ROUNDS), "--repeats", "3",
                                     "--tokens", LATENCY_TOKENS, "--ctx", LATENCY_CTX, "--threads", str(args.threads),
                                     "--out", str(out), "--quiet"], log)


def token_path(out: Path, dataset: str) -> Path:
    return out / f"tokens_{ASSISTANT}_{dataset}.parquet"


def stage_tokens(args, log) -> None:
    """The assistant's TokenTraces (module docstring; those already recorded are kept)."""
    import pandas as pd
    import torch

    todo = [d for d in DATASETS if not token_path(args.out, d).exists()]
    if not todo:
        return
    torch.set_num_threads(args.threads)
    ours = load_model("smollm2")
    hf, _ = load_transformers("smollm2")
    assistant = assistant_from_vanilla(hf, args.drafters / DRAFTERS[ASSISTANT].file, ours.model)
    for dataset in todo:
        source = smollm2_token_path(SimpleNamespace(out=args.smollm2), next(iter(TOKEN_DRAFTERS)), dataset)
        frame, _ = schema.read_trace(source, kind="token")
        outputs = {pid: g.sort_values("pos")["token"].tolist() for pid, g in frame.groupby("prompt_id", sort=False)}
        rows = []
        with torch.inference_mode():
            for prompt in builtin_prompts(list(outputs)):
                rows += [{"run_id": f"{ASSISTANT}#teacher-forced", "prompt_id": prompt.prompt_id, **row}
                         for row in teacher_forced_rows(hf, assistant, list(encode_prompt(prompt, ours.tokenizer)),
                                                        outputs[prompt.prompt_id])]
        meta = schema.RunMetadata(kind="token", models={"target": "smollm2", "draft": ASSISTANT}, hardware="CPU",
                                  dtype="fp32", temperature=0.0, dataset=dataset, seed=0, commit=git_commit(),
                                  extra={"engine": "transformers", "outputs": str(source),
                                         "teacher_forced": "transformers' target and assistant over the outputs"})
        schema.write_trace(token_path(args.out, dataset), pd.DataFrame(rows), meta)
        log(f"wrote {token_path(args.out, dataset)} ({len(outputs)} prompts)")


def step_path(out: Path, cand: Candidate, dataset: str) -> Path:
    return out / f"steps_{slug(cand.label)}_{dataset}.parquet"


def stage_steps(args, log) -> None:
    """StepTraces of CALIBRATION measured through transformers, on the datasets that miss one (the
    others' are kept; a dataset's calibration configurations are measured together, beside plain)."""
    datasets = [d for d in DATASETS if any(not step_path(args.out, c, d).exists() for c in CALIBRATION)]
    if not datasets:
        return
    bench = Bench("smollm2", DRAFTERS, args.drafters, args.threads, engine="transformers")
    prompts = bench.encode(load_prompt_mix(calibration_prompts(args, datasets)))
    _runs, steps = bench.measure(CALIBRATION, prompts, repeats=args.repeats, max_new_tokens=args.max_new_tokens, log=log)
    for cand in CALIBRATION:
        for profile_name in datasets:
            rows = steps[(steps["candidate"] == cand.label) & (steps["dataset"] == DATASETS[profile_name])]
            meta = schema.RunMetadata(kind="step", models={"target": "smollm2", "draft": cand.drafter or ""},
                                      hardware="CPU", dtype="fp32", temperature=0.0, dataset=profile_name, seed=0,
                                      commit=git_commit(), extra={"source_format": "hf-assisted", "engine": "transformers",
                                                                  "label": cand.label, "repeats": args.repeats})
            schema.write_trace(step_path(args.out, cand, profile_name), rows.drop(columns=["candidate", "dataset"]), meta)
    log(f"wrote {len(CALIBRATION) * len(datasets)} transformers step traces of {', '.join(datasets)} to {args.out}")


def stage_profile(args, log) -> None:
    """The peer's Profile from its traces and the SmolLM2 forwards' latency tables."""
    import datetime as dt

    import numpy as np

    from dataclasses import replace

    rows, _ = read_trace(args.out / "latency.parquet", kind="latency")
    rows = rows.assign(model=rows["model"].replace(LATENCY_NAMES))
    latency = {}
    for model, group in rows[rows["model"].isin(set(LATENCY_NAMES.values()))].groupby("model"):
        fitted = fit_latency(group, "table", arch=None, hardware="CPU", dtype="fp32", name=model).to_dict()
        fitted["fit"] = {k: v for k, v in fitted["fit"].items() if not (isinstance(v, float) and np.isnan(v))}
        latency[model] = fitted
    steps = {(c, d): read_trace(step_path(args.out, c, d), kind="step")[0] for c in CALIBRATION for d in DATASETS}
    acceptance, replayed = {}, set()
    for dataset in DATASETS:
        tokens, _ = read_trace(token_path(args.out, dataset), kind="token")
        entry = fit_token_acceptance(tokens, drafter=ASSISTANT, dataset=dataset, temperature=0.0,
                                     source=f"token trace {token_path(args.out, dataset).name} (transformers' forwards)")
        # transformers' own assisted steps, read back through the hf-assisted importer: the check
        chains = [str(step_path(args.out, c, dataset)) for c in CALIBRATION if c.drafter == ASSISTANT]
        imported = ingest(chains, IngestOptions(drafter=ASSISTANT, dataset=dataset, temperature=0.0)).acceptance
        entry["fit"]["generate_check"] = {"alpha": round(float(imported["alpha"]), 4),
                                          "alpha_by_position": [round(float(b), 4) for b in imported["alpha_by_position"]],
                                          "source": imported.get("source", "hf-assisted")}
        acceptance[f"{ASSISTANT}/{dataset}/T0"] = entry
        replayed |= set(tokens["prompt_id"])
        # generate runs its first assisted step with the prompt's prefill, and the peer reports the
        # steps after it (campaigns.transformers_engine): the replay leaves it out too
        for spec in REPLAYED:
            lookups, _paths, source = replayed_from_outputs(SimpleNamespace(out=args.smollm2), spec, dataset,
                                                            drop_first_step=True, sweep=True)
            replayed |= set(lookups["prompt_id"])
            acceptance[f"{spec.name}/{dataset}"] = spec.fit_replayed(lookups, dataset=dataset, temperature=0.0,
                                                                     source=f"{source} ({args.smollm2})")
    step_runs = [StepRun(frame, c.drafter, dataset) for (c, dataset), frame in steps.items()]
    profile = Profile.build(
        name="smollm2-135m via transformers on this CPU", hardware="CPU", dtype="fp32", target=TARGET_ARCH,
        models={TARGET_ARCH: get_arch(TARGET_ARCH).to_dict()}, latency=latency, acceptance=acceptance,
        drafters={k: v.to_dict() for k, v in DRAFTERS.items()},
        provenance={"built_by": "python -m experiments.transformers_peer", "commit": git_commit(),
                    "created": dt.datetime.now(dt.timezone.utc).isoformat(), "engine": "transformers generate",
                    "sources": sorted(str(step_path(args.out, c, d)) for c, d in steps),
                    "assumptions": ["greedy decoding; transformers' first assisted step (the prompt's prefill) left out",
                                    "the assistant's acceptance: its TokenTraces (transformers' assistant and target "
                                    "teacher-forced along the SmolLM2 recordings' greedy outputs); fit.generate_check "
                                    "holds what transformers' own assisted steps gave on the step prompts",
                                    "prompt lookup's acceptance: its steps replayed on the SmolLM2 recordings' greedy "
                                    "outputs (the same model's greedy law; transformers matches as the project's "
                                    "proposer does for n_min = 1), each generation's first step left out as the "
                                    "peer reports it, the assistant's from transformers' own steps",
                                    "latency: transformers' own forwards of the same model timed (traces.timing "
                                    "--engine transformers); the engine calibration carries what generate pays "
                                    "beyond them"],
                    "calibration_prompts": sorted({pid for r in step_runs for pid in r.frame["prompt_id"]} | replayed)})
    profile = replace(profile, workload={d: Workload.of(w, d) for d, w in workload(step_runs).items()})
    profile = replace(profile, engine=EngineTerms.of(fit_engine(profile, step_runs)))
    held = profile.engine.fit["heldout"]
    log(f"transformers engine calibration: held-out speedup error median {100 * held['speedup_error_median']:.1f}%, "
        f"p90 {100 * held['speedup_error_p90']:.1f}%")
    profile.save(args.profile)
    log(f"wrote {args.profile}")
