"""Deterministic candidates (one-hot drafts): `rules.mcss_one_hot` / `verify_tree_one_hot` are exactly
lossless for ANY candidate list, an un-renormalised variant is caught, and the torch twins
(`rules_torch.verify_tree_one_hot`, `rules_torch.draft_candidates`) match the reference exactly."""
from fractions import Fraction as F

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from verification import rules, rules_torch
from common.errors import InputError
from verification import exact
from verification.cases import RULES, PositionCase, SequenceCase, normalise_weights


@st.composite
def cases_with_candidates(draw):
    """p from small integer weights (zeros, ties, one-hot) and any candidate list: repeats and p = 0 tokens."""
    vocab = draw(st.integers(1, 5))
    p_w = draw(st.lists(st.integers(0, 3), min_size=vocab, max_size=vocab).filter(lambda w: sum(w) > 0))
    candidates = draw(st.lists(st.integers(0, vocab - 1), min_size=0, max_size=4))
    return normalise_weights(p_w, "p"), candidates


@settings(deadline=None, max_examples=80)
@given(cases_with_candidates())
def test_one_hot_step_is_exactly_lossless_for_any_candidates(case):
    p, candidates = case
    target = {i: pi for i, pi in enumerate(p) if pi > 0}
    result = exact.exact_check(lambda c, rng: rules.mcss_one_hot(candidates, p, rng).token, None, target)
    assert result.passed, (p, candidates, result.tv, result.error)
    accept = exact.exact_law(lambda c, rng: rules.mcss_one_hot(candidates, p, rng).accepted, None)[0]
    assert accept.get(True, 0) == sum(p[t] for t in set(candidates))  # the most any lossless rule accepts


@settings(deadline=None, max_examples=8)
@given(st.integers(2, 3), st.integers(1, 3), st.sampled_from([(1,), (3,), (2, 1), (1, 2), (2, 2)]),
       st.integers(0, 10_000))
def test_tree_one_hot_is_exactly_lossless(vocab, length, shape, seed):
    case = SequenceCase(vocab, length, shape, seed)
    for name in ("one_hot", "tree_one_hot"):
        assert name in RULES
    result = exact.exact_check(RULES["tree_one_hot"].sampler, case, case.target())
    assert result.passed, (case, result.tv, result.error)


def test_one_hot_position_rule_on_ranked_candidates():
    case = PositionCase(normalise_weights([2, 0, 1, 1], "p"), normalise_weights([0, 3, 1, 0], "q"), k=3)
    assert exact.exact_check(RULES["one_hot"].sampler, case, case.target()).passed


def test_not_renormalising_after_a_rejection_is_caught():
    """Accepting with the raw p(x) after rejections (no renormalisation) changes the law."""
    def raw_p(c, rng):
        p = c
        for x in (0, 1):
            if rng.uniform() < p[x]:
                return x
        return rng.categorical(rules.remove_token(rules.remove_token(p, 0), 1))

    p = (F(1, 2), F(1, 4), F(1, 4))
    assert exact.exact_check(raw_p, p, dict(enumerate(p))).tv > 0
    assert exact.exact_check(lambda c, rng: rules.mcss_one_hot([0, 1], c, rng).token, p, dict(enumerate(p))).passed


def test_scripted_decisions_and_bad_input():
    p = [0.5, 0.25, 0.25, 0.0]
    # u = 0.6 rejects token 0 (p 0.5); then p^ = (0, .5, .5, 0): u = 0.4 accepts token 1
    assert rules.mcss_one_hot([0, 1], p, rules.ScriptedSource([0.6, 0.4], [])) == rules.Step(True, 1, 1)
    # a p = 0 candidate is never accepted, even with u = 0; endpoint from p without the rejected tokens
    assert rules.mcss_one_hot([3, 0], p, rules.ScriptedSource([0.0, 0.9], [0.0])) == rules.Step(False, 1, None)
    tree = rules.TokenTree((-1, 0, 0, 1), (-1, 2, 0, 1))
    # root: token 2 rejected (0.9 >= .25), token 0 accepted (0.1 < 2/3); node 2 is a leaf: bonus by u = 0.99
    v = rules.verify_tree_one_hot(tree, [p] * 4, rules.ScriptedSource([0.9, 0.1], [0.99]))
    assert v == rules.Verdict((0, 2), 1, (2,), True)
    with pytest.raises(InputError, match="candidate 0 at tree node 0"):
        rules.verify_tree_one_hot(rules.TokenTree((-1, 0), (-1, 9)), [p, p], rules.NumpySource(0))
    with pytest.raises(InputError, match="p_rows has 1 rows"):
        rules.verify_tree_one_hot(tree, [p], rules.NumpySource(0))


def _random_p(rng, vocab):
    out = rng.dirichlet(np.full(vocab, 0.3))
    if rng.random() < 0.3:
        out[rng.permutation(vocab)[int(rng.integers(1, vocab + 1)):]] = 0.0
    return out / out.sum()


def test_torch_twin_of_the_tree_matches_the_reference():
    rng = np.random.default_rng(3)
    gen = torch.Generator().manual_seed(5)
    checked = 0
    for _ in range(10):
        vocab, size, rows = int(rng.integers(2, 10)), int(rng.integers(1, 9)), 30
        parents = (-1,) + tuple(int(rng.integers(0, i)) for i in range(1, size))
        p = np.stack([[_random_p(rng, vocab) for _ in range(size)] for _ in range(rows)])
        tokens = rng.integers(0, vocab, size=(rows, size))
        tokens[:, 0] = -1
        accept_u = torch.rand(rows, size - 1, generator=gen, dtype=torch.float64)
        draw_u = torch.rand(rows, generator=gen, dtype=torch.float64)
        got = rules_torch.verify_tree_one_hot(parents, torch.tensor(tokens), torch.tensor(p), accept_u, draw_u)
        for b in range(rows):
            source = rules.ScriptedSource(accept_u[b].tolist(), [float(draw_u[b])])
            want = rules.verify_tree_one_hot(rules.TokenTree(parents, tuple(int(t) for t in tokens[b])),
                                             [list(r) for r in p[b]], source)
            n = want.n_accepted
            assert got.tokens[b, : n + 1].tolist() == list(want.tokens)
            assert got.path[b, :n].tolist() == list(want.path)
            assert int(got.n_accepted[b]) == n and bool(got.bonus[b]) == want.bonus
            checked += 1
    assert checked == 300


@pytest.mark.parametrize("replacement", [True, False])
def test_torch_drafting_matches_the_reference(replacement):
    rng = np.random.default_rng(int(replacement))
    gen = torch.Generator().manual_seed(9)
    for _ in range(200):
        vocab, k = int(rng.integers(1, 9)), int(rng.integers(1, 5))
        q = _random_p(rng, vocab)
        u = torch.rand(k, generator=gen, dtype=torch.float64)
        want = rules.draft_candidates(list(q), k, rules.ScriptedSource([], u.tolist()), replacement=replacement)
        assert rules_torch.draft_candidates(torch.tensor(q), k, u, replacement).tolist() == want
    with pytest.raises(InputError, match="k is 0"):
        rules_torch.draft_candidates(torch.tensor([1.0]), 0, torch.zeros(0))
    with pytest.raises(InputError, match="q row 0 holds NaN"):
        rules_torch.draft_candidates(torch.tensor([float("nan"), 1.0]), 1, torch.zeros(1))
