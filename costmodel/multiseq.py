"""Multi-sequence speculation (Fu et al. 2024, Eq. 5): b speculated sequences of gamma tokens each,
iid per-token acceptance.

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
    shape = np.broadcast_shapes(a.shape, g.shape, n_seq.shape)
    a_flat, g_flat, b_flat = (np.broadcast_to(x, shape).ravel() for x in (a, g, n_seq.astype(float)))
    total = np.zeros(a_flat.shape)
    power = np.ones(a_flat.shape)
    with np.errstate(divide="ignore"):
        for i in range(1, int(g_flat.max(initial=1)) + 1):
            power *= a_flat
            miss_all = np.exp(b_flat * np.log1p(-power))   # (1 - alpha^i)^b; exactly 0 when alpha = 1
            miss_all *= g_flat >= i
            total += miss_all
    return ((g_flat + 1.0) - total).reshape(shape)
