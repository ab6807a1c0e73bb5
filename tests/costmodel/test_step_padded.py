"""costmodel.step with a padded batch (`batching` "padded"): the widest of B rows' trees, per-row host
work and per-token work on every padded token, and a fitted prefill; an unbatched shape is unchanged."""
from dataclasses import replace

import numpy as np
import pytest

from costmodel.step import (PADDED, StepCalibration, StepShape, padded_widths, prefill_seconds, step_cost,
                            verify_seconds)


def linear(model, n_tokens, ctx, batch=1):
    """A latency linear in the tokens of every row: 10 ms + 1 ms per query token per row."""
    return 0.010 + 0.001 * np.asarray(n_tokens, float) * batch + 0.0 * np.asarray(ctx, float)


def test_the_widest_of_b_rows_follows_f_to_the_b():
    tokens, prob = np.array([[1.0, 5.0]]), np.array([[0.7, 0.3]])
    for batch in (1, 2, 8):
        t, p = padded_widths(tokens, prob, batch)
        assert p[0, 1] == pytest.approx(1 - 0.7 ** batch) and p.sum() == pytest.approx(1.0)
    t, p = padded_widths(np.array([[3.0, 1.0, 2.0]]), np.array([[0.2, 0.5, 0.3]]), 3)   # sorted first
    assert list(t[0]) == [1.0, 2.0, 3.0] and p[0] == pytest.approx([0.125, 0.8 ** 3 - 0.125, 1 - 0.8 ** 3])


def test_a_padded_verify_runs_at_the_expected_widest_tree():
    dist = (np.array([[1.0, 5.0]]), np.array([[0.7, 0.3]]))
    shape = StepShape("t", np.array([2.2]), verify_dist=dist)
    padded = replace(shape, batching=PADDED)
    for batch in (1, 4):
        share = 1 - 0.7 ** batch
        widest = (1 - share) * 1 + share * 5
        assert verify_seconds(linear, padded, 100.0, batch)[0] == pytest.approx(0.010 + 0.001 * widest * batch)
        assert verify_seconds(linear, shape, 100.0, batch)[0] == pytest.approx(0.010 + 0.001 * 2.2 * batch)
    realised = verify_seconds(linear, padded, 100.0, 4, verify_tokens=np.array([3.0]))   # a step's own width
    assert realised[0] == pytest.approx(0.010 + 0.001 * 3 * 4)


def test_row_and_token_terms_pay_per_row_only_where_padded():
    calibration = StepCalibration(verify_per_row_s=1e-3, draft_per_row_s=2e-3, draft_per_row_forward_s=3e-3,
                                  overhead_per_row_s=4e-3, overhead_per_token_s=5e-4, overhead_s=1e-2)
    shape = calibration.apply(StepShape("t", np.array([3.0]), draft_width=np.ones((1, 2), np.int64),
                                        draft_parts=()))
    padded = replace(shape, batching=PADDED)
    one = step_cost(linear, padded, 50.0, 1)
    four = step_cost(linear, padded, 50.0, 4)
    assert four.overhead_s[0] - one.overhead_s[0] == pytest.approx(3 * 4e-3)
    assert four.draft_s[0] - one.draft_s[0] == pytest.approx(3 * (2e-3 + 2 * 3e-3))
    forward = linear("t", 3, 50.0, 4) - linear("t", 3, 50.0, 1)
    assert four.verify_s[0] - one.verify_s[0] == pytest.approx(forward + 3 * (1e-3 + 3 * 5e-4))
    plain = step_cost(linear, shape, 50.0, 4)      # not padded: the forwards' row terms once per step,
    assert plain.overhead_s[0] == pytest.approx(1e-2 + 4 * 4e-3)     # the host work per row at every row
    assert plain.verify_s[0] == pytest.approx(linear("t", 3, 50.0, 4) + 1e-3 + 3 * 5e-4)


def test_row_and_prefill_terms_are_written_only_where_fitted():
    assert "verify_per_row_s" not in StepCalibration().to_dict()
    assert "prefill_per_token_s" not in StepCalibration(verify_scale=1.1).to_dict()
    fitted = StepCalibration(overhead_per_row_s=2e-4, prefill_per_request_s=0.01, prefill_per_token_s=3e-3)
    assert StepCalibration.from_dict(fitted.to_dict()) == fitted
    shape = fitted.apply(StepShape("t", np.array([1.0])))
    assert prefill_seconds(StepShape("t", np.array([1.0])), 100) is None        # not fitted: the target's forward
    assert prefill_seconds(shape, np.array([100, 200])) == pytest.approx([0.01 + 0.3, 0.01 + 0.6])
