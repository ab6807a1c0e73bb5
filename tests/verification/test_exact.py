"""Exact mode: every built-in rule is exactly lossless; every mutant is caught on some case."""
from fractions import Fraction as F

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from common.errors import InputError
from verification import exact
from verification.cases import RULES, PositionCase, SequenceCase, normalise_weights, random_position_case
from verification.mutants import MUTANTS

POSITION_RULES = [name for name, rule in RULES.items() if rule.kind == "position"]
SEQUENCE_RULES = [name for name, rule in RULES.items() if rule.kind == "sequence"]


@st.composite
def position_cases(draw):
    vocab = draw(st.integers(1, 5))
    weights = st.lists(st.integers(0, 3), min_size=vocab, max_size=vocab).filter(lambda w: sum(w) > 0)
    p_w = draw(weights)
    q_w = draw(st.one_of(weights, st.just(p_w), st.sampled_from([[int(i == j) for i in range(vocab)] for j in range(vocab)])))
    return PositionCase(normalise_weights(p_w, "p"), normalise_weights(q_w, "q"), draw(st.integers(1, 4)))


@settings(deadline=None, max_examples=60)
@given(position_cases())
def test_position_rules_are_exactly_lossless(case):
    for name in POSITION_RULES:
        result = exact.exact_check(RULES[name].sampler, case, case.target())
        assert result.passed, (name, case, result.tv, result.error)


@settings(deadline=None, max_examples=6)
@given(st.integers(2, 3), st.integers(1, 2), st.sampled_from([(1,), (2,), (1, 1), (2, 1)]), st.integers(0, 10_000))
def test_sequence_rules_are_exactly_lossless(vocab, length, shape, seed):
    case = SequenceCase(vocab, length, shape, seed)
    for name in SEQUENCE_RULES:
        rule = RULES[name]
        result = exact.exact_check(rule.sampler, case, rule.target(case))
        assert result.passed, (name, case, result.tv, result.error)


def test_every_mutant_is_caught_on_some_case():
    rng = np.random.default_rng(0)
    positions = [random_position_case(rng, int(rng.integers(2, 5)), int(rng.integers(2, 4))) for _ in range(25)]
    sequences = [SequenceCase(3, 3, (1, 1), seed) for seed in range(2)]
    for name, mutant in MUTANTS.items():
        cases = positions if mutant.kind == "position" else sequences
        tvs = [exact.exact_check(mutant.sampler, c, mutant.target(c)).tv for c in cases]
        assert max(tvs) > 0, f"mutant {name} was not caught"


def test_symbolic_uniform_splits_intervals_exactly():
    def two_thirds(case, rng):
        u = rng.uniform()
        if u < F(1, 3):
            return "low"
        return "mid" if 2 * u - F(2, 3) <= F(2, 3) else "high"  # u <= 2/3

    law, paths = exact.exact_law(two_thirds, None)
    assert law == {"low": F(1, 3), "mid": F(1, 3), "high": F(1, 3)} and paths == 3
    with pytest.raises(InputError, match="converted a uniform to float"):
        exact.exact_law(lambda case, rng: float(rng.uniform()) < 0.5, None)
    result = exact.exact_check(lambda case, rng: 1 / 0, None, {0: 1})
    assert not result.passed and "ZeroDivisionError" in result.error
    assert exact.tv_distance({0: F(1, 2), 1: F(1, 2)}, {0: 1}) == F(1, 2)
