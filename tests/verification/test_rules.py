"""Reference verification rules (verification.rules): input checks, conventions, edge cases."""
from fractions import Fraction as F

import pytest

from verification import rules
from common.errors import InputError


def test_bad_vectors_name_the_vector():
    with pytest.raises(InputError, match=r"^p\[1\] is NaN$"):
        rules.check_distribution([0.5, float("nan")], "p")
    with pytest.raises(InputError, match=r"q\[0\] is negative"):
        rules.check_distribution([-0.1, 1.1], "q")
    with pytest.raises(InputError, match="q has length 2, expected 3"):
        rules.check_distribution([0.5, 0.5], "q", size=3)
    with pytest.raises(InputError, match="p sums to 0.9"):
        rules.check_distribution([0.5, 0.4], "p")
    with pytest.raises(InputError, match="not exactly 1"):
        rules.check_distribution([F(1, 3), F(1, 3)], "p")
    assert rules.check_distribution([0.5, 0.5 + 1e-6], "p") == [0.5, 0.5 + 1e-6]  # within tolerance, untouched
    with pytest.raises(InputError, match="p at tree node 0 sums"):
        rules.mcss([0], [0.5, 0.4], [0.5, 0.5], rules.NumpySource(0), name="tree node 0")


def test_candidate_must_have_draft_mass():
    with pytest.raises(InputError, match="draft probability 0"):
        rules.mcss([1], [0.5, 0.5], [1.0, 0.0], rules.NumpySource(0))
    with pytest.raises(InputError, match="without replacement"):  # duplicate candidate
        rules.mcss([0, 0], [0.0, 1.0], [0.5, 0.5], rules.ScriptedSource([0.9, 0.9], [0.5]), replacement=False)
    with pytest.raises(InputError, match="candidate 0 is 5"):
        rules.mcss([5], [0.5, 0.5], [0.5, 0.5], rules.NumpySource(0))


def test_all_zero_residual_keeps_p_never_token_zero():
    # p == q: a (float-rounding) rejection must not turn into token 0.
    p = [0.0, 0.25, 0.75]
    assert rules.residual(p, p) == p
    step = rules.mcss([2], p, p, rules.ScriptedSource([1.5], [0.0]))  # stands in for a rounding rejection
    assert step.accepted is False and step.token == 1  # first token with mass under p


def test_inverse_cdf_skips_zero_weights_and_accepts_unnormalised():
    assert rules.inverse_cdf([0, 2, 0, 2], 0.0) == 1
    assert rules.inverse_cdf([0, 2, 0, 2], 0.5) == 3
    assert rules.inverse_cdf([F(1, 4), F(3, 4)], F(1, 4)) == 1
    with pytest.raises(InputError, match="no positive mass"):
        rules.inverse_cdf([0, 0], 0.3)


def test_tree_conventions_and_walk():
    tree = rules.TokenTree((-1, 0, 0, 1, 1), (-1, 2, 1, 0, 3))
    assert tree.children(0) == (1, 2) and tree.children(1) == (3, 4) and tree.size == 5
    p = [F(1, 4)] * 4
    # node 1 (token 2) accepted, then node 3 (token 0) rejected, node 4 (token 3) accepted, bonus from p[4]
    verdict = rules.verify_tree(tree, [p] * 5, [p, [F(1, 2), 0, 0, F(1, 2)], None, None, None],
                                rules.ScriptedSource([F(1, 2), F(3, 4), F(1, 10)], [F(1, 2)]))
    # at node 1: q = (1/2,0,0,1/2); token 0: ratio (1/4)/(1/2) = 1/2 < u = 3/4 -> reject;
    # residual of p - q = (0, 1/4, 1/4, 0)/(1/2); q without replacement unchanged (replacement=True)
    # token 3: p^ = 0 -> reject; endpoint from residual (0,1/2,1/2,0) at u = 1/2 -> token 2
    assert verdict == rules.Verdict((2, 2), 1, (1,), False)
    with pytest.raises(InputError, match="parents\\[2\\] is 2"):
        rules.TokenTree((-1, 0, 2), (-1, 0, 0))
    with pytest.raises(InputError, match="q_rows\\[1\\] is missing"):
        rules.verify_tree(tree, [p] * 5, [p, None, None, None, None], rules.NumpySource(0))
    with pytest.raises(InputError, match="p_rows has 3 rows"):
        rules.verify_tree(tree, [p] * 3, [p] * 5, rules.NumpySource(0))


def test_chain_bonus_and_greedy():
    p = [F(0), F(1)]
    verdict = rules.speculative_chain([1, 1], [p, p, [F(1), F(0)]], [p, p], rules.ScriptedSource([0, 0], [0]))
    assert verdict == rules.Verdict((1, 1, 0), 2, (1, 2), True)
    greedy = rules.greedy_chain([0, 1], [[0.6, 0.4], [0.5, 0.5], [0.1, 0.9]])
    assert greedy.tokens == (0, 0) and greedy.n_accepted == 1 and not greedy.bonus
    assert rules.greedy_chain([0], [[0.6, 0.4], [0.1, 0.9]]).tokens == (0, 1)


def test_mcns_and_drafting_without_replacement():
    p = [F(1, 2), F(1, 2), F(0)]
    assert rules.mcns([1, 1], p, rules.ScriptedSource([], [F(3, 4)])) == rules.Step(True, 1, 0)
    assert rules.mcns([0], p, rules.ScriptedSource([], [F(3, 4)])) == rules.Step(False, 1, None)
    drafted = rules.draft_candidates([0.5, 0.5, 0.0], 3, rules.NumpySource(3), replacement=False)
    assert sorted(drafted) == [0, 1]  # the support is exhausted after two draws
    with pytest.raises(InputError, match="k is 0"):
        rules.draft_candidates([1.0], 0, rules.NumpySource(0))
