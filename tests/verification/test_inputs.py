"""The verifier as a library for other people's samplers: inputs checked, floats made exact, path
counts estimated and bounded, memoised sub-states, randomness that bypasses rng detected."""
import itertools
import random
import time
from fractions import Fraction as F

import numpy as np
import pytest

from common.errors import InputError
from verification import exact, rules, statistical
from verification.cases import RULES, PositionCase, SequenceCase, on_demand, random_position_case
from verification.inputs import ExactConversionWarning

FLOAT_P, FLOAT_Q = [0.1, 0.2, 0.7], [0.5, 0.25, 0.25]


def my_sd(case, rng):
    """A user's speculative sampler on a (p, q) tuple case, written with the project's rules."""
    p, q = case
    return rules.mcss([rng.categorical(q)], p, q, rng).token


def test_float_case_and_target_are_converted_exactly_with_a_note():
    with pytest.warns(ExactConversionWarning, match="divided by their exact sum"):
        case = PositionCase(FLOAT_P, FLOAT_Q, 2)
    assert all(isinstance(x, F) for x in case.p + case.q) and sum(case.p) == 1
    assert exact.exact_check(RULES["mcss_with"].sampler, case, case.target()).passed
    with pytest.warns(ExactConversionWarning, match="case\\[0\\]"):
        result = exact.exact_check(my_sd, (FLOAT_P, FLOAT_Q), FLOAT_P)  # a target list over token ids
    assert result.passed and result.tv == 0 and any("target" in note for note in result.notes)
    with pytest.raises(InputError, match=r"case\[0\]\[0\] is the float 0.1"):
        exact.exact_check(my_sd, (FLOAT_P, FLOAT_Q), [F(1, 10), F(2, 10), F(7, 10)], floats="refuse")


def test_float_arithmetic_inside_the_sampler_is_named_in_the_notes():
    def float_ratio(case, rng):
        p, q = case
        x = rng.categorical(q)
        return x if rng.uniform() <= float(p[x]) / float(q[x]) else rng.categorical(rules.residual(p, q))
    case = ((F(1, 10), F(2, 10), F(7, 10)), (F(1, 2), F(1, 4), F(1, 4)))
    result = exact.exact_check(float_ratio, case, case[0])
    assert any("floats of its own arithmetic" in note for note in result.notes)


@pytest.mark.parametrize("sampler", [lambda case: 0, lambda p, q, rng: 0, "not callable"])
def test_a_wrong_sampler_signature_is_an_error_not_a_verdict(sampler):
    case = PositionCase((F(1, 2), F(1, 2)), (F(1, 2), F(1, 2)))
    with pytest.raises(InputError, match="must take \\(case, rng\\)|not callable"):
        exact.exact_check(sampler, case, case.target())
    with pytest.raises(InputError, match="must take \\(case, rng\\)|not callable"):
        statistical.statistical_check(sampler, case, [0.5, 0.5], n=10)


@pytest.mark.parametrize("target, message", [(5, "got int 5"), ("ab", "got str"), ({0: F(1, 2)}, "not exactly 1"),
                                              ([F(1, 2), F(-1, 2), 1], r"target\[1\]"), ([[1]], "vector of probabilities")])
def test_bad_targets_are_refused_in_one_line(target, message):
    case = PositionCase((F(1, 2), F(1, 2)), (F(1, 2), F(1, 2)))
    with pytest.raises(InputError, match=message):
        exact.exact_check(RULES["single_draft"].sampler, case, target)


def test_outcome_kinds_are_checked_in_both_modes():
    case = PositionCase((F(1, 2), F(1, 2)), (F(1, 4), F(3, 4)))
    def with_flag(c, rng):
        step = rules.mcss([rng.categorical(c.q)], c.p, c.q, rng)
        return step.token, step.accepted
    with pytest.raises(InputError, match=r"returned \(\d, (True|False)\) \(tuple\) but the target's outcomes are int"):
        exact.exact_check(with_flag, case, case.target())
    with pytest.raises(InputError, match=r"returned \(\d, (True|False)\) \(tuple\); outcomes must be token ids.*accept_rate"):
        statistical.statistical_check(with_flag, case, [0.5, 0.5], n=20)
    with pytest.raises(InputError, match="outcomes must be token ids"):
        statistical.statistical_check(lambda c, rng: 0.5, case, [0.5, 0.5], n=20)
    assert statistical.statistical_check(with_flag, case, [0.5, 0.5], n=2000, accept_rate=0.75, alpha=1e-3,
                                         beta=1e-3).passed


def test_path_estimate_refuses_before_enumerating():
    case = random_position_case(np.random.default_rng(0), 16, 4)  # ~26,000 paths without memo (about 45 s)
    start = time.perf_counter()
    with pytest.raises(InputError, match=r"about [\d.e+]+ paths .* exceed max_paths = 1000"):
        exact.exact_check(RULES["mcss_with"].sampler, case, case.target(), max_paths=1000)
    assert time.perf_counter() - start < 5
    def two_draws(case, rng):  # a balanced tree: Knuth's estimate is exact
        return rng.categorical([1, 1]), rng.categorical([1, 2, 3])
    assert exact.estimate_paths(two_draws, None) == (6, False) and exact.exact_law(two_draws, None)[1] == 6
    with pytest.raises(InputError, match="max_paths is 0"):
        exact.exact_law(RULES["single_draft"].sampler, case, max_paths=0)


def test_memo_gives_the_same_law_with_far_fewer_paths():
    case = random_position_case(np.random.default_rng(3), 6, 3)
    for name in ("single_draft", "mcss_with", "mcss_without"):
        full, full_paths = exact.exact_law(RULES[name].sampler, case)
        fast, fast_paths = exact.exact_law(RULES[name].sampler, case, memo=True)
        assert fast == full == case.target(), name
        assert fast_paths <= full_paths
    sequence = SequenceCase(3, 3, (2, 1), seed=4)
    for name in ("chain", "tree_with", "tree_without", "tree_one_hot"):
        full, full_paths = exact.exact_law(RULES[name].sampler, sequence)
        fast, fast_paths = exact.exact_law(RULES[name].sampler, sequence, memo=True)
        assert fast == full, name
        assert fast_paths < full_paths or name == "tree_one_hot", (name, fast_paths, full_paths)
    big = random_position_case(np.random.default_rng(0), 16, 4)  # the full enumeration takes ~45 s
    result = exact.exact_check(RULES["mcss_with"].sampler, big, big.target(), max_paths=1000, memo=True)
    assert result.passed and result.paths < 1000


def test_on_demand_drafting_has_the_law_of_drafting_all_k_first():
    case = PositionCase((F(1, 2), F(1, 4), F(1, 4), F(0)), (F(1, 8), F(1, 8), F(1, 4), F(1, 2)), 3)
    for replacement in (True, False):
        def eager(c, rng):
            return rules.mcss(rules.draft_candidates(c.q, c.k, rng, replacement), c.p, c.q, rng, replacement)
        def lazy(c, rng):
            return rules.mcss(on_demand(c.q, c.k, rng, replacement), c.p, c.q, rng, replacement)
        assert exact.exact_law(eager, case)[0] == exact.exact_law(lazy, case)[0]  # whole Steps: token, index


def test_a_memo_key_that_misses_state_is_caught():
    def lying(case, rng):
        first = rng.categorical([1, 1])
        rng.memo("same")  # wrong: the outcome depends on `first`
        return first + rng.categorical([1, 1])
    with pytest.raises(InputError, match="memo key 'same' does not fix the rest"):
        exact.exact_law(lying, None, memo=True)
    assert exact.exact_law(lying, None)[0] == {0: F(1, 4), 1: F(1, 2), 2: F(1, 4)}


def test_randomness_that_bypasses_rng_is_detected():
    with pytest.raises(InputError, match="drew from Python's random module instead of rng"):
        exact.exact_law(lambda case, rng: random.random() < 0.5, None)
    with pytest.raises(InputError, match=r"drew from numpy's global random state \(np.random.\*\) instead of rng"):
        exact.exact_law(lambda case, rng: rng.categorical([1, 1]) + int(np.random.random() < 0.5), None)
    calls = itertools.count()
    with pytest.raises(InputError, match="keeps state between calls"):
        exact.exact_law(lambda case, rng: next(calls) % 2 + rng.categorical([1, 1]), None)


def np_coin_sd(case, rng):
    """Speculative sampling whose accept coin alone comes from numpy's global state."""
    p, q = case
    x = rng.categorical(q)
    if np.random.uniform() < p[x] / q[x]:
        return x
    return rng.categorical([max(a - b, 0) for a, b in zip(p, q)])


def fresh_generator_coin_sd(case, rng):
    """The same with an unseeded generator of its own: no global state moves."""
    p, q = case
    x = rng.categorical(q)
    if np.random.default_rng().random() < p[x] / q[x]:
        return x
    return rng.categorical([max(a - b, 0) for a, b in zip(p, q)])


def _small_cases(count: int):
    weights = np.random.default_rng(1).integers(1, 21, size=(count, 2, 3))
    return [tuple(tuple(F(int(w), int(row.sum())) for w in row) for row in case) for case in weights]


def test_an_accept_coin_outside_rng_is_an_input_error_in_both_modes_never_a_verdict():
    """Before, on 15 of 200 such cases the probes happened to repeat and exact mode gave "lossy"."""
    for case in _small_cases(200):
        with pytest.raises(InputError, match="instead of rng"):
            exact.exact_check(np_coin_sd, case, case[0])
    refused = 0                     # a private generator moves no global state: the probes' replays catch it
    for case in _small_cases(20):
        try:
            assert not exact.exact_check(fresh_generator_coin_sd, case, case[0]).passed
        except InputError as exc:
            assert "does not come from rng" in str(exc)
            refused += 1
    assert refused >= 15
    case = _small_cases(1)[0]
    law = [float(x) for x in case[0]]
    with pytest.raises(InputError, match="instead of rng"):
        statistical.statistical_check(np_coin_sd, case, law, delta=0.05)
    with pytest.raises(InputError, match=r"does not come from rng .*run twice from the same rng state"):
        statistical.statistical_check(fresh_generator_coin_sd, case, law, delta=0.05)
    calls = itertools.count()
    with pytest.raises(InputError, match="keeps state between calls"):
        statistical.statistical_check(lambda c, rng: (next(calls) + rng.categorical([1, 1])) % 2, None, [0.5, 0.5])
    def batched_state(c, rng, n, box=[0]):
        box[0] += 1
        return (rng.integers(0, 2, n) + box[0]) % 2
    with pytest.raises(InputError, match="draw 0 with the same seed"):
        statistical.statistical_check(batched_state, None, [0.5, 0.5], batched=True)


@pytest.mark.parametrize("target, message", [
    ([float("nan"), 0.5, 0.5], r"target\[0\] is nan, not a probability"),
    ({0: 0.5, 1: float("nan")}, r"target\[1\] is nan"),
    ([0.5, float("inf")], r"target\[1\] is inf"),
    ([0.5, 0.6], "sum to 1.1, not 1"),
    ({"a": 1.0}, "keys must be token ids"),
    ([[0.5, 0.5]], "non-empty vector over token ids"),
])
def test_a_target_that_is_not_a_probability_vector_is_refused(target, message):
    """A NaN target compared false with everything: chi-square 0, a buggy sampler passed."""
    def always_zero(case, rng):
        return 0
    with pytest.raises(InputError, match=message):
        statistical.statistical_check(always_zero, None, target, n=100)


@pytest.mark.parametrize("n", [-5, 0, 2.5, True])
def test_n_must_be_a_positive_count(n):
    with pytest.raises(InputError, match=rf"statistical mode: n is {n!r}; it counts the draws per sampler"):
        statistical.statistical_check(lambda c, rng: rng.categorical([1, 1]), None, [0.5, 0.5], n=n)


def test_both_modes_estimate_their_run_time_and_refuse_past_max_seconds():
    """Exact mode: paths x seconds per path, from its probes (a vocabulary of 32,000 with a top-8
    draft passed the path estimate, 3.8e5 paths, and then ran for days); statistical mode: draws x
    seconds per draw, from its probe (6.2 million draws at vocabulary 32,000)."""
    def slow_two_draws(case, rng):
        time.sleep(0.002)
        return rng.categorical([1] * 10), rng.categorical([1] * 10)
    start = time.perf_counter()
    with pytest.raises(InputError, match=r"exact mode: about 100 paths at [\d.]+ ms each \(measured on 4 random "
                                         r"paths\) would take ~[\d.]+ s, past max_seconds = 0.05"):
        exact.exact_law(slow_two_draws, None, probes=4, max_seconds=0.05)
    assert time.perf_counter() - start < 1.0             # the probes only, not the 100 paths
    law, paths = exact.exact_law(slow_two_draws, None, probes=4, max_seconds=5)
    assert paths == 100
    def slow_draw(case, rng):
        time.sleep(0.0005)
        return rng.categorical([1, 1])
    with pytest.raises(InputError, match=r"statistical mode: n = 100,000 draws at [\d.e+]+ us each \(measured on "
                                         r"2,048\) would take ~[\d.]+ (s|min), past max_seconds = 10"):
        statistical.statistical_check(slow_draw, None, [0.5, 0.5], n=100_000, max_seconds=10)
    for bad in (0, -1.0, "soon"):
        with pytest.raises(InputError, match="max_seconds is"):
            exact.exact_law(slow_two_draws, None, max_seconds=bad)


def test_a_top8_draft_over_a_large_vocabulary_is_refused_by_its_time_not_its_paths():
    """A few thousand paths pass max_paths, but each runs the rule over the whole vocabulary in
    Fractions: the estimate (paths x seconds per path) refuses it in about a second."""
    from verification.cases import normalise_weights, random_weights

    rng = np.random.default_rng(0)
    case = PositionCase(normalise_weights(random_weights(rng, 2000, 3), "p"),
                        normalise_weights(random_weights(rng, 2000, 3), "q"), 8)
    start = time.perf_counter()
    with pytest.raises(InputError, match=r"exact mode: about [\d.e+]+ paths at [\d.]+ ms each .* past max_seconds = 60"):
        exact.exact_check(RULES["one_hot"].sampler, case, case.target(), probes=4, max_seconds=60)
    assert time.perf_counter() - start < 30
    assert exact.estimate_paths(RULES["one_hot"].sampler, case, probes=4)[0] < exact.DEFAULT_MAX_PATHS


def _raises(case, rng):
    raise ValueError("index 7 out of range")


def test_a_sampler_that_fails_is_named_in_both_modes_never_a_traceback_or_a_tv():
    """None returned is an InputError naming it; a sampler that raises is a failed check naming its
    exception (and, statistically, the draw); laws of one case with two lengths, and a token outside
    a vector target's vocabulary, are InputErrors rather than "lossy, TV 1" or "TV 0.6"."""
    with pytest.raises(InputError, match=r"statistical mode: the sampler returned None \(NoneType\)"):
        statistical.statistical_check(lambda c, rng: None, None, [0.5, 0.5], n=100)
    with pytest.raises(InputError, match="the batched sampler returned None; it must return 100 token ids"):
        statistical.statistical_check(lambda c, rng, n: None, None, [0.5, 0.5], n=100, batched=True)
    stat = statistical.statistical_check(_raises, None, [0.5, 0.5], n=100)
    assert not stat.passed and stat.reason == "the sampler raised ValueError: index 7 out of range (draw 0)"
    ex = exact.exact_check(_raises, None, {0: 1})
    assert not ex.passed and ex.error == "ValueError: index 7 out of range"
    short = ([F(1, 2), F(1, 4), F(1, 4)], [F(1, 2), F(1, 2)])
    for mode, check in (("exact", lambda: exact.exact_check(my_sd, short, short[0])),
                        ("statistical", lambda: statistical.statistical_check(my_sd, short, short[0], n=100))):
        with pytest.raises(InputError, match=rf"{mode} mode: case\[0\] has 3 probabilities and case\[1\] 2"):
            check()
    with pytest.raises(InputError, match=r"exact mode: the sampler returned token 2, outside the target's "
                                         r"vocabulary of 2 token ids \(0..1\)"):
        exact.exact_check(lambda c, rng: rng.categorical([1, 1]) + 2, None, [F(1, 2), F(1, 2)])
    with pytest.raises(InputError, match=r"statistical mode: the sampler returned token \d, outside the target's "
                                         r"vocabulary of 2 token ids"):
        statistical.statistical_check(lambda c, rng: int(rng.categorical([1, 1])) + 2, None, [0.5, 0.5], n=100)
