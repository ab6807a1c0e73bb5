"""Eq. 5 of the Lookahead paper: b speculated sequences of gamma tokens each, iid per-token acceptance.

E(#tokens) = (gamma + 1) - sum_{i=1..gamma} (1 - alpha^i)^b; b = 1 gives Leviathan's Eq. 4.
alpha is the per-token acceptance probability of every speculated token (all b sequences alike,
independent). Vectorised over alpha, gamma and b by broadcasting.
"""
from __future__ import annotations

import numpy as np

from costmodel.leviathan import check_positive_int, check_probability


def expected_tokens_multiseq(alpha, gamma, b):
    """Expected accepted tokens per step (bonus included) with b independent speculations of length gamma.

    The longest accepted prefix L among the b sequences has P(L >= i) = 1 - (1 - alpha^i)^b, and the
    step commits L + 1 tokens, so E = 1 + sum_{i<=gamma} (1 - (1 - alpha^i)^b).
    """
    a = check_probability("alpha", alpha)
    g = check_positive_int("gamma", gamma)
    n_seq = check_positive_int("b", b)
    a, g, n_seq = np.broadcast_arrays(a, g, n_seq)
    g_max = int(g.max()) if g.size else 1
    total = np.zeros(a.shape)
    power = np.ones(a.shape)
    for i in range(1, g_max + 1):
        power = power * a
        miss_all = (1.0 - power) ** n_seq
        total += np.where(i <= g, miss_all, 0.0)
    return (g + 1.0) - total
