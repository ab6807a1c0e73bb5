"""calibrate.batch_engine: batch steps from a BatchStepTrace, the padded fit recovering the terms it was
built from, its prediction equal to costmodel.step's price of the same step, and terms on a bound named."""
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from calibrate.batch_engine import (OVERHEAD, PROPOSING, VERIFY, batch_steps, fit_batch_calibrations, on_bounds,
                                    predict_batch_parts, verify_structure)
from costmodel.step import (PADDED, DraftPart, StepCalibration, StepShape, chain_width, draft_seconds,
                            prefill_seconds, step_cost, verify_seconds)


def latency(model, n_tokens, ctx, batch=1):
    n, c = np.asarray(n_tokens, float), np.asarray(ctx, float)
    return (0.02 if model == "t" else 0.002) + 1e-3 * n * batch + 1e-6 * c * batch


TRUE = {"ar": StepCalibration(verify_scale=1.1, verify_fixed_s=2e-3, verify_per_row_s=4e-4, verify_per_token_s=1e-4,
                              draft_per_row_s=5e-5, overhead_s=1e-3, overhead_per_row_s=3e-4),
        "sd": StepCalibration(verify_scale=1.1, verify_fixed_s=2e-3, verify_per_row_s=4e-4, verify_per_token_s=1e-4,
                              draft_scale=1.3, draft_per_forward_s=5e-4, draft_per_row_forward_s=1e-4,
                              draft_per_row_s=5e-5, overhead_s=1e-3, overhead_per_row_s=3e-4,
                              overhead_per_token_s=2e-5)}


def parts_of(method: str, gamma: int, batch: int, ctx: float) -> dict:
    shape = StepShape("t", np.array([gamma + 1.0]), (DraftPart("d"),) if gamma else (), chain_width([gamma]))
    prior_draft = draft_seconds(latency, shape, ctx, batch)[0] if gamma else 0.0
    prior_verify = verify_seconds(latency, shape, ctx, batch)[0]
    return {"method": method, "config": f"{method} g{gamma}", "dataset": "d", "prior_draft": prior_draft,
            "prior_verify": prior_verify, "drafted": float(gamma > 0), "forwards": float(gamma), "first": 0.0,
            "rows": float(batch), "verify_tokens": gamma + 1.0, "ctx_len": ctx, "accepted": float(batch),
            "joined": 0.0, "joined_tokens": 0.0, "prefill_s": 0.0,
            "draft_s": 0.0, "verify_s": 0.0, "overhead_s": 0.0}


def priced(calibration: StepCalibration, gamma: int, batch: int, ctx: float):
    raw = StepShape("t", np.array([gamma + 1.0]), (DraftPart("d"),) if gamma else (), chain_width([gamma]))
    return step_cost(latency, replace(calibration.apply(raw), batching=PADDED), ctx, batch)


def synthetic(true: dict[str, StepCalibration] = TRUE) -> pd.DataFrame:
    rows = []
    for method, gammas in (("ar", (0,)), ("sd", (1, 3))):
        for gamma in gammas:
            for batch in (1, 2, 4, 8, 16):
                for ctx in (100.0, 300.0):
                    cost = priced(true[method], gamma, batch, ctx)
                    rows.append({**parts_of(method, gamma, batch, ctx), "draft_s": cost.draft_s[0],
                                 "verify_s": cost.verify_s[0], "overhead_s": cost.overhead_s[0], "max_batch": batch})
    return pd.DataFrame(rows)


def test_the_fit_prices_a_padded_step_as_costmodel_step_does():
    parts = synthetic()
    for method, c in TRUE.items():
        own = parts[parts["method"] == method]
        expected = [priced(c, int(g), int(b), x).total[0] for g, b, x in zip(own["forwards"], own["rows"], own["ctx_len"])]
        assert predict_batch_parts(c, own) == pytest.approx(expected, rel=1e-9)


def test_the_padded_fit_recovers_the_terms_it_was_built_from():
    parts = synthetic()
    per, pooled = fit_batch_calibrations(parts)
    assert per["sd"].verify_scale == pytest.approx(1.1, rel=0.02) and per["sd"].draft_scale == pytest.approx(1.3, rel=0.05)
    for method, c in TRUE.items():
        own = parts[parts["method"] == method]
        assert predict_batch_parts(per[method], own) == pytest.approx(predict_batch_parts(c, own), rel=0.01)


def test_prefill_is_fitted_per_joined_request():
    parts = synthetic()
    joined = parts.index % 3 == 0
    lengths = np.where(joined, 100 + 10 * parts.index, 0).astype(float)
    parts = parts.assign(joined=joined.astype(float), joined_tokens=lengths,
                         prefill_s=np.where(joined, 0.01 + 2e-3 * lengths, 0.0))
    per, _ = fit_batch_calibrations(parts)
    assert per["sd"].prefill_per_token_s == pytest.approx(2e-3, rel=0.01)
    shape = per["sd"].apply(StepShape("t", np.array([2.0])))
    assert prefill_seconds(shape, np.array([150.0, 400.0])) == pytest.approx([0.31, 0.81], rel=0.01)


def test_terms_on_a_bound_are_named():
    fitted = StepCalibration(verify_scale=2.5, overhead_per_row_s=0.0, overhead_s=1e-3, overhead_per_token_s=1e-5,
                             verify_fixed_s=1e-3, verify_per_row_s=1e-4, verify_per_token_s=1e-5, draft_per_row_s=1e-5)
    lines = on_bounds({"ar": fitted}, {"verify (shared)": VERIFY, "ar": (*PROPOSING, *OVERHEAD)})
    assert lines == ["verify (shared).verify_scale = 2.5 on its bound [0.5, 2.5]",
                     "ar.overhead_per_row_s = 0 on its bound [0, inf]"]      # the draft terms ar has no forwards for: not fitted


def test_batch_steps_take_the_widest_tree_and_the_longest_row():
    frame = pd.DataFrame({"run_id": "r", "method": "sd", "config": "{}", "step": [0, 0, 1, 1], "batch": 2,
                          "request_id": ["a", "b", "a", "b"], "ctx_len": [10, 30, 12, 33], "draft_forwards": 2,
                          "verify_tokens": [3, 3, 3, 3], "verify_width": 3, "accepted": [2, 3, 1, 2],
                          "joined": [True, True, False, False], "draft_s": 0.01, "verify_s": 0.02, "overhead_s": 0.003,
                          "prefill_s": [0.5, 0.5, 0.0, 0.0], "pair": 4})
    steps = batch_steps(frame)
    assert list(steps["ctx_len"]) == [30, 33] and list(steps["accepted"]) == [5, 3]
    assert list(steps["joined"]) == [2, 0] and list(steps["joined_tokens"]) == [40, 0]
    assert list(steps["prompt_id"]) == ["batch 2"] * 2


def test_the_verify_keeps_the_terms_that_predict_held_out_configurations():
    """Steps whose verify pays per row keep the per-row term (the shorter lines misprice a held-out
    configuration; here a padded token's cost is the table's own, so its term adds nothing); steps whose
    verify is the scaled forward and a fixed cost keep those two (the longer lines fit as well, and the
    tie keeps the fewer terms)."""
    chosen, mean, errors = verify_structure(synthetic())
    assert chosen == "scale, fixed and per row" and errors["rel_error"].abs().max() < 0.01
    assert mean["scale and fixed"] > 3 * mean[chosen]
    plain = {m: replace(c, verify_per_row_s=0.0, verify_per_token_s=0.0) for m, c in TRUE.items()}
    chosen, mean, _ = verify_structure(synthetic(plain))
    assert chosen == "scale and fixed" and mean["scale"] > mean["scale and fixed"]
