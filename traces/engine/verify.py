"""The engine's thin call site into `traces.rules`: distributions in, a rules Verdict out.

The rules work on plain vectors; a vocabulary of 50k entries makes their Python loops slow, so
rows are restricted to the tokens that can matter before the call, which changes no decision:
- greedy: each row is replaced by a one-hot over a small local vocabulary (the row's argmax,
  computed once here with `torch.argmax`, whose ties go to the lowest index like `rules.argmax`);
- sampling: rows are restricted to the union of the supports of all p and q rows (zero entries are
  never drawn and do not move any cumulative sum, so every draw is the one the full rows give).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from traces import rules
from traces.errors import InputError


@dataclass(frozen=True)
class Sampling:
    """Decoding law: temperature 0 is greedy; top_p < 1 keeps the smallest nucleus (ties kept)."""

    temperature: float = 0.0
    top_p: float = 1.0

    def __post_init__(self):
        if not self.temperature >= 0:
            raise InputError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise InputError(f"top_p must lie in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        """The processed distribution (fp64) of every row; the same function for p and for q.

        Greedy: the plain softmax (used for confidences only; decisions take the argmax).
        """
        x = logits.double()
        if self.greedy:
            return torch.softmax(x, dim=-1)
        probs = torch.softmax(x / self.temperature, dim=-1)
        if self.top_p < 1:
            sorted_p, order = probs.sort(dim=-1, descending=True)
            before = sorted_p.cumsum(-1) - sorted_p
            keep_sorted = before < self.top_p
            threshold = torch.where(keep_sorted, sorted_p, torch.full_like(sorted_p, 2.0)).min(-1, keepdim=True).values
            probs = torch.where(probs >= threshold, probs, torch.zeros_like(probs))
            probs = probs / probs.sum(-1, keepdim=True)
        return probs


def greedy_verdict(tree: rules.TokenTree, p_logits: torch.Tensor) -> rules.Verdict:
    """`rules.greedy_tree` on a tree whose p rows are the target logits [nodes, vocab]."""
    targets = p_logits.argmax(-1).tolist()
    local = {t: i for i, t in enumerate(dict.fromkeys(list(tree.tokens[1:]) + targets))}
    size = max(len(local), 1)
    rows = [[1.0 if j == local[t] else 0.0 for j in range(size)] for t in targets]
    inverse = {i: t for t, i in local.items()}
    local_tree = rules.TokenTree(tree.parents, (-1, *(local[t] for t in tree.tokens[1:])))
    v = rules.greedy_tree(local_tree, rows)
    return rules.Verdict(tuple(inverse[t] for t in v.tokens), v.n_accepted, v.path, v.bonus)


def _restrict(p_rows: torch.Tensor, q_rows: torch.Tensor | None, tokens) -> tuple[torch.Tensor, list[int]]:
    support = p_rows.sum(0) > 0
    if q_rows is not None:
        support |= q_rows.sum(0) > 0
    idx = torch.nonzero(support).flatten()
    keep = set(idx.tolist())
    extra = [t for t in tokens if t >= 0 and t not in keep]
    if extra:
        idx = torch.cat([idx, torch.tensor(extra, dtype=idx.dtype)]).sort().values
    return idx, idx.tolist()


def sampled_verdict(tree: rules.TokenTree, p_rows: torch.Tensor, q_rows: torch.Tensor | None,
                    rng: rules.RandomSource, replacement: bool = True, naive: bool = False) -> rules.Verdict:
    """Verify a sampled tree with the rules: MCSS (`verify_tree`) when the drafts were drawn from
    q_rows, else (`naive`, deterministic candidates such as CAPE sets or lookahead n-grams, i.e.
    one-hot drafts) MCNS at every node along the accepted path."""
    idx, vocab = _restrict(p_rows, q_rows, tree.tokens[1:])
    local = {t: i for i, t in enumerate(vocab)}
    ltree = rules.TokenTree(tree.parents, (-1, *(local[t] for t in tree.tokens[1:])))
    p_local = p_rows[:, idx].tolist()
    if not naive:
        q_local = [None if not ltree.children(n) else row for n, row in enumerate(q_rows[:, idx].tolist())]
        v = rules.verify_tree(ltree, p_local, q_local, rng, replacement=replacement)
    else:
        v = _naive_tree(ltree, p_local, rng)
    return rules.Verdict(tuple(vocab[t] for t in v.tokens), v.n_accepted, v.path, v.bonus)


def _naive_tree(tree: rules.TokenTree, p_rows, rng: rules.RandomSource) -> rules.Verdict:
    """MCNS down the tree (lossless for candidates chosen without q). To move into traces.rules."""
    node, tokens, path = 0, [], []
    while True:
        children = tree.children(node)
        step = rules.mcns([tree.tokens[c] for c in children], p_rows[node], rng, name=f"tree node {node}")
        if not step.accepted:
            return rules.Verdict(tuple(tokens + [step.token]), len(path), tuple(path), not children)
        node = children[step.candidate]
        tokens.append(step.token)
        path.append(node)
