"""Lookahead's pool fill: the candidates a step verifies, fitted from StepTraces and priced."""
import numpy as np
import pytest

import methods
from calibrate.synthetic import synthetic_ngram_steps
from costmodel.lookahead import expected_candidates, expected_forward_tokens, fit_pool


def test_expected_candidates_is_the_capped_poisson_mean():
    rng = np.random.default_rng(0)
    draws = rng.poisson(1.3, 200_000)
    for g in (1, 2, 5, 40):
        assert expected_candidates(g, 1.3) == pytest.approx(np.minimum(g, draws).mean(), abs=0.01)
    assert expected_candidates(1, 1.3) == pytest.approx(1 - np.exp(-1.3))


def test_forward_tokens_full_pool_is_the_papers_count_and_fill_prices_fewer():
    assert expected_forward_tokens(3, 5, 5) == pytest.approx(1 + (5 + 5) * 2)
    assert expected_forward_tokens(2, 20, 40, pool=1.0) < 23          # not 61: the pool holds ~1
    with pytest.raises(ValueError, match="pool"):
        expected_candidates(3, float("nan"))


def test_fit_pool_recovers_the_fill_from_step_traces():
    configs = [methods.parse_label(f"lookahead W{w} N{n} G{g}") for w, n, g in ((5, 3, 1), (7, 4, 2), (13, 3, 6), (4, 2, 20))]
    frame, _ = synthetic_ngram_steps(0.5, 3.0, configs, n_steps=3000, seed=3, pool=1.3)
    fitted = methods.get("lookahead").fit_steps(frame, dataset="d", temperature=0.0, source="synthetic")
    assert fitted["lookahead"]["pool"] == pytest.approx(1.3, rel=0.05)
    assert fit_pool([0.5, 0.9], [1, 3]) == pytest.approx(fit_pool([0.5, 0.9], [1, 3]))
    assert methods.get("lookahead").acceptance_part(fitted["lookahead"], "t").pool == pytest.approx(1.3, rel=0.05)


def test_cape_verify_distribution_is_the_sum_of_independent_sets():
    from costmodel.cape import cape_verify_distribution, cape_verify_tokens

    freq = np.array([0.3, 0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.05, 0.05, 0.05, 0.1])
    bins = np.array([[8, 8, 4, 4, 4, 1, 1, 1, 1, 1, 1], [6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 2]])
    gamma = np.array([1, 3])
    tokens, prob = cape_verify_distribution(bins, freq, gamma)
    assert np.allclose(prob.sum(axis=1), 1.0)
    assert np.allclose((tokens * prob).sum(axis=1), 1 + cape_verify_tokens(bins, freq, gamma))
    rng = np.random.default_rng(1)                     # the simulator's draw: bins iid from freq
    drawn = 1 + bins[1][rng.choice(11, size=(100_000, 3), p=freq)].sum(axis=1)
    assert np.allclose(prob[1, :20], np.bincount(drawn, minlength=21)[1:21] / drawn.size, atol=0.005)
    # g1: one position, so the tokens are 1 + S of one bin: 9 with P(bins 0, 1), 5 with P(bins 2-4), 2 otherwise
    assert prob[0, 8] == pytest.approx(0.4) and prob[0, 4] == pytest.approx(0.25) and prob[0, 1] == pytest.approx(0.35)
