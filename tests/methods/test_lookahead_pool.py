"""Lookahead's pool fill: the candidates a step verifies, fitted from StepTraces and priced."""
import numpy as np
import pytest

import methods
from calibrate.synthetic import synthetic_ngram_steps
from common.errors import InputError
from costmodel.lookahead import expected_candidates, expected_forward_tokens


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


GROWTH = {"alpha": 0.4, "alpha_next": 0.75, "spread": 1, "hit": 0.45, "fill": 20.0, "pool": 0.8}


def test_pool_growth_closed_form_is_the_mean_of_the_process():
    """The closed form's tokens and query tokens per step over a 32-token generation, and in the
    steady state, against the process written out (calibrate.synthetic) and the simulator's sampler."""
    from costmodel.lookahead import pool_trajectory
    from methods.lookahead import NgramAcceptance
    from methods.draws import draw_stream
    from methods.lookahead import PoolSampler

    model = NgramAcceptance(**GROWTH)
    for w, n, g in ((1, 5, 2), (7, 4, 7), (12, 6, 1)):
        config = methods.parse_label(f"lookahead W{w} N{n} G{g}")
        frame, _ = synthetic_ngram_steps(GROWTH, [config], prompts=4000, steps=200, seed=w)
        steady = frame[frame["step"] >= 150]
        tokens, grid, prob = pool_trajectory(model, n, w, g)
        assert tokens[0] == pytest.approx(steady["accepted"].mean(), rel=0.01)
        sizes = np.bincount(steady["verify_tokens"], minlength=grid.size + 1)[1:] / len(steady)
        assert np.abs(prob[0] - sizes).max() < 0.01 and prob.sum() == pytest.approx(1.0)
        rng = np.random.default_rng(0)
        streams = [draw_stream(PoolSampler(w, n, g, model), rng, 32) for _ in range(4000)]
        per_step = 32 * len(streams) / sum(s.accepted.size for s in streams)
        short, _, short_prob = pool_trajectory(model, n, w, g, 32)
        assert short[0] == pytest.approx(per_step, rel=0.01)
        drawn = np.bincount(np.concatenate([s.verify_tokens for s in streams]), minlength=grid.size + 1)[1:]
        assert np.abs(short_prob[0] - drawn / drawn.sum()).max() < 0.01
        assert short[0] < tokens[0]                        # the pool is still filling on a short generation


def test_pool_trajectory_of_many_configurations_is_each_ones_own():
    """Configurations of different G in one call (a space's frame): each row is what it is alone,
    also where a smaller-G row's grid ends before the call's largest G would reach."""
    from costmodel.lookahead import pool_trajectory
    from methods.lookahead import NgramAcceptance

    model = NgramAcceptance(**GROWTH)
    n, w, g = np.array([2, 7, 7]), np.array([4, 4, 11]), np.array([1, 4, 1])
    for new_tokens in (None, 32):
        tokens, grid, prob = pool_trajectory(model, n, w, g, new_tokens)
        for i in range(3):
            alone, alone_grid, alone_prob = pool_trajectory(model, n[i], w[i], g[i], new_tokens)
            assert tokens[i] == pytest.approx(alone[0])
            assert prob[i, :alone_grid.size] == pytest.approx(alone_prob[0]) and prob[i, alone_grid.size:].sum() == 0


def test_pool_growth_part_round_trips_and_refuses_bad_values():
    spec = methods.get("lookahead")
    part = spec.acceptance_part(GROWTH, "t")
    assert part.grows and spec.acceptance_part(part.to_dict(), "t") == part
    assert not spec.acceptance_part({"alpha": 0.4, "f": 2.0}, "t").grows          # the papers' Eq. 7
    with pytest.raises(InputError, match="lookahead.hit must be a number in"):
        spec.acceptance_part({**GROWTH, "hit": 1.5}, "t")
    with pytest.raises(InputError, match="needs 'alpha', 'alpha_next', 'spread', 'hit', 'fill', 'pool'"):
        spec.acceptance_part({k: v for k, v in GROWTH.items() if k != "fill"}, "t")


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
