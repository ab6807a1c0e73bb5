"""Token-tree geometry for one verification forward: ancestor masks, depths, k-configuration trees.

A tree is a parent array as in `verification.rules.TokenTree` (node 0 = the pending committed token,
parents[0] = -1). Node i attends to itself and its ancestors, and sits at position
(position of the root) + depth(i); chains, MCSD trees, CAPE expansions and n-gram candidate tries are all
such trees, so the mask and the positions are built here once.
"""
from __future__ import annotations

from typing import Sequence

import torch


def depths(parents: Sequence[int]) -> list[int]:
    out = [0] * len(parents)
    for i in range(1, len(parents)):
        out[i] = out[parents[i]] + 1
    return out


def ancestor_mask(parents: Sequence[int]) -> torch.Tensor:
    """[n, n] boolean: entry (i, j) is True when node j is node i or one of its ancestors."""
    n = len(parents)
    mask = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        mask[i, i] = True
        if i:
            mask[i] |= mask[parents[i]]
    return mask


def with_prefix(prefix_len: int, local: torch.Tensor) -> torch.Tensor:
    """Prepend `prefix_len` fully visible key columns to a [q, k] local mask."""
    return torch.cat([torch.ones(local.shape[0], prefix_len, dtype=torch.bool), local], dim=1)

