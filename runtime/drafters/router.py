"""CORAL's LM-head router: split the vocabulary into N groups, compute only the top-n groups' logits.

The router (CORAL Eq. 7) scores the N groups from the drafter's last hidden state h:
    p_router = softmax(W2 (act(W1 h) + h)).
Only the LM-head rows of the top-n groups are multiplied; the drafter's proposal distribution q
is the softmax of those logits, renormalised over the active groups, and zero elsewhere. With
top-n = N this is exactly the plain head's softmax; with a perfectly trained router (whose target
is each group's summed probability, CORAL Eq. 9) it is also CORAL's Eq. 8 restricted to the
active groups. Because q is a proper distribution that the verifier sees in full, verification
stays lossless for any top-n.
"""
from __future__ import annotations

import torch
from torch import nn

from runtime.linear import Linear, linear


def group_bounds(vocab_size: int, n_groups: int) -> list[int]:
    """n_groups + 1 boundaries of contiguous, (nearly) equal vocabulary groups."""
    if n_groups < 1 or n_groups > vocab_size:
        raise ValueError(f"router groups must lie in 1..{vocab_size}, got {n_groups}")
    return [round(i * vocab_size / n_groups) for i in range(n_groups + 1)]


class LMHeadRouter(nn.Module):
    """Selects the top-n of N vocabulary groups and computes the LM head only over them."""

    def __init__(self, hidden_size: int, vocab_size: int, n_groups: int, top_n: int):
        super().__init__()
        if not 1 <= top_n <= n_groups:
            raise ValueError(f"router top-n must lie in 1..{n_groups} (the group count), got {top_n}")
        self.vocab_size = vocab_size
        self.n_groups = n_groups
        self.top_n = top_n
        self.w1 = Linear(hidden_size, hidden_size, bias=False)
        self.w2 = Linear(hidden_size, n_groups, bias=False)
        self.act = nn.SiLU()
        self.bounds = group_bounds(vocab_size, n_groups)  # plain ints: survive meta-device builds

    def group_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Router logits [..., N] (CORAL Eq. 7 before the softmax); trained against group masses."""
        return self.w2(self.act(self.w1(hidden)) + hidden)

    def active_groups(self, hidden: torch.Tensor) -> torch.Tensor:
        """Indices [..., top_n] of the groups to compute."""
        return torch.topk(self.group_logits(hidden), self.top_n, dim=-1).indices

    def group_rows(self, groups: list[int], device) -> torch.Tensor:
        """Vocabulary ids (LM-head rows) of the given groups, concatenated."""
        return torch.cat([torch.arange(self.bounds[g], self.bounds[g + 1], device=device) for g in groups])

    def routed_logits(self, hidden: torch.Tensor, lm_head_weight: torch.Tensor) -> torch.Tensor:
        """Logits [..., V]: computed for the active groups' rows only, -inf elsewhere.

        With top_n == N the full head is used directly (no gather), bit for bit the plain head.
        """
        if self.top_n == self.n_groups:
            return linear(hidden, lm_head_weight)
        flat = hidden.reshape(-1, hidden.shape[-1])
        groups = self.active_groups(flat)
        out = torch.full((flat.shape[0], self.vocab_size), float("-inf"), dtype=flat.dtype, device=flat.device)
        for row in range(flat.shape[0]):
            rows = self.group_rows(groups[row].tolist(), flat.device)
            out[row, rows] = linear(flat[row], lm_head_weight[rows])
        return out.reshape(*hidden.shape[:-1], self.vocab_size)
