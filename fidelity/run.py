"""Fidelity (the library of `python -m experiments.fidelity`): what to measure and the predictions
written before measuring it.

The default configurations come from each method's own search space on each Profile drafter: the
predicted best and configurations spread evenly over the predicted speedups, so the set spans good
and bad choices of all methods (`spread`); or (`top`) the predicted best few of each, the choices a
search has to tell apart where speculation wins. Predictions are the closed form (`sweep.scoring`, the
engine-calibrated step cost) and the simulator, priced at the prompts' own context (their mean
length plus half the new tokens).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from methods import BASELINE
import methods
from common.errors import InputError
from common.seeds import derive_seed
from campaigns.measure import Bench, Candidate, parse_candidate
from sweep import scoring
from methods.spec import engine_config, priced_config, plain_shape
from runtime.prompts import builtin_prompts, overlapping_sources
from costmodel.step import step_seconds

PER_SETUP = 4            # default configurations per (method, drafter)
SELECTIONS = ("spread", "top")   # which of a setup's scored configurations are measured (default_candidates)
SIM_REPEATS = 2000       # default simulated streams per configuration (seed noise <= 0.3% on SmolLM2)
MAX_VERIFY = 64          # default configurations verify at most this many tokens per step


# ------------------------------------------------------------------------------ what to measure

def default_candidates(profile, dataset: str, ctx_len: float, per_setup: int = PER_SETUP,
                       new_tokens: int | None = None, select: str = "spread") -> list[Candidate]:
    """ar, then per method and Profile drafter: the predicted best of its search space and
    `per_setup` - 1 more (verifying <= MAX_VERIFY tokens), predicted for generations of `new_tokens`:
    evenly spread over its predicted speedups down to the worst (`select` spread), or the next best
    that the model prices differently (`top`)."""
    if select not in SELECTIONS:
        raise InputError(f"unknown selection '{select}' (known: {', '.join(SELECTIONS)})")

    setting = scoring.Setting(temperature=0.0, ctx_len=int(round(ctx_len)), dataset=dataset, new_tokens=new_tokens)
    out = [Candidate(methods.get(BASELINE).config())]
    for spec in methods.specs():
        if not spec.sweep:
            continue
        try:
            setups = profile.setups_for(spec, temperature=0.0, dataset=dataset)
        except InputError:
            continue
        for setup in setups:
            spec_of = setup.drafter_spec
            loadable = spec_of is not None and spec_of.file is not None
            modelless = spec_of is None or not (spec_of.model or spec_of.head_model or spec_of.adapter_model)
            if setup.drafter and not (loadable or modelless):   # a model this machine cannot load
                continue
            scored = scoring.score(setup, spec.name, spec.space(setup), setting)
            scored = scored[scored["verified_per_step"] <= MAX_VERIFY].sort_values("speedup", ascending=False)
            picks = (_distinct_best(scored, per_setup) if select == "top"
                     else np.unique(np.linspace(0, len(scored) - 1, per_setup).round().astype(int)))
            drafter = setup.drafter if loadable else None     # a model-less entry names acceptance only
            for config in spec.configs_of(scored.iloc[picks]):
                engine = engine_config(config, setup.drafter_spec) if drafter else config
                out.append(Candidate(engine, drafter))
    return out


def _distinct_best(scored: pd.DataFrame, n: int) -> np.ndarray:
    """Positions of the `n` best rows of `scored` (sorted best first) whose predictions differ: a
    configuration the model prices exactly like a better one (the same tokens per step and step
    time, e.g. MCSD k1 with and without replacement) would only measure that one again."""
    twins = scored[["speedup", "tokens_per_step"]].round(6).duplicated()
    return np.flatnonzero(~twins.to_numpy())[:n]


def read_candidates(path: Path) -> list[Candidate]:
    if not path.is_file():
        raise InputError(f"--configs file not found: {path}")
    lines = [ln.split("#")[0].strip() for ln in path.read_text().splitlines()]
    cands = [parse_candidate(ln) for ln in lines if ln]
    if not any(c.method == BASELINE for c in cands):
        cands.insert(0, Candidate(methods.get(BASELINE).config()))
    return cands


def check_held_out(profile, prompt_ids: list[str]) -> None:
    """Refuse prompts the Profile was calibrated on, or built from the same item as one of them (a
    code-edit prompt of a HumanEval task the Profile saw)."""
    used = list(profile.provenance.calibration_prompts)
    if not used:
        raise InputError(f"profile '{profile.name}' does not list its calibration prompts (provenance."
                         "calibration_prompts): held-out prompts cannot be checked")
    overlap = sorted(set(used) & set(prompt_ids))
    overlap += overlapping_sources(builtin_prompts(used), [p for p in builtin_prompts(prompt_ids) if p.prompt_id not in overlap])
    if overlap:
        raise InputError(f"prompts {', '.join(overlap)} were used to calibrate '{profile.name}', or share their source "
                         f"with one that was (its calibration prompts: {', '.join(used)}); choose others")


# ------------------------------------------------------------------------------ predict

def predict(profile, cands: list[Candidate], dataset: str, ctx_len: float, sim_tokens: int, seed: int,
            sim_repeats: int = SIM_REPEATS) -> pd.DataFrame:
    """Closed form and simulator for each candidate on `dataset`, at `ctx_len`, from the Profile
    alone; the simulator runs `sim_repeats` streams of `sim_tokens` centred on `ctx_len` (the
    measured workload: prompts of the mean length, the measured new tokens), and the closed form
    prices generations of the same length."""
    setting = scoring.Setting(temperature=0.0, ctx_len=int(round(ctx_len)), dataset=dataset, new_tokens=sim_tokens)

    plain_s = float(step_seconds(profile.seconds, plain_shape(profile), float(ctx_len))[0])
    rows = []
    for cand in cands:
        if cand.method == BASELINE:          # the baseline: one target step per token
            rows.append({"dataset": dataset, "candidate": cand.label, "method": BASELINE, "predicted_speedup": 1.0,
                         "predicted_tokens_per_step": 1.0, "predicted_step_s": plain_s, "simulated_speedup": 1.0,
                         "sim_se": 0.0, "ctx_len": float(ctx_len)})
            continue
        spec = methods.get(cand.method)
        setup = profile.setups_for(spec, temperature=0.0, dataset=dataset, drafter=cand.drafter)[0]
        priced = priced_config(cand.config, setup.drafter_spec) if cand.drafter else cand.config
        scored = scoring.score(setup, cand.method, spec.frame_of([priced]), setting)
        sim = scoring.simulate_task(scoring.SimTask(profile, cand.method, scoring.sim_config(scored),
                                                    setting, derive_seed(seed, profile.name, dataset, cand.label),
                                                    sim_tokens, sim_repeats))
        rows.append({"dataset": dataset, "candidate": cand.label, "method": cand.method,
                     "predicted_speedup": float(scored["speedup"].iloc[0]),
                     "predicted_tokens_per_step": float(scored["tokens_per_step"].iloc[0]),
                     "predicted_step_s": float(scored["step_s"].iloc[0]),
                     "simulated_speedup": sim["sim_speedup"], "sim_se": sim["sim_se"], "ctx_len": float(ctx_len)})
    return pd.DataFrame(rows)


def prompt_counts(runs: pd.DataFrame) -> dict[str, int]:
    """Prompts a run measured per dataset: its prompt ids, or a batch run's prompts per batch (the most)."""
    counts = (runs.groupby("dataset")["prompt_id"].nunique() if "prompt_id" in runs
              else runs.groupby("dataset")["prompts"].max())
    return {str(d): int(n) for d, n in counts.items()}


def predictions_with_intervals(pred: pd.DataFrame, profile, prompts: dict[str, int]) -> pd.DataFrame:
    """Predictions with the 90% interval of the speedup a run of `prompts[dataset]` prompts will
    measure and the prompts a run needs to tell each configuration from plain decoding
    (`sweep.scoring.speedup_intervals`)."""
    n = pred["dataset"].map(prompts)
    found = scoring.speedup_intervals(profile, pred["dataset"], pred["method"], pred["predicted_speedup"],
                                      pred["predicted_tokens_per_step"], n.to_numpy(float))
    sampling = scoring.prompt_sampling(profile, pred["dataset"], pred["method"], pred["predicted_tokens_per_step"],
                                       n.to_numpy(float))
    return pred.assign(predicted_lo=found["speedup_lo"], predicted_hi=found["speedup_hi"], n_prompts=n,
                       prompts_to_confirm=found["prompts_to_confirm"], prompt_half=sampling)
