"""Leviathan chain closed forms and Lookahead Eq. 5, each checked against a Monte Carlo of its process.

Tolerance: 5 standard errors of the Monte Carlo mean (sample std / sqrt(n)), so a correct formula
fails with probability ~1e-6 and a wrong one by more than a few percent fails for sure.
"""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from costmodel import leviathan, multiseq

N_SAMPLES = 200_000


def _chain_mc(rng, accept_probs, n):
    """Tokens per step of a chain: accept position i w.p. accept_probs[i] until the first rejection, +1 bonus."""
    draws = rng.random((n, len(accept_probs))) < np.asarray(accept_probs)
    accepted = np.cumprod(draws, axis=1).sum(axis=1)
    return accepted + 1.0


def _assert_within(sample, predicted, sigmas=5.0):
    se = sample.std(ddof=1) / np.sqrt(sample.size)
    assert abs(sample.mean() - predicted) <= sigmas * se + 1e-12, (sample.mean(), predicted, se)


@pytest.mark.parametrize("alpha,gamma", [(0.3, 1), (0.516, 5), (0.8, 8), (0.95, 12)])
def test_expected_tokens_matches_monte_carlo(alpha, gamma):
    rng = np.random.default_rng(0)
    sample = _chain_mc(rng, [alpha] * gamma, N_SAMPLES)
    _assert_within(sample, float(leviathan.expected_tokens(alpha, gamma)))


def test_position_dependent_form_matches_monte_carlo():
    rng = np.random.default_rng(1)
    beta = [0.9, 0.75, 0.6, 0.5, 0.3]
    sample = _chain_mc(rng, beta, N_SAMPLES)
    _assert_within(sample, float(leviathan.expected_tokens_by_position(beta)))
    assert leviathan.expected_tokens_by_position(beta, gamma=2) == pytest.approx(1 + 0.9 + 0.9 * 0.75)


def _generation_mc(rng, accept_probs, new_tokens, n):
    """Tokens per step of generations that stop after `new_tokens`: steps of `_chain_mc` until the
    output is complete, the last one clipped (as the engine cuts it)."""
    steps = np.empty(n)
    for g in range(n):
        committed, count = 0, 0
        while committed < new_tokens:
            committed += int(_chain_mc(rng, accept_probs, 1)[0])
            count += 1
        steps[g] = count
    return steps


@pytest.mark.parametrize("alpha,gamma,new_tokens", [(0.1, 1, 32), (0.8, 8, 32), (0.95, 16, 32), (0.6, 4, 7)])
def test_generation_tokens_matches_monte_carlo_of_clipped_generations(alpha, gamma, new_tokens):
    rng = np.random.default_rng(3)
    steps = _generation_mc(rng, [alpha] * gamma, new_tokens, 20_000)
    predicted = float(leviathan.expected_tokens_by_position([alpha] * gamma, new_tokens=new_tokens))
    _assert_within(steps, new_tokens / predicted)          # E[steps] = new_tokens / tokens per step


def test_generation_tokens_steady_state_and_limits():
    beta = np.array([0.9, 0.75, 0.6])
    reach = np.cumprod(beta)
    steady = leviathan.generation_tokens(reach)
    assert steady == pytest.approx(float(leviathan.expected_tokens_by_position(beta)))
    short = [float(leviathan.generation_tokens(reach, n)) for n in (1, 8, 64, 4096)]
    assert short[0] == 1.0                                 # one token: one step, whatever it drafts
    assert short == sorted(short) and short[-1] == pytest.approx(steady, rel=1e-3)
    batch = leviathan.generation_tokens(np.stack([reach, reach * 0.5]), 32)
    assert batch[0] == pytest.approx(leviathan.generation_tokens(reach, 32))
    with pytest.raises(ValueError, match="non-increasing"):
        leviathan.generation_tokens([0.3, 0.5], 32)
    with pytest.raises(ValueError, match="new_tokens"):
        leviathan.generation_tokens(reach, 0)


def _renewal_tokens(reach, new_tokens):
    """new_tokens / E[steps] of one row by the plain renewal sum, every n < new_tokens summed."""
    p = -np.diff(np.concatenate([[1.0], reach, [0.0]]))           # P(X = j), j = 1..G + 1
    u = np.zeros(new_tokens)
    u[0] = 1.0
    for n in range(1, new_tokens):
        u[n] = sum(p[j - 1] * u[n - j] for j in range(1, min(n, p.size) + 1))
    return new_tokens / u.sum()


def test_generation_tokens_rows_are_independent_and_match_the_plain_renewal_sum():
    """Each row as the plain sum gives it (the settled rows' closed-form tail included), and a row's
    value does not depend on the rows beside it: the in-place loop drops settled rows mid-way."""
    rng = np.random.default_rng(3)
    reach = np.cumprod(rng.uniform(0.2, 1.0, (300, 9)), axis=1)
    reach[:20] = 1.0                                   # every draft accepted: never settles early
    reach[20:40] = 0.0
    together = leviathan.generation_tokens(reach, 256)
    alone = np.array([float(leviathan.generation_tokens(row, 256)) for row in reach])
    assert np.array_equal(together, alone)
    plain = np.array([_renewal_tokens(row, 256) for row in reach[::15]])
    np.testing.assert_allclose(together[::15], plain, rtol=1e-12)


@pytest.mark.parametrize("alpha,gamma,b", [(0.425, 4, 15), (0.6, 3, 1), (0.3, 6, 4), (0.8, 2, 30)])
def test_eq5_matches_monte_carlo_of_b_sequences(alpha, gamma, b):
    rng = np.random.default_rng(2)
    draws = rng.random((N_SAMPLES // 4, b, gamma)) < alpha
    longest = np.cumprod(draws, axis=2).sum(axis=2).max(axis=1)
    _assert_within(longest + 1.0, float(multiseq.expected_tokens_multiseq(alpha, gamma, b)))


@settings(deadline=None, max_examples=60)
@given(st.floats(0, 1), st.integers(1, 16))
def test_eq5_with_one_sequence_is_eq4(alpha, gamma):
    assert multiseq.expected_tokens_multiseq(alpha, gamma, 1) == pytest.approx(leviathan.expected_tokens(alpha, gamma))


@settings(deadline=None, max_examples=60)
@given(st.floats(0.0, 1.0), st.integers(1, 12))
def test_inverse_and_vllm_rate_round_trip(alpha, gamma):
    tau = leviathan.expected_tokens(alpha, gamma)
    assert leviathan.alpha_from_expected_tokens(tau, gamma) == pytest.approx(alpha, abs=1e-9)
    rate = leviathan.vllm_rate(alpha, gamma)
    assert 0.0 <= rate <= 1.0
    assert leviathan.alpha_from_vllm_rate(rate, gamma) == pytest.approx(alpha, abs=1e-9)


def test_speedup_is_glide_formula_and_vectorised():
    alpha = np.array([[0.516], [0.648]])
    gamma = np.array([1, 5, 8])
    out = leviathan.speedup(alpha, gamma, 0.077)
    assert out.shape == (2, 3)
    assert out[0, 1] == pytest.approx((1 - 0.516**6) / (0.484 * (5 * 0.077 + 1)))
    assert leviathan.expected_tokens(1.0, 4) == 5.0


def test_optimal_gamma_is_the_argmax_of_a_brute_force_scan():
    alphas, costs = np.meshgrid(np.linspace(0.05, 0.99, 15), np.linspace(0.0, 0.5, 7))
    best_g, best_s = leviathan.optimal_gamma(alphas, costs, max_gamma=20)
    for a, c, g, s in zip(alphas.ravel(), costs.ravel(), best_g.ravel(), best_s.ravel()):
        scan = [float(leviathan.speedup(a, k, c)) for k in range(1, 21)]
        assert g == 1 + int(np.argmax(scan)) and s == pytest.approx(max(scan))


def test_speedup_from_latency_accepts_callables_and_arrays():
    table = 0.02 + 0.0001 * np.arange(64)
    via_array = leviathan.speedup_from_latency(3.0, 4, np.full(64, 0.002), table)
    via_callable = leviathan.speedup_from_latency(3.0, 4, lambda n: 0.002 + 0 * n, lambda n: 0.02 + 0.0001 * n)
    expected = 3.0 * table[1] / (4 * 0.002 + table[5])
    assert via_array == pytest.approx(expected) and via_callable == pytest.approx(expected)
    with pytest.raises(ValueError, match="latency array covers"):
        leviathan.speedup_from_latency(3.0, 70, np.full(64, 0.002), table)


@pytest.mark.parametrize("call,match", [
    (lambda: leviathan.expected_tokens(1.2, 3), r"alpha must lie in \[0, 1\]; got 1.2"),
    (lambda: leviathan.expected_tokens(-0.1, 3), "alpha must lie in"),
    (lambda: leviathan.expected_tokens(np.nan, 3), "alpha must lie in"),
    (lambda: leviathan.expected_tokens(0.5, 0), "gamma must be an integer >= 1; got 0"),
    (lambda: leviathan.expected_tokens(0.5, 2.5), "gamma must be an integer >= 1; got 2.5"),
    (lambda: multiseq.expected_tokens_multiseq(0.5, 3, 0), "b must be an integer >= 1"),
    (lambda: leviathan.speedup(0.5, 3, -1), "c must be a finite number >= 0"),
    (lambda: leviathan.alpha_from_expected_tokens(7.0, 5), r"tau must lie in \[1, gamma \+ 1\]"),
])
def test_bad_input_is_one_clear_line(call, match):
    with pytest.raises(ValueError, match=match) as info:
        call()
    assert "\n" not in str(info.value)
