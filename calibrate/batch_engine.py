"""What a step of the continuous-batching engine costs beyond its isolated forwards, fitted from
BatchStepTraces: the engine terms of a Profile whose `batching` is "padded" (`costmodel.step.PADDED`).

`runtime.engine.batch` runs one target forward over every row padded to the widest tree and the
longest row's context, drafter forwards round by round over every row, and a Python propose,
decide and commit per row. `calibrate.engine` fits what a step costs beyond its isolated forwards
from steps of one request at a time; here the same parts are fitted on batch steps (one row per
step: `batch_steps`), each part regressed on the forward-latency prior of that very step
(`calibrate.engine.prior_parts` at the step's batch, widest tree and longest context) and on the
host work that grows with the rows:

    verify_s   ~ verify_scale * prior_verify + verify_fixed_s + verify_per_row_s * B
                 + verify_per_token_s * B * width                          (shared by every method)
    draft_s    ~ draft_scale * prior_draft + draft_per_forward_s * F + draft_per_row_forward_s * B * F
                 + draft_per_row_s * B [+ draft_per_token_s * B * width]    (per method; F forwards)
    overhead_s ~ overhead_s + overhead_per_row_s * B + overhead_per_token_s * B * width   (per method)
    prefill_s  ~ sum over the requests that joined (prefilled alone) of
                 prefill_per_request_s + prefill_per_token_s * L   (L: its prompt; the attention's
                 L^2 is a few percent at these lengths, and a third term collinear with L extrapolates wildly)

Every term is held within what the hardware allows (`BOUNDS`: a forward in the engine costs 0.5-2.5x
its isolated time, host seconds are >= 0), fitted by bounded least squares on each step's error
relative to its own time, and a term that ends on a bound is a warning line in the fit's record
(`fit.warnings`). The shared verify keeps the leading terms of its line that predict held-out
configurations best (`VERIFY_STRUCTURES`, `verify_structure`): its per-row and per-padded-token terms
can stand in for compute the forward's own table already prices at the step's batch and width, so
they are kept only where they predict better than the table's scale and a fixed cost alone (on the
batch 1-16 drafter steps they did not; with batch 32 added they did). Steps measured beside plain
decoding of the same prompts at the same batch
(`campaigns.measure.Bench.measure_batches`) are first rescaled by their pair's drift
(`traces.drift`), per batch: a batch's own typical speed is what is fitted, not removed.
Held out: each configuration is left out in turn (all its batches), the rest refitted, and its
decode throughput over plain decoding at each batch (measured tokens, predicted step times) compared
with the measured one.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.optimize import lsq_linear

from common.errors import InputError
from calibrate.engine import StepRun, prior_parts
from costmodel.step import PADDED, StepCalibration
from methods import BASELINE
from traces import drift

RIDGE = 1e-4          # pull towards the prior (scale 1, no seconds), relative to each column's own scale
SCALE = (0.5, 2.5)    # a forward inside the engine against its isolated time
BOUNDS = {"verify_scale": SCALE, "draft_scale": SCALE}      # every other term: seconds >= 0


@dataclass(frozen=True)
class Term:
    """One fitted term: its StepCalibration field and the column of the parts it multiplies."""

    field: str
    column: str

    @property
    def bounds(self) -> tuple[float, float]:
        return BOUNDS.get(self.field, (0.0, np.inf))

    @property
    def prior(self) -> float:
        return 1.0 if self.field in BOUNDS else 0.0


VERIFY = (Term("verify_scale", "prior_verify"), Term("verify_fixed_s", "one"), Term("verify_per_row_s", "rows"),
          Term("verify_per_token_s", "padded_tokens"))
# the shared verify's candidate structures, fewest terms first (a tie keeps the simpler)
VERIFY_STRUCTURES = {"scale": VERIFY[:1], "scale and fixed": VERIFY[:2], "scale, fixed and per row": VERIFY[:3],
                     "scale, fixed, per row and per padded token": VERIFY}
OVERHEAD = (Term("overhead_s", "one"), Term("overhead_per_row_s", "rows"),
            Term("overhead_per_token_s", "padded_tokens"))
DRAFTING = (Term("draft_scale", "prior_draft"), Term("draft_per_forward_s", "forwards"),
            Term("draft_per_row_forward_s", "row_forwards"), Term("draft_per_token_s", "padded_tokens"))
PROPOSING = (Term("draft_per_row_s", "rows"),)
PREFILL = (Term("prefill_per_request_s", "joined"), Term("prefill_per_token_s", "joined_tokens"))


def batch_steps(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per step of a BatchStepTrace (`traces.schema`, kind batch_step): its batch, widest tree
    (`verify_tokens`), longest row (`ctx_len`), most draft forwards, the step's seconds, its tokens
    (every row's) and the requests that joined (count, prompt tokens); a StepRun frame
    with a `batch` column (`calibrate.engine.prior_parts`) and its run's batch limit (`max_batch`).
    Pair and dataset columns are kept."""
    if "max_batch" not in frame:            # the run's batch limit (`Bench.measure_batches` records it)
        frame = frame.assign(max_batch=frame.groupby("run_id")["batch"].transform("max"))
    rows = frame.assign(joined_tokens=np.where(frame["joined"], frame["ctx_len"], 0))
    keep = {c: (c, "first") for c in ("method", "config", "batch", "max_batch", "draft_s", "verify_s", "overhead_s",
                                       "prefill_s", "pair", "dataset", "candidate", "repeat") if c in frame}
    steps = rows.groupby(["run_id", "step"], sort=False).agg(
        **keep, verify_tokens=("verify_width", "first"), ctx_len=("ctx_len", "max"),
        draft_forwards=("draft_forwards", "max"), accepted=("accepted", "sum"), joined=("joined", "sum"),
        joined_tokens=("joined_tokens", "sum")).reset_index()
    return steps.assign(prompt_id="batch " + steps["max_batch"].astype(str))   # the drift's group: one per batch


def _columns(parts: pd.DataFrame) -> pd.DataFrame:
    return parts.assign(one=1.0, padded_tokens=parts["rows"] * parts["verify_tokens"],
                        row_forwards=parts["rows"] * parts["forwards"])


def _fit(parts: pd.DataFrame, terms: tuple[Term, ...], measured: str, weight: np.ndarray) -> dict[str, float]:
    """Bounded least squares of `measured` on the terms' columns, each step's error relative to its
    weight, a small ridge towards each term's prior; {field: value}."""
    x = parts[[t.column for t in terms]].to_numpy(float)
    y = parts[measured].to_numpy(float)
    if len(y) == 0:
        return {t.field: t.prior for t in terms}
    w = 1.0 / np.maximum(weight, 1e-9)
    scale = np.sqrt(np.maximum(((x * w[:, None]) ** 2).sum(axis=0), 1e-30))
    prior = np.array([t.prior for t in terms])
    a = np.vstack([x * w[:, None], np.sqrt(RIDGE) * np.diag(scale)])
    b = np.r_[y * w, np.sqrt(RIDGE) * scale * prior]
    lo, hi = (np.array(side) for side in zip(*(t.bounds for t in terms)))
    solved = lsq_linear(a, b, bounds=(lo, hi), method="bvls")
    return dict(zip((t.field for t in terms), map(float, solved.x)))


def fitted_terms(parts: pd.DataFrame) -> tuple[Term, ...]:
    """The terms a method's own fit holds: its draft terms where its steps ran draft forwards, prefill
    where requests joined (the shared verify is fitted once, over every method)."""
    drafts = (*DRAFTING, *PROPOSING) if bool((parts["forwards"] > 0).any()) else PROPOSING
    return (*drafts, *OVERHEAD, *(PREFILL if bool((parts["joined"] > 0).any()) else ()))


def fit_batch_calibrations(parts: pd.DataFrame, verify_terms: tuple[Term, ...] = VERIFY
                           ) -> tuple[dict[str, StepCalibration], StepCalibration]:
    """(per method, pooled over every method) StepCalibrations of padded batch steps (module docstring):
    the verify shared by every method (`verify_terms` of it fitted, the rest at their priors), draft,
    overhead and prefill per method."""
    parts = _columns(parts)
    weight = (parts["draft_s"] + parts["verify_s"] + parts["overhead_s"]).to_numpy(float)
    verify = {t.field: t.prior for t in VERIFY} | _fit(parts, verify_terms, "verify_s", weight)

    def own(group: pd.DataFrame, at: np.ndarray) -> dict[str, float]:
        terms = fitted_terms(group)
        joined = group[group["joined"] > 0]
        return {**_fit(group, tuple(t for t in terms if t in DRAFTING or t in PROPOSING), "draft_s", at),
                **_fit(group, OVERHEAD, "overhead_s", at),
                **_fit(joined, tuple(t for t in terms if t in PREFILL), "prefill_s", joined["prefill_s"].to_numpy(float))}

    per = {str(m): StepCalibration(**verify, **own(g, weight[g.index.to_numpy()])) for m, g in
           parts.reset_index(drop=True).groupby("method", sort=True)}
    pooled = StepCalibration(**verify, **own(parts.reset_index(drop=True), weight))
    return per, pooled


def predict_batch_parts(calibration: StepCalibration, parts: pd.DataFrame) -> np.ndarray:
    """Predicted decode seconds (draft + verify + overhead) of each padded batch step in `parts`, the
    terms as `costmodel.step.step_cost` adds them for a shape of batching "padded" (a test holds the two equal)."""
    c, p = calibration, _columns(parts)
    values = {t.field: getattr(c, t.field) for t in (*VERIFY, *OVERHEAD, *DRAFTING, *PROPOSING)}
    drafts = (p["forwards"] > 0).astype(float)
    total = sum(values[t.field] * p[t.column] * (drafts if t in DRAFTING[3:] else 1.0)
                for t in (*VERIFY, *OVERHEAD, *DRAFTING, *PROPOSING))
    return total.to_numpy(float)


def normalised_parts(profile, runs: list[StepRun]) -> tuple[pd.DataFrame, pd.Series]:
    """The priced parts of every batch step (`prior_parts`), each paired step divided by its pair's
    drift within its batch (module docstring); and the drift factors."""
    frames = [run.frame.reset_index(drop=True) for run in runs]
    parts = pd.concat([prior_parts(profile, run).assign(**{c: f[c].to_numpy() for c in
                                                          ("joined", "joined_tokens", "prefill_s", "max_batch")})
                       for run, f in zip(runs, frames)], ignore_index=True)
    steps = pd.concat(frames, ignore_index=True)
    if "pair" not in steps:
        return parts, pd.Series(dtype=float)
    factors = []
    for _, at in steps.groupby("max_batch", sort=True).groups.items():
        found = drift.pair_factors(steps.loc[at], parts.loc[at, "prior_verify"].to_numpy())
        factors.append(found)
        parts.loc[at, list(drift.PARTS)] = drift.normalise(steps.loc[at], found)[list(drift.PARTS)].to_numpy(float)
    return parts, pd.concat(factors) if factors else pd.Series(dtype=float)


def heldout_errors(parts: pd.DataFrame, verify_terms: tuple[Term, ...] = VERIFY) -> pd.DataFrame:
    """Leave one configuration out (all its batches): per (dataset, configuration, batch) its decode
    throughput over plain decoding's at the batch, measured and predicted (measured tokens, steps
    priced by the refit), and the relative error."""
    rows = []
    for (dataset, config), held in parts.groupby(["dataset", "config"], sort=True):
        method = str(held["method"].iloc[0])
        if method == BASELINE:
            continue
        per, pooled = fit_batch_calibrations(parts[parts["config"] != config], verify_terms)
        for batch, at in held.groupby("max_batch", sort=True):
            plain = parts[(parts["method"] == BASELINE) & (parts["dataset"] == dataset) & (parts["max_batch"] == batch)]
            if plain.empty:
                raise InputError(f"no plain decoding (ar) steps of dataset '{dataset}' at batch {batch}: speedups need them")
            measured = (at["accepted"].sum() / _decode(at).sum()) / (plain["accepted"].sum() / _decode(plain).sum())
            predicted = ((at["accepted"].sum() / predict_batch_parts(per.get(method, pooled), at).sum())
                         / (plain["accepted"].sum() / predict_batch_parts(per.get(BASELINE, pooled), plain).sum()))
            rows.append({"dataset": dataset, "method": method, "config": config, "batch": int(batch), "steps": len(at),
                         "measured_speedup": measured, "predicted_speedup": predicted,
                         "rel_error": predicted / measured - 1.0})
    return pd.DataFrame(rows)


def verify_structure(parts: pd.DataFrame) -> tuple[str, dict[str, float], pd.DataFrame]:
    """The shared verify's structure (`VERIFY_STRUCTURES`) whose mean held-out error is lowest (the
    mean: one that fits a few configurations wildly must not win on the typical one; a tie keeps the
    fewer terms), the mean of each, and the chosen one's `heldout_errors`."""
    judged = {name: heldout_errors(parts, terms) for name, terms in VERIFY_STRUCTURES.items()}
    mean = {name: float(e["rel_error"].abs().mean()) if len(e) else 0.0 for name, e in judged.items()}
    chosen = min(VERIFY_STRUCTURES, key=lambda name: (round(mean[name], 9), list(VERIFY_STRUCTURES).index(name)))
    return chosen, mean, judged[chosen]


def _decode(parts: pd.DataFrame) -> pd.Series:
    return parts["draft_s"] + parts["verify_s"] + parts["overhead_s"]


def on_bounds(calibrations: dict[str, StepCalibration], fitted: dict[str, tuple[Term, ...]]) -> list[str]:
    """A line per fitted term (`fitted`: method -> its own terms; "verify" -> the shared ones) that
    sits on a bound of `BOUNDS` (a scale at its limit), or at 0 where a host cost was pushed below what
    is possible."""
    lines = []
    for method, terms in fitted.items():
        c = calibrations[method] if method in calibrations else next(iter(calibrations.values()))
        for term in terms:
            value, (lo, hi) = getattr(c, term.field), term.bounds
            if np.isclose(value, lo, rtol=0, atol=1e-12) or (np.isfinite(hi) and np.isclose(value, hi, rtol=1e-9)):
                lines.append(f"{method}.{term.field} = {value:.4g} on its bound [{lo:g}, {hi:g}]")
    return lines


def fit_batch_engine(profile, runs: list[StepRun]) -> dict:
    """The Profile's "engine" section (batching "padded") from BatchStepTrace runs (`batch_steps` frames)."""
    if not runs:
        raise InputError("the batch engine calibration needs at least one BatchStepTrace")
    if any("batch" not in run.frame for run in runs):
        raise InputError("the batch engine calibration fits batch steps (calibrate.batch_engine.batch_steps)")
    parts, factors = normalised_parts(profile, runs)
    structure, mean, errors = verify_structure(parts)
    verify_terms = VERIFY_STRUCTURES[structure]
    per, pooled = fit_batch_calibrations(parts, verify_terms)
    fitted = {"verify (shared)": verify_terms,
              **{m: fitted_terms(_columns(g)) for m, g in parts.groupby("method", sort=True)}}
    abs_err = errors["rel_error"].abs()
    plain = parts[parts["method"] == BASELINE]
    reference = {str(d): {"ar_step_s": float(_decode(g[g["max_batch"] == 1]).mean()) if (g["max_batch"] == 1).any()
                          else float("nan"), "ctx_len": float(g["ctx_len"].mean()), "steps": int(len(g)),
                          "by_batch": {str(b): round(float(_decode(h).mean()), 6) for b, h in g.groupby("max_batch")}}
                 for d, g in plain.groupby("dataset", sort=True)}
    return {
        "batching": PADDED,
        "methods": {m: c.to_dict() for m, c in per.items()},
        "pooled": pooled.to_dict(),
        "fit": {"reference": reference, "drift": drift.summary(factors), "steps": int(len(parts)),
                "configs": sorted(parts["config"].unique().tolist()),
                "batches": sorted(int(b) for b in parts["max_batch"].unique()),
                "structure": {"chosen": f"padded batch: verify shared ({structure}), draft, overhead and prefill "
                                        "per method with per-row and per-padded-token host terms (calibrate.batch_engine)",
                              "verify": structure, "heldout_mean": {k: round(v, 5) for k, v in mean.items()}},
                "bounds": {k: list(v) for k, v in BOUNDS.items()} | {"other terms": [0.0, None]},
                "warnings": on_bounds(per, fitted),
                "heldout": {"scheme": "leave one configuration out (all its batches); decode throughput over plain "
                                      "decoding at each batch, at measured tokens",
                            "speedup_error_median": float(abs_err.median()) if len(errors) else 0.0,
                            "speedup_error_p90": float(abs_err.quantile(0.9)) if len(errors) else 0.0,
                            "speedup_error_max": float(abs_err.max()) if len(errors) else 0.0,
                            "per_config": {f"{r.dataset} | {r.config} | B{r.batch}": round(float(r.rel_error), 5)
                                           for r in errors.itertuples()}}},
    }
