"""Lookahead, CORAL, Kangaroo and goodput closed forms against Monte Carlo simulations of their processes.

Tolerance: 5 standard errors of the Monte Carlo mean.
"""
import numpy as np
import pytest

from costmodel import coral, goodput, kangaroo, leviathan, lookahead

N = 200_000


def _assert_within(sample, predicted, sigmas=5.0):
    sample = np.asarray(sample, dtype=float)
    se = sample.std(ddof=1) / np.sqrt(sample.size)
    assert abs(sample.mean() - predicted) <= sigmas * se + 1e-12, (sample.mean(), predicted, se)


def _chain(rng, alpha, gamma, n):
    return np.cumprod(rng.random((n, gamma)) < alpha, axis=1).sum(axis=1) + 1.0


@pytest.mark.parametrize("alpha,f,n,w,g", [(0.425, 3.106, 5, 15, 15), (0.6, 2.0, 4, 5, 3), (0.3, 1.0, 7, 10, 20)])
def test_lookahead_compression_matches_good_and_bad_steps_simulation(alpha, f, n, w, g):
    rng = np.random.default_rng(7)
    good = rng.random(N // 4) < 1.0 / f
    draws = rng.random((N // 4, g, n - 1)) < alpha
    longest = np.cumprod(draws, axis=2).sum(axis=2).max(axis=1) + 1.0
    tokens = np.where(good, longest, 1.0)
    _assert_within(tokens, float(lookahead.compression_ratio(alpha, f, n, w, g)))


def test_lookahead_input_tokens_speedup_and_fit():
    assert list(lookahead.input_tokens_per_step(5, [15, 10, 7], [15, 10, 7])) == [120, 80, 56]
    lat = lambda k: 0.02 + 1e-4 * k  # noqa: E731
    s = lookahead.compression_ratio(0.425, 3.106, 5, 15, 15)
    assert lookahead.walltime_speedup(0.425, 3.106, 5, 15, 15, lat) == pytest.approx(s * lat(1) / lat(120))
    n, g = np.array([5, 5, 7, 10, 4]), np.array([15, 5, 10, 3, 30])
    alpha, f, err = lookahead.fit_alpha_f(lookahead.compression_ratio(0.425, 3.106, n, g, g), n, g, g)
    assert alpha == pytest.approx(0.425, abs=2e-3) and f == pytest.approx(3.106, abs=2e-2) and err < 1e-3
    with pytest.raises(ValueError, match="N .* must be >= 2"):
        lookahead.compression_ratio(0.4, 2, 1, 3, 3)
    with pytest.raises(ValueError, match="f .* must be >= 1"):
        lookahead.compression_ratio(0.4, 0.5, 5, 3, 3)


def test_coral_router_tau_matches_chain_with_recall_and_equations_agree():
    rng = np.random.default_rng(8)
    tau, gamma, recall = 4.0, 6, 0.9
    alpha = float(leviathan.alpha_from_expected_tokens(tau, gamma))
    _assert_within(_chain(rng, alpha * recall, gamma, N), float(coral.tau_with_router(tau, gamma, recall)))
    # Eq. 6 is Eq. 1 with latencies proportional to parameters.
    assert coral.speedup_eq6(4.9, 6, 741, 7157) == pytest.approx(coral.speedup_eq1(4.9, 6, 741 / 7157, 1.0))
    # The paper's worked example: tau/SR ~ 1.6 ideal, ~ 1.8 with L_t' = 1.19 L_t (draft ~ 10% of target).
    assert 4.9 / coral.speedup_eq1(4.9, 6, 0.1, 1.0) == pytest.approx(1.6)
    assert 4.9 / coral.speedup_eq1(4.9, 6, 0.1, 1.0, 1.19) == pytest.approx(1.79)
    head = coral.router_head_params(4096, 128256, 16, 2)
    assert head == pytest.approx(4096 * 128256 / 8 + 4096**2 + 16 * 4096)
    with pytest.raises(ValueError, match="top-n must not exceed"):
        coral.router_head_params(4096, 128256, 4, 8)


def test_kangaroo_ctar_and_early_exit_match_simulation():
    rng = np.random.default_rng(9)
    tokens = _chain(rng, 0.7, 6, N)
    for w in (1, 3, 5):
        _assert_within(tokens - 1 >= w, float(kangaroo.ctar(w, alpha=0.7)))
    assert kangaroo.ctar_empirical(tokens, [1, 3]) == pytest.approx(kangaroo.ctar([1, 3], alpha=0.7), abs=0.01)
    freq = np.array([0.05, 0.05, 0.05, 0.05, 0.1, 0.1, 0.1, 0.1, 0.15, 0.15, 0.1])
    hit = np.linspace(0.15, 0.97, 11)
    eta, gamma = 0.55, 6
    cont = kangaroo.continue_probability(eta)
    b = rng.choice(11, p=freq, size=(N, gamma))
    goes_on = rng.random((N, gamma)) < cont[b]
    matches = rng.random((N, gamma)) < hit[b]
    drafted_before = np.concatenate([np.ones((N, 1), bool), np.cumprod(goes_on, axis=1)[:, :-1].astype(bool)], axis=1)
    steps = drafted_before.sum(axis=1)
    accepted = np.cumprod(matches & drafted_before, axis=1).sum(axis=1) + 1
    pred_steps, pred_tokens = kangaroo.early_exit(freq, hit, eta, gamma)
    _assert_within(steps, float(pred_steps))
    _assert_within(accepted, float(pred_tokens))
    assert kangaroo.early_exit(freq, hit, 0.0, gamma)[1] == pytest.approx(leviathan.expected_tokens(freq @ hit, gamma))
    assert kangaroo.adapter_params(4096, 32000) == 4 * 4096**2 + 2 * 4096


def test_goodput_matches_a_simulated_batch_of_chains():
    rng = np.random.default_rng(10)
    batch, gamma, alpha = 8, 4, 0.6
    draft = lambda n: 0.001 + 1e-5 * n  # noqa: E731
    target = lambda n: 0.02 + 2e-5 * n  # noqa: E731
    steps = 20_000
    committed = _chain(rng, alpha, gamma, steps * batch).reshape(steps, batch).sum(axis=1)
    step_time = gamma * draft(batch) + target(batch * (gamma + 1))
    _assert_within(committed / step_time, float(goodput.goodput(batch, gamma, leviathan.expected_tokens(alpha, gamma),
                                                                draft, target)))
    table = target(np.arange(200))
    assert goodput.baseline_goodput(4, table) == pytest.approx(4 / target(4))
    assert goodput.speedup_at_batch(1, 4, 3.0, draft, target) == pytest.approx(
        leviathan.speedup_from_latency(3.0, 4, draft, target))


@pytest.mark.parametrize("mu", [0.0, 1e-9, 0.37, 3.0, 17.5, 60.0])
def test_lookaheads_poisson_is_scipys_to_the_last_digit(mu):
    """The candidate count's Poisson pmf and tail are scipy.stats.poisson's, computed without
    importing scipy.stats (a second per sweep worker): identical floats, 1 below the support."""
    from scipy.stats import poisson

    k = np.arange(-3, 150)
    assert np.array_equal(lookahead._poisson_pmf(k, mu), poisson.pmf(k, mu))
    assert np.array_equal(lookahead._poisson_sf(k, mu), poisson.sf(k, mu))
