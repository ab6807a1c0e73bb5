"""What the engine pays beyond isolated forwards: a StepCalibration per method, fitted from StepTraces.

The forward micro-benchmarks (traces.timing) time each model alone. A real decode step costs more
and differently: masks and tree building around the verify forward, a drafter catching up on the
tokens of the last step in its first forward, sampling and cache edits. The StepTraces hold each
step's parts (draft_s, verify_s, overhead_s) with the shape it ran (draft forwards, verified tokens,
context), so each part is regressed on what the Profile's forward latencies predict for that very
step (`costmodel.step` on the method's shape, the step's realised draft forwards and tokens):

    verify_s   ~ verify_scale * prior_verify + verify_fixed_s [+ verify_per_token_s * verify_tokens]
    draft_s    ~ draft_scale  * prior_draft  + draft_per_forward_s * draft_forwards
                 + draft_per_token_s * verify_tokens
                 + [a generation's first step] (first_draft_s + first_draft_per_token_s * prompt_len)
    overhead_s ~ overhead_s + overhead_per_token_s * verify_tokens

per method (`costmodel.step.StepCalibration`), and pooled over every method for methods without
traces. The draft part pays per forward and per proposed token besides the forwards' own cost
(cache views, masks, top-k sampling and tree building around each forward and node): a fixed cost
per step instead misprices trees of different widths. A chain verifies one token more than it
drafts, so only its per-forward + per-token sum is determined (one of the two may come out
negative). A generation's first draft runs the whole prompt through the drafter, fitted as a fixed
cost plus one per prompt token. Each fit is a ridge regression towards the prior (scale 1, nothing
fixed); where the prior barely varies (one configuration of a method) only the scale is fitted, so
a direction the traces do not explore stays at the prior instead of wandering. Four structures
compete (`STRUCTURES`): every part per method; the verify forward shared by the speculative methods
(draft and overhead per method); that shared verify with a cost per verified token besides (the
engine computes logits at every verified position and builds masks for them, which the isolated
forward may not); or the shared verify with a line of its own for verifies of `wide_from()` tokens
or more (on a CPU the few-row projections of runtime.linear end there: a narrow verify costs
what plain decoding's forward does over its isolated time, a wide one other kernels' ratio, and
one line through both puts a fixed cost on the narrow verifies that they do not pay). The one with
the lowest mean leave-one-configuration-out error is kept (the mean: a structure with a few wild fits must not win on its typical one), and every error is
recorded. What these fits came to on the bundled recordings is in examples/smollm2_cpu/README.md.

Traces measured in pairs (each generation beside plain decoding of its prompt, `traces.drift`) are
first rescaled to the machine's typical speed, so the fit sees the methods' costs, not the minute
each was measured in.

`fit_engine(profile, runs)` returns the Profile's "engine" section with its held-out error: every
configuration is left out in turn, the rest refitted, and its speedup over plain decoding
(measured tokens per step, predicted step times) compared with the measured one.
`workload(runs)` returns the context the traces saw per dataset (the Profile's "workload").
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from methods import BASELINE
import methods
from common.errors import InputError
from costmodel.step import StepCalibration, draft_seconds, verify_seconds, wide_terms
from methods.spec import priced_config
from traces import drift
from traces.schema import step_wall_s
from runtime.linear import SKINNY_ROWS

RIDGE = 1e-3      # pull towards the prior, relative to each feature's own scale
# fit_engine keeps the one with the lowest held-out error
STRUCTURES = ("per method", "shared verify", "shared verify per token", "shared verify by width")
VARIES = 0.05     # a prior that varies less than this (relative spread) fits a scale only


@dataclass
class StepRun:
    """One StepTrace of one configuration, with the Profile drafter and dataset it ran on."""

    frame: pd.DataFrame
    drafter: str | None
    dataset: str

    @property
    def method(self) -> str:
        return str(self.frame["method"].iloc[0])

    @property
    def config(self):
        """The method config the trace ran (decoder options a trace also records, such as an
        untrained drafter's seed, are not part of it)."""
        raw = json.loads(str(self.frame["config"].iloc[0]))
        keys = methods.get(self.method).config.keys()
        return methods.parse_config(self.method, {k: v for k, v in raw.items() if k in keys})

    @property
    def label(self) -> str:
        return self.config.label


def prior_parts(profile, run: StepRun) -> pd.DataFrame:
    """Per step of `run`: the forward-latency prior of its draft and verify parts (no calibration).
    A frame with a `batch` column holds steps of a padded batch (`calibrate.batch_engine.batch_steps`:
    its context the longest row's, its verify tokens the widest tree's): the forwards are priced at
    each step's batch, and no step is a first draft (the batch engine prefills a drafter as its
    request joins)."""
    spec = methods.get(run.method)
    if run.frame["method"].nunique() != 1 or run.frame["config"].nunique() != 1:
        raise InputError("a StepRun holds one method and one configuration")
    setup = profile.setups_for(spec, dataset=run.dataset, drafter=run.drafter)[0]
    config = priced_config(run.config, setup.drafter_spec)      # a trained router is the drafter's
    shape = spec.step_shape(setup, spec.frame_of([config]))
    latency = profile.seconds
    f = run.frame
    ctx = f["ctx_len"].to_numpy(float)
    drafted = f["draft_forwards"].to_numpy(np.int64)
    reach = np.arange(shape.max_drafted)[None, :] < drafted[:, None]
    if shape.max_drafted and drafted.max() > shape.max_drafted:
        raise InputError(f"{run.label}: a step ran {drafted.max()} draft forwards, the shape has {shape.max_drafted}")
    batch = f["batch"].to_numpy(np.int64) if "batch" in f else np.ones(len(f), np.int64)
    tokens = f["verify_tokens"].to_numpy(float)
    prior_draft, prior_verify = np.zeros(len(f)), np.zeros(len(f))
    for b in np.unique(batch):
        at = batch == b
        if shape.max_drafted:
            prior_draft[at] = draft_seconds(latency, shape, ctx[at], int(b), reach=reach[at])
        prior_verify[at] = verify_seconds(latency, shape, ctx[at], int(b), verify_tokens=tokens[at])
    first = (f["step"].to_numpy() == 0) & (drafted > 0) & ("batch" not in f)
    return pd.DataFrame({"method": run.method, "config": run.label, "dataset": run.dataset,
                         "prior_draft": prior_draft, "prior_verify": prior_verify,
                         "drafted": (drafted > 0).astype(float), "forwards": drafted.astype(float),
                         "first": first.astype(float), "rows": batch.astype(float),
                         "verify_tokens": f["verify_tokens"].to_numpy(float),
                         "draft_s": f["draft_s"].to_numpy(float), "verify_s": f["verify_s"].to_numpy(float),
                         "overhead_s": f["overhead_s"].to_numpy(float), "accepted": f["accepted"].to_numpy(float),
                         "ctx_len": ctx})


def _ridge(x: np.ndarray, y: np.ndarray, prior: np.ndarray) -> np.ndarray:
    """argmin |x b - y|^2 + RIDGE * sum_j s_j (b_j - prior_j)^2, s_j = sum of x_j^2 (scale-free)."""
    scale = np.maximum((x ** 2).sum(axis=0), 1e-30)
    a = x.T @ x + RIDGE * np.diag(scale)
    return np.linalg.solve(a, x.T @ y + RIDGE * scale * prior)


def _scale_and_fixed(prior: np.ndarray, fixed: np.ndarray, measured: np.ndarray) -> tuple[float, ...]:
    """(scale, *fixed seconds) with measured ~ scale * prior + fixed @ fixed_s (`fixed`: one column
    per fixed cost). Where the prior barely varies (one configuration: coefficient of variation
    under VARIES) they cannot be told apart, and the scale alone is fitted (fixed 0); a non-positive
    scale falls back the same way."""
    prior, fixed, measured = np.asarray(prior, float), np.asarray(fixed, float), np.asarray(measured, float)
    zeros = (0.0,) * fixed.shape[1]
    if len(prior) == 0 or not np.any(prior > 0):
        return (1.0, *zeros)
    if np.std(prior) > VARIES * np.mean(prior):
        fitted = _ridge(np.c_[prior, fixed], measured, np.r_[1.0, np.zeros(fixed.shape[1])])
        if fitted[0] > 0:
            return tuple(float(v) for v in fitted)
    return (float(np.sum(prior * measured) / np.sum(prior * prior)), *zeros)


def wide_from() -> int:
    """Verified tokens from which the target's projections leave the few-row path (runtime.linear)."""
    return SKINNY_ROWS + 1


def fit_parts(parts: pd.DataFrame, per_token: bool = False) -> StepCalibration:
    """One StepCalibration from the prior/measured parts of any set of steps (`per_token`: the
    verify part also has a cost per verified token)."""
    if parts.empty:
        return StepCalibration()
    verify = _scale_and_fixed(parts["prior_verify"], np.ones((len(parts), 1)), parts["verify_s"])
    per_token_s = 0.0
    if per_token and parts["verify_tokens"].std() > VARIES * parts["verify_tokens"].mean():
        fitted = _ridge(np.c_[parts["prior_verify"], np.ones(len(parts)), parts["verify_tokens"]],
                        parts["verify_s"].to_numpy(float), np.array([1.0, 0.0, 0.0]))
        if fitted[0] > 0:
            verify, per_token_s = (float(fitted[0]), float(fitted[1])), float(fitted[2])
    drafting = parts[parts["drafted"] > 0]
    first = drafting["first"].to_numpy(float)
    draft = _scale_and_fixed(drafting["prior_draft"], np.c_[drafting["forwards"], drafting["verify_tokens"],
                                                            first, first * drafting["ctx_len"]], drafting["draft_s"])
    over = _ridge(np.c_[np.ones(len(parts)), parts["verify_tokens"]], parts["overhead_s"].to_numpy(), np.zeros(2))
    return StepCalibration(verify_scale=verify[0], verify_fixed_s=verify[1], verify_per_token_s=per_token_s,
                           draft_scale=draft[0], draft_per_forward_s=draft[1], draft_per_token_s=draft[2],
                           first_draft_s=draft[3], first_draft_per_token_s=draft[4],
                           overhead_s=float(over[0]), overhead_per_token_s=float(over[1]))


def predict_parts(calibration: StepCalibration, parts: pd.DataFrame) -> np.ndarray:
    """Predicted seconds of each step in `parts` (realised draft forwards and verified tokens)."""
    c = calibration
    factor, extra = wide_terms(c, parts["verify_tokens"].to_numpy(float))
    per_token = c.overhead_per_token_s + c.verify_per_token_s + c.draft_per_token_s * parts["drafted"]
    return (c.draft_scale * parts["prior_draft"] + c.draft_per_forward_s * parts["forwards"]
            + parts["first"] * (c.first_draft_s + c.first_draft_per_token_s * parts["ctx_len"])
            + c.verify_scale * parts["prior_verify"] * factor + c.verify_fixed_s + extra
            + c.overhead_s + per_token * parts["verify_tokens"]).to_numpy(float)


def fit_calibrations(parts: pd.DataFrame, structure: str = "per method"
                     ) -> tuple[dict[str, StepCalibration], StepCalibration]:
    """(per method, pooled over all) StepCalibrations. `structure` "shared verify": the verify
    forward's scale and fixed cost are fitted once over every speculative method's steps (it is
    the same target forward; two configurations of one method pin a line through two points),
    the draft and overhead parts per method; plain decoding (ar) keeps its own. "shared verify
    per token": the same with a cost per verified token in the shared verify; "shared verify by
    width": the shared verify with a line of its own from `wide_from()` verified tokens on."""
    if structure not in STRUCTURES:
        raise InputError(f"unknown engine fit structure '{structure}' (known: {', '.join(STRUCTURES)})")
    per = {m: fit_parts(g) for m, g in parts.groupby("method", sort=True)}
    if structure != "per method":
        speculative = parts[parts["method"] != BASELINE]
        shared = fit_parts(speculative, per_token=structure.endswith("per token"))
        if structure.endswith("by width"):
            shared = _split_verify(speculative, shared)
        verify = {k: getattr(shared, k) for k in ("verify_scale", "verify_fixed_s", "verify_per_token_s",
                                                  "verify_wide_from", "verify_wide_factor", "verify_wide_extra_s")}
        per = {m: c if m == BASELINE else replace(c, **verify) for m, c in per.items()}
    return per, fit_parts(parts)


def _split_verify(parts: pd.DataFrame, line: StepCalibration) -> StepCalibration:
    """`line` with a verify line (scale, fixed) for narrow and one for wide verifies (`wide_from`),
    each fitted on its own steps; `line` as it is where either side has none."""
    start = wide_from()
    wide = parts["verify_tokens"].to_numpy(float) >= start
    if wide.all() or not wide.any():
        return line
    fits = [_scale_and_fixed(p["prior_verify"], np.ones((len(p), 1)), p["verify_s"]) for p in (parts[~wide], parts[wide])]
    (narrow_scale, narrow_fixed), (wide_scale, wide_fixed) = fits
    return replace(line, verify_scale=narrow_scale, verify_fixed_s=narrow_fixed, verify_wide_from=float(start),
                   verify_wide_factor=wide_scale / narrow_scale, verify_wide_extra_s=wide_fixed - narrow_fixed)


def heldout_errors(parts: pd.DataFrame, structure: str = "per method") -> pd.DataFrame:
    """Leave one configuration out: refit without it (its method's other configurations, else the
    pool) and compare its speedup over plain decoding (measured tokens per step; predicted step
    times, the plain steps of its dataset predicted the same way) with the measured speedup."""
    rows = []
    for (dataset, config), held in parts.groupby(["dataset", "config"], sort=True):
        rest = parts[parts["config"] != config]
        per_method, pooled = fit_calibrations(rest, structure)
        method = str(held["method"].iloc[0])
        plain = parts[(parts["method"] == BASELINE) & (parts["dataset"] == dataset)]
        if plain.empty:
            raise InputError(f"no plain decoding (ar) steps of dataset '{dataset}': speedups need them")
        predicted_step = predict_parts(per_method.get(method, pooled), held).mean()
        predicted_ar = predict_parts(per_method.get(BASELINE, pooled), plain).mean()
        measured_step = float(step_wall_s(held).mean())
        measured_ar = float(step_wall_s(plain).mean())
        tokens = float(held["accepted"].mean())
        measured = tokens * measured_ar / measured_step
        predicted = tokens * predicted_ar / predicted_step
        rows.append({"dataset": dataset, "method": method, "config": config, "steps": len(held),
                     "measured_step_s": measured_step, "predicted_step_s": float(predicted_step),
                     "measured_speedup": measured, "predicted_speedup": predicted,
                     "rel_error": predicted / measured - 1.0})
    return pd.DataFrame(rows)


def fit_engine(profile, runs: list[StepRun]) -> dict:
    """The Profile's "engine" section from `runs` (module docstring)."""
    if not runs:
        raise InputError("engine calibration needs at least one StepTrace")
    parts = pd.concat([prior_parts(profile, run) for run in runs], ignore_index=True)
    # drift: each pair's plain step against the isolated forward at its context (the prior), so
    # datasets recorded in different hours come to one speed; the priors do not move with it
    steps = pd.concat([run.frame for run in runs], ignore_index=True)
    factors = drift.pair_factors(steps, parts["prior_verify"])
    measured = list(drift.PARTS)
    parts[measured] = drift.normalise(steps, factors)[measured].to_numpy(float)
    # the structure whose mean held-out error is lowest (ar, the speedups' baseline, is not judged);
    # the mean, not the median: a structure with a few wild fits must not win on the typical one
    judged = {s: heldout_errors(parts, s) for s in STRUCTURES}
    median = {s: float(e.loc[e["method"] != BASELINE, "rel_error"].abs().median()) for s, e in judged.items()}
    mean = {s: float(e.loc[e["method"] != BASELINE, "rel_error"].abs().mean()) for s, e in judged.items()}
    structure = min(STRUCTURES, key=lambda s: (mean[s], STRUCTURES.index(s)))
    per_method, pooled = fit_calibrations(parts, structure)
    errors = judged[structure]
    abs_err = errors.loc[errors["method"] != BASELINE, "rel_error"].abs()
    plain = parts[parts["method"] == BASELINE]
    reference = {str(d): {"ar_step_s": float(step_wall_s(g).mean()),
                          "ctx_len": float(g["ctx_len"].mean()), "steps": int(len(g))}
                 for d, g in plain.groupby("dataset", sort=True)}
    return {
        "methods": {m: c.to_dict() for m, c in per_method.items()},
        "pooled": pooled.to_dict(),
        "fit": {"reference": reference,       # the plain step of the calibration window: a later run's drift
                "drift": drift.summary(factors),  # the machine's drift, divided out
                "steps": int(len(parts)), "configs": sorted(parts["config"].unique().tolist()),
                "structure": {"chosen": structure, "heldout_mean": {k: round(v, 5) for k, v in mean.items()},
                              "heldout_median": {k: round(v, 5) for k, v in median.items()}},
                "heldout": {"scheme": "leave one configuration out; speedup at measured tokens per step",
                            "speedup_error_median": float(abs_err.median()),
                            "speedup_error_p90": float(abs_err.quantile(0.9)),
                            "speedup_error_max": float(abs_err.max()),
                            "per_config": {f"{r.dataset} | {r.config}": round(float(r.rel_error), 5)
                                           for r in errors.itertuples()}}},
    }


def workload(runs: list[StepRun]) -> dict[str, dict[str, Any]]:
    """Per dataset: mean prompt tokens (context of a prompt's first step) and mean new tokens per prompt.
    How far one prompt strays from the dataset is priced through the finished Profile
    (`calibrate.spread.with_spreads`)."""
    out: dict[str, dict[str, Any]] = {}
    frames = pd.concat([r.frame.assign(dataset=r.dataset) for r in runs], ignore_index=True)
    for dataset, f in frames.groupby("dataset", sort=True):
        per_prompt = f.groupby(["run_id", "prompt_id"]).agg(prompt=("ctx_len", "min"), new=("accepted", "sum"))
        out[str(dataset)] = {"prompt_tokens": round(float(per_prompt["prompt"].mean()), 2),
                             "new_tokens": round(float(per_prompt["new"].mean()), 2)}
    return out
