"""Multi-candidate trees and CAPE against Monte Carlo simulations of the processes they model.

Tolerance: 5 standard errors of the Monte Carlo mean.
"""
import numpy as np
import pytest

from costmodel import cape, trees

N = 200_000


def _assert_within(sample, predicted, sigmas=5.0):
    se = np.asarray(sample, dtype=float).std(ddof=1) / np.sqrt(np.size(sample))
    assert abs(np.mean(sample) - predicted) <= sigmas * se + 1e-12, (np.mean(sample), predicted, se)


def test_parse_k_config_accepts_strings_and_tuples_and_rejects_the_rest():
    assert trees.parse_k_config("4x2x1") == (4, 2, 1) == trees.parse_k_config((4, 2, 1))
    assert trees.format_k_config([8, 2]) == "8x2"
    for bad in ["4x0", "4x2.5", "four", "", (1.5, 2), (), (0,), "4x-2"]:
        with pytest.raises(ValueError, match="not a product of positive integers"):
            trees.parse_k_config(bad)


@pytest.mark.parametrize("config", ["1x1x1x1", "4x2x1", "8x2x1x1", "32", "2x4"])
def test_greedy_tree_with_topk_accuracy_matches_simulated_ranks(config):
    rng = np.random.default_rng(3)
    rank_probs = np.array([0.5, 0.15, 0.08, 0.06, 0.04, 0.03, 0.02, 0.02] + [0.1 / 24] * 24)
    ks = trees.parse_k_config(config)
    ranks = rng.choice(np.arange(1, 33), p=rank_probs / rank_probs.sum(), size=(N, len(ks)))
    accepted = np.cumprod(ranks <= np.array(ks), axis=1).sum(axis=1) + 1
    curve = {k: float(trees.topk_accuracy(rank_probs, k)) for k in set(ks)}
    _assert_within(accepted, float(trees.expected_tokens_tree(config, curve)))


def test_tree_expectation_is_vectorised_over_configs_and_curves():
    curves = np.array([[0.5, 0.6, 0.65, 0.7], [0.3, 0.4, 0.45, 0.5]])
    out = trees.expected_tokens_tree(["1x1", "4x2x1", (3,)], curves)
    assert out.shape == (2, 3)
    assert out[0, 1] == pytest.approx(1 + 0.7 + 0.7 * 0.6 + 0.7 * 0.6 * 0.5)
    with pytest.raises(ValueError, match="alpha@k is not given for k = 8"):
        trees.expected_tokens_tree("8x1", {1: 0.5, 2: 0.6})


def _mcss_with_replacement_mc(rng, p, q, k, n):
    accepted = 0
    for _ in range(n):
        residual = p.copy()
        for _ in range(k):
            x = rng.choice(len(q), p=q)
            if rng.random() * q[x] <= residual[x]:
                accepted += 1
                break
            excess = np.maximum(residual - q, 0)
            residual = excess / excess.sum()
    return accepted


def test_alpha_at_k_with_replacement_matches_the_mcss_algorithm():
    rng = np.random.default_rng(4)
    p = np.array([0.5, 0.2, 0.15, 0.1, 0.05])
    q = np.array([0.1, 0.4, 0.1, 0.2, 0.2])
    n = 20_000
    for k in (1, 2, 4):
        hits = _mcss_with_replacement_mc(rng, p, q, k, n)
        predicted = float(trees.alpha_at_k_with_replacement(p, q, k))
        se = np.sqrt(predicted * (1 - predicted) / n)
        assert abs(hits / n - predicted) <= 5 * se + 1e-9
    assert trees.alpha_at_k_with_replacement(p, q, 1) == pytest.approx(np.minimum(p, q).sum())


def test_best_tree_value_matches_a_simulated_walk_and_beats_k_configs():
    probs = np.array([0.55, 0.2, 0.08, 0.04])
    value, parents = trees.best_tree(probs, budget=15)
    assert len(parents) <= 15 and trees.tree_value(parents, probs) == pytest.approx(value)
    children = {}
    for child, parent in enumerate(parents, start=1):
        children.setdefault(parent, []).append(child)
    rng = np.random.default_rng(5)
    outcome = rng.random((N // 4, 16))
    cum = np.concatenate([[0.0], np.cumsum(probs)])
    tokens = np.ones(outcome.shape[0])
    node = np.zeros(outcome.shape[0], dtype=int)
    alive = np.ones(outcome.shape[0], dtype=bool)
    for depth in range(16):
        rank = np.searchsorted(cum, outcome[:, depth], side="right") - 1   # 0-based rank accepted, or >= len
        nxt = np.array([children.get(n, [])[r] if r < len(children.get(n, [])) else -1 for n, r in zip(node, rank)])
        alive &= nxt >= 0
        tokens += alive
        node = np.where(alive, nxt, 0)
    _assert_within(tokens, value)
    chain_value, _ = trees.best_tree(probs[:1], budget=5)
    assert chain_value == pytest.approx(sum(0.55**i for i in range(6)))
    curve = {k: probs[:k].sum() for k in (1, 2, 4)}
    assert value >= trees.expected_tokens_tree("4x2x1", curve) - 1e-12  # 4 + 8 + 8 > 15 nodes, still beaten
    depth_limited, parents_d = trees.best_tree(probs, budget=15, max_depth=2)
    assert depth_limited <= value and trees.tree_value(parents_d, probs) == pytest.approx(depth_limited)


@pytest.mark.parametrize("bins", [[8, 8, 8, 8, 6, 6, 6, 6, 4, 4, 2], [1] * 11, [4, 4, 4, 4, 2, 2, 2, 2, 1, 1, 1]])
def test_cape_expected_tokens_and_verify_size_match_simulation(bins):
    rng = np.random.default_rng(6)
    freq = np.array([0.02, 0.04, 0.06, 0.08, 0.1, 0.1, 0.1, 0.1, 0.12, 0.13, 0.15])
    top1 = np.linspace(0.1, 0.95, 11)
    hit = {1: top1, 2: np.minimum(top1 + 0.1, 1), 4: np.minimum(top1 + 0.2, 1), 6: np.minimum(top1 + 0.25, 1),
           8: np.minimum(top1 + 0.3, 1)}
    gamma = 5
    s = np.array(bins)
    b = rng.choice(11, p=freq, size=(N, gamma))
    u = rng.random((N, gamma))
    hit_top1 = u < top1[b]
    hit_s = u < np.stack([hit[k] for k in sorted(hit)])[np.searchsorted(sorted(hit), s[b]), b]
    prefix = np.concatenate([np.ones((N, 1), bool), np.cumprod(hit_top1, axis=1)[:, :-1].astype(bool)], axis=1)
    tokens = 1 + np.sum(prefix & hit_s, axis=1)
    _assert_within(tokens, float(cape.cape_expected_tokens(s, freq, hit, gamma)))
    _assert_within(s[b].sum(axis=1), float(cape.cape_verify_tokens(s, freq, gamma)))


def test_cape_bad_input():
    freq = np.full(11, 1 / 11)
    with pytest.raises(ValueError, match="11 entries"):
        cape.cape_verify_tokens([1, 2, 3], freq, 5)
    with pytest.raises(ValueError, match="no row for K = 3"):
        cape.cape_expected_tokens([3] * 11, freq, {1: np.full(11, 0.5)}, 5)
    assert list(cape.confidence_bin([0.0, 0.35, 1.0])) == [0, 3, 10]
