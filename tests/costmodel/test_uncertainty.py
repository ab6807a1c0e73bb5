"""Prediction intervals and the prompts a comparison needs (`costmodel.uncertainty`)."""
from __future__ import annotations

import numpy as np
import pytest

from costmodel import uncertainty


def test_a_prompt_strays_only_in_what_the_drafts_add():
    assert uncertainty.prompt_sd([1.0, 2.0, 4.0], 0.4) == pytest.approx([0.0, 0.2, 0.3])


def test_the_half_width_adds_the_model_error_and_the_prompt_sampling_in_quadrature():
    z = uncertainty.Z90
    assert uncertainty.half_width(0.1, 0.2, 4) == pytest.approx(np.hypot(0.1, z * 0.2 / 2))
    assert uncertainty.half_width(0.1, 0.2, 4, 12) == pytest.approx(np.hypot(0.1, z * 0.2 * np.sqrt(1 / 4 + 1 / 12)))
    # a deployment's long run: only the calibration's own sampling is left beside the model error
    assert uncertainty.half_width(0.1, 0.2, None, 16) == pytest.approx(np.hypot(0.1, z * 0.2 / 4))
    assert uncertainty.half_width(0.1, np.nan, 4) == pytest.approx(0.1)        # no spread recorded


def test_the_interval_holds_the_measurements_whose_relative_error_is_within_the_half_width():
    low, high = uncertainty.interval(1.5, 0.2)
    assert 1.5 / low - 1 == pytest.approx(0.2) and 1.5 / high - 1 == pytest.approx(-0.2)
    assert uncertainty.interval(1.5, 1.2)[1] == np.inf


def test_prompts_needed_grow_with_the_spread_and_shrink_with_the_gap():
    z = uncertainty.Z90
    assert uncertainty.prompts_to_resolve(1.2, 0.3) == np.ceil((z * 0.3 / np.log(1.2)) ** 2)
    assert uncertainty.prompts_to_resolve(1 / 1.2, 0.3) == uncertainty.prompts_to_resolve(1.2, 0.3)
    assert uncertainty.prompts_to_resolve(1.05, 0.3) > uncertainty.prompts_to_resolve(1.2, 0.3)
    assert uncertainty.prompts_to_resolve(3.0, 0.01) == 1
    assert uncertainty.prompts_to_resolve(1.0, 0.3) == np.inf
