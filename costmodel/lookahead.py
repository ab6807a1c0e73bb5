"""Lookahead decoding in closed form (Fu et al., 2024, Sec. 4): Eq. 5 with b = G, gamma = N - 1, and Eq. 7.

S = (f - 1 + E) / f is the step compression ratio (tokens per step): one step in f has a good
speculation committing E tokens (Eq. 5 with per-token alpha), the other f - 1 commit one token.
A step feeds (W + G)(N - 1) input tokens (lookahead branch + verification branch), so its walltime
comes from a latency model evaluated at that size; prompt-as-reference n-grams are not modelled.
"""
from __future__ import annotations

import numpy as np

from costmodel.leviathan import check_positive_int, check_probability, latency_at
from costmodel.multiseq import expected_tokens_multiseq


def _check_f(f) -> np.ndarray:
    arr = np.asarray(f, dtype=float)
    if np.any(~np.isfinite(arr)) or np.any(arr < 1.0):
        raise ValueError(f"f (steps per good speculation) must be >= 1; got {float(np.min(arr)):g}")
    return arr


def compression_ratio(alpha, f, n, w, g):
    """Eq. 7 S = (f - 1 + E) / f with E = Eq. 5(alpha, gamma = N - 1, b = G). W only enters cost."""
    n_arr = check_positive_int("N", n)
    if np.any(n_arr < 2):
        raise ValueError("N (n-gram size) must be >= 2 so that gamma = N - 1 >= 1")
    check_positive_int("W", w)
    f_arr = _check_f(f)
    e = expected_tokens_multiseq(alpha, n_arr - 1, check_positive_int("G", g))
    return (f_arr - 1.0 + e) / f_arr


def input_tokens_per_step(n, w, g):
    """(W + G)(N - 1): query tokens of one Lookahead forward (the paper's FLOPs multiplier)."""
    return (check_positive_int("W", w) + check_positive_int("G", g)) * (check_positive_int("N", n) - 1)


def walltime_speedup(alpha, f, n, w, g, latency):
    """S * L(1) / L((W + G)(N - 1)): tokens per second against plain decoding through a latency model.

    latency: callable n_tokens -> seconds of one target forward, or an array indexed by n_tokens.
    """
    s = compression_ratio(alpha, f, n, w, g)
    tokens = input_tokens_per_step(n, w, g)
    return s * latency_at(latency, np.ones_like(tokens)) / latency_at(latency, tokens)


def fit_alpha_f(measured_s, n, w, g, alpha_grid: int = 400, f_grid: int = 400, f_max: float = 20.0):
    """Least-squares alpha and f from measured compression ratios at several (N, W, G).

    Grid search over alpha in (0, 1) and f in [1, f_max], then one refinement around the best cell.
    Returns (alpha, f, rms relative error). Needs at least two configurations.
    """
    s_obs = np.asarray(measured_s, dtype=float)
    if s_obs.ndim != 1 or s_obs.size < 2:
        raise ValueError("fitting alpha and f needs measured S at two or more (N, W, G) configurations")
    if np.any(s_obs < 1.0):
        raise ValueError("measured compression ratio S must be >= 1")
    n_arr, w_arr, g_arr = (np.broadcast_to(check_positive_int(nm, x), s_obs.shape) for nm, x in
                           (("N", n), ("W", w), ("G", g)))
    lo_a, hi_a, lo_f, hi_f = 1e-4, 1.0 - 1e-4, 1.0, float(f_max)
    for _ in range(3):
        alphas = np.linspace(lo_a, hi_a, alpha_grid)
        fs = np.linspace(lo_f, hi_f, f_grid)
        e = expected_tokens_multiseq(alphas[:, None], n_arr - 1, g_arr)          # (A, M)
        pred = (fs[None, :, None] - 1.0 + e[:, None, :]) / fs[None, :, None]     # (A, F, M)
        loss = np.mean(((pred - s_obs) / s_obs) ** 2, axis=-1)
        ia, jf = np.unravel_index(np.argmin(loss), loss.shape)
        da, df = (hi_a - lo_a) / alpha_grid * 4, (hi_f - lo_f) / f_grid * 4
        best = (alphas[ia], fs[jf], float(np.sqrt(loss[ia, jf])))
        lo_a, hi_a = max(1e-6, best[0] - da), min(1 - 1e-9, best[0] + da)
        lo_f, hi_f = max(1.0, best[1] - df), best[1] + df
    return best


# ------------------------------------------------------------------------------ the pool's fill
# The verification branch verifies at most G pool n-grams starting with the pending token, but the
# pool holds only what the window has collected so far: on short generations far fewer than G (the
# SmolLM2 engine averaged 0.3-1.6 candidates per step at G = 4-40). The count of stored n-grams that
# start with the pending token is modelled as Poisson with mean `pool` (fitted per dataset from the
# engine's StepTraces), so a step verifies E[min(G, Poisson(pool))] candidates of N - 1 tokens.

def expected_candidates(g, pool) -> np.ndarray:
    """E[min(G, X)], X ~ Poisson(pool): the candidate n-grams one step verifies."""
    from scipy.stats import poisson

    g_arr = check_positive_int("G", g)
    pool = float(pool)
    if not np.isfinite(pool) or pool < 0:
        raise ValueError(f"pool (mean matching n-grams) must be a finite number >= 0; got {pool!r}")
    j = np.arange(1, int(np.max(g_arr)) + 1)
    tail = poisson.sf(j - 1, pool)                                     # P(X >= j)
    return np.cumsum(tail)[g_arr - 1]


def expected_forward_tokens(n, w, g, pool=None) -> np.ndarray:
    """Query tokens of one step: the pending token, the W (N - 1) window and the candidates'
    N - 1 tokens each; `pool` None prices a full pool (G candidates: the paper's (W + G)(N - 1) + 1)."""
    n_arr, w_arr, g_arr = (check_positive_int(k, x) for k, x in (("N", n), ("W", w), ("G", g)))
    cands = g_arr if pool is None else expected_candidates(g_arr, pool)
    return 1.0 + (w_arr + cands) * (n_arr - 1)


def fit_pool(candidates, g) -> float:
    """The Poisson mean whose capped expectation E[min(G, X)] best matches the mean `candidates`
    measured at each G (least squares over configurations, weighted alike)."""
    from scipy.optimize import minimize_scalar

    observed = np.asarray(candidates, dtype=float)
    g_arr = np.broadcast_to(check_positive_int("G", g), observed.shape)
    if observed.size == 0 or np.any(~np.isfinite(observed)) or np.any(observed < 0):
        raise ValueError("fitting the pool needs finite, non-negative measured candidates per step")
    if np.any(observed >= g_arr):                   # saturated: at least G everywhere it could tell
        bound = float(np.max(g_arr)) * 4.0
    else:
        bound = float(np.max(observed)) * 10.0 + 1.0
    loss = lambda lam: float(np.sum((expected_candidates(g_arr, lam) - observed) ** 2))
    return float(minimize_scalar(loss, bounds=(0.0, bound), method="bounded", options={"xatol": 1e-4}).x)
