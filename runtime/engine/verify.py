"""The engine's thin call site into the rules: distributions in, a `rules.Verdict` out.

- greedy: `rules.greedy_tree` with each row replaced by a one-hot over a small local vocabulary
  (the row's argmax, computed once here with `torch.argmax`, whose ties go to the lowest index
  like `rules.argmax`);
- sampling: the batched torch twins on the full rows (`rules_torch.verify_tree` when the drafts
  were drawn from q rows, `rules_torch.verify_tree_one_hot` for deterministic candidates such as
  CAPE sets and n-gram candidates, and for trees without q). Their uniforms come from the
  decoder's `TorchSource` (a seeded `torch.Generator`); the twins are tested to decide exactly
  as the reference rules do on the same uniforms.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from verification import rules, rules_torch
from common.errors import InputError


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


class TorchSource:
    """The engine's seeded random source: a `torch.Generator` (CPU) behind the `rules.RandomSource`
    protocol, plus `uniforms(n)` for the batched rules; all draws are float64 in [0, 1)."""

    def __init__(self, seed: int = 0):
        self.generator = torch.Generator().manual_seed(int(seed))

    def uniforms(self, n: int) -> torch.Tensor:
        return torch.rand(n, generator=self.generator, dtype=torch.float64)

    def uniform(self) -> float:
        return float(self.uniforms(1)[0])

    def categorical(self, weights) -> int:
        return rules.inverse_cdf(weights, self.uniform())


def uniforms(rng: rules.RandomSource, n: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """n uniforms [n] (float64) from any random source: one batched draw from a `TorchSource`."""
    if isinstance(rng, TorchSource):
        values = rng.uniforms(n)
    else:
        values = torch.tensor([float(rng.uniform()) for _ in range(n)], dtype=torch.float64)
    return values.to(device)


def sampled_verdict(tree: rules.TokenTree, p_rows: torch.Tensor, q_rows: torch.Tensor | None,
                    rng: rules.RandomSource, replacement: bool = True, naive: bool = False) -> rules.Verdict:
    """Verify a sampled tree on the full rows [nodes, vocab] with the batched rules: MCSS
    (`verify_tree`) when the drafts were drawn from q_rows, else (`naive`: deterministic candidates,
    i.e. one-hot drafts; or no q rows at all) `verify_tree_one_hot`. Takes `tree.size` uniforms."""
    u = uniforms(rng, tree.size, p_rows.device)
    accept_u, draw_u = u[None, : tree.size - 1], u[tree.size - 1:]
    tokens = torch.tensor([tree.tokens], dtype=torch.long, device=p_rows.device)
    if naive or q_rows is None:
        batch = rules_torch.verify_tree_one_hot(tree.parents, tokens, p_rows[None], accept_u, draw_u)
    else:
        batch = rules_torch.verify_tree(tree.parents, tokens, p_rows[None], q_rows[None].to(p_rows.device),
                                        accept_u, draw_u, replacement=replacement)
    n = int(batch.n_accepted[0])
    return rules.Verdict(tuple(batch.tokens[0, : n + 1].tolist()), n, tuple(batch.path[0, :n].tolist()),
                         bool(batch.bonus[0]))
