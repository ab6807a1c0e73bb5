"""The batched torch rules match the reference rules exactly when fed the same uniforms."""
import numpy as np
import pytest
import torch

from verification import rules, rules_torch
from common.errors import InputError


def random_dist(rng, vocab, min_support=1):
    """Dirichlet rows with random zeros, some one-hot; float64 (sums exact enough for the check)."""
    kind = rng.integers(4)
    if kind == 0:
        out = np.zeros(vocab)
        out[rng.integers(vocab)] = 1.0 if min_support == 1 else 0.0
        if min_support > 1:
            out[rng.choice(vocab, min_support, replace=False)] = 1.0 / min_support
        return out
    out = rng.dirichlet(np.full(vocab, 0.3))
    if kind == 1:
        keep = max(min_support, int(rng.integers(1, vocab + 1)))
        out[rng.permutation(vocab)[keep:]] = 0.0
    return out / out.sum()


def random_tree(rng, size):
    return (-1,) + tuple(int(rng.integers(0, i)) for i in range(1, size))


def reference_tree(tree, p, q, accept_u, draw_u, replacement):
    source = rules.ScriptedSource([float(u) for u in accept_u], [float(draw_u)])
    return rules.verify_tree(tree, [list(r) for r in p], [list(r) for r in q], source, replacement=replacement)


@pytest.mark.parametrize("replacement", [True, False])
def test_tree_matches_reference(replacement):
    rng = np.random.default_rng(7 + replacement)
    gen = torch.Generator().manual_seed(11)
    checked = 0
    for _ in range(12):
        vocab, size, rows = int(rng.integers(2, 12)), int(rng.integers(1, 9)), 40
        parents = random_tree(rng, size)
        shape = rules.TokenTree(parents, (-1,) * size)
        width = max(len(shape.children(n)) for n in range(size))
        if width > vocab and not replacement:
            continue
        p = np.stack([[random_dist(rng, vocab) for _ in range(size)] for _ in range(rows)])
        q = np.stack([[random_dist(rng, vocab, min_support=width) for _ in range(size)] for _ in range(rows)])
        same = rng.random(rows) < 0.2
        q[same] = p[same] if replacement else q[same]  # q = p rows
        tokens = np.full((rows, size), -1)
        for b in range(rows):
            for node in range(size):
                kids = shape.children(node)
                if kids:
                    drawn = rules.draft_candidates(q[b, node], len(kids), rules.NumpySource(int(rng.integers(1 << 30))),
                                                   replacement=replacement)
                    tokens[b, list(kids)] = drawn
        accept_u = torch.rand(rows, size - 1, generator=gen, dtype=torch.float64)
        draw_u = torch.rand(rows, generator=gen, dtype=torch.float64)
        got = rules_torch.verify_tree(parents, torch.tensor(tokens), torch.tensor(p), torch.tensor(q),
                                      accept_u, draw_u, replacement=replacement)
        for b in range(rows):
            tree = rules.TokenTree(parents, tuple(int(t) for t in tokens[b]))
            want = reference_tree(tree, p[b], q[b], accept_u[b].tolist(), draw_u[b], replacement)
            n = want.n_accepted
            assert got.tokens[b, : n + 1].tolist() == list(want.tokens)
            assert (got.tokens[b, n + 1:] == -1).all()
            assert got.path[b, :n].tolist() == list(want.path)
            assert int(got.n_accepted[b]) == n and bool(got.bonus[b]) == want.bonus
            checked += 1
    assert checked > 300


def test_mcss_step_and_chain_match_reference():
    rng = np.random.default_rng(3)
    gen = torch.Generator().manual_seed(5)
    rows, vocab, k = 300, 9, 4
    p = np.stack([random_dist(rng, vocab) for _ in range(rows)])
    q = np.stack([random_dist(rng, vocab) for _ in range(rows)])
    cands = np.array([rules.draft_candidates(q[b], k, rules.NumpySource(b)) for b in range(rows)])
    accept_u = torch.rand(rows, k, generator=gen, dtype=torch.float64)
    draw_u = torch.rand(rows, generator=gen, dtype=torch.float64)
    got = rules_torch.mcss(torch.tensor(cands), torch.tensor(p), torch.tensor(q), accept_u, draw_u)
    outcomes = set()
    for b in range(rows):
        want = rules.mcss(list(cands[b]), list(p[b]), list(q[b]),
                          rules.ScriptedSource(accept_u[b].tolist(), [float(draw_u[b])]))
        assert (bool(got.accepted[b]), int(got.token[b])) == (want.accepted, want.token)
        assert int(got.candidate[b]) == (-1 if want.candidate is None else want.candidate)
        outcomes.add((want.accepted, want.candidate))
    assert len(outcomes) >= 4  # accepted at several candidate positions and rejected

    gamma = 3
    p3 = torch.tensor(np.stack([[random_dist(rng, vocab) for _ in range(gamma + 1)] for _ in range(rows)]))
    q3 = torch.tensor(np.stack([[random_dist(rng, vocab) for _ in range(gamma)] for _ in range(rows)]))
    drafts = torch.tensor([[rules.draft_candidates(q3[b, i].tolist(), 1, rules.NumpySource(b * 7 + i))[0]
                            for i in range(gamma)] for b in range(rows)])
    accept_u = torch.rand(rows, gamma, generator=gen, dtype=torch.float64)
    chain = rules_torch.speculative_chain(drafts, p3, q3, accept_u, draw_u)
    greedy = rules_torch.greedy_chain(drafts, p3)
    for b in range(rows):
        want = rules.speculative_chain(drafts[b].tolist(), p3[b].tolist(), q3[b].tolist(),
                                       rules.ScriptedSource(accept_u[b].tolist(), [float(draw_u[b])]))
        assert chain.tokens[b, : want.n_accepted + 1].tolist() == list(want.tokens)
        assert bool(chain.bonus[b]) == want.bonus
        want_greedy = rules.greedy_chain(drafts[b].tolist(), p3[b].tolist())
        assert greedy.tokens[b, : want_greedy.n_accepted + 1].tolist() == list(want_greedy.tokens)
        assert bool(greedy.bonus[b]) == want_greedy.bonus


def test_all_zero_residual_is_not_nan_or_token_zero():
    p = torch.tensor([[0.0, 0.25, 0.75]], dtype=torch.float64)
    assert torch.equal(rules_torch.residual(p, p), p)
    assert int(rules_torch.inverse_cdf(rules_torch.residual(p, p), torch.tensor([0.0]))) == 1


def test_bad_input_is_one_line():
    p = torch.tensor([[0.5, 0.5], [0.7, 0.4]])
    with pytest.raises(InputError, match=r"^p row 1 sums to 1.1"):
        rules_torch.check_probs(p, "p")
    with pytest.raises(InputError, match="p row 0 holds NaN"):
        rules_torch.check_probs(torch.tensor([[float("nan"), 1.0]]), "p")
    good = torch.tensor([[0.5, 0.5]])
    with pytest.raises(InputError, match="draft probability 0"):
        rules_torch.mcss(torch.tensor([[1]]), good, torch.tensor([[1.0, 0.0]]), torch.tensor([[0.5]]), torch.tensor([0.5]))
    with pytest.raises(InputError, match="accept_u must hold uniforms"):
        rules_torch.mcss(torch.tensor([[1]]), good, good, torch.tensor([[1.5]]), torch.tensor([0.5]))
    with pytest.raises(InputError, match="q has shape"):
        rules_torch.mcss(torch.tensor([[1]]), good, torch.ones(1, 3) / 3, torch.tensor([[0.5]]), torch.tensor([0.5]))
