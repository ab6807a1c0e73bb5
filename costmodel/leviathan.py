"""Chain speculative decoding in closed form (Leviathan et al., 2023), vectorised over configurations.

Three definitions of "acceptance rate" appear in the papers; every function here says which it takes:
- alpha (per-token probability): P(a draft token is accepted | all earlier ones were), Leviathan's
  alpha = E[sum_x min(p(x), q(x))]; under greedy decoding, P(draft top-1 == target top-1).
- vLLM's rate: accepted draft tokens / drafted tokens over a run = (E - 1) / gamma
  (`vllm_rate` and `alpha_from_vllm_rate` convert).
- MCSD's alpha@k: P(a step with k candidates accepts one of them); alpha@1 is the per-token alpha.
The validators at the bottom of this module are the shared input checks of `costmodel`.
Everything broadcasts like numpy and returns float arrays (0-d for scalar input).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

# ---- expected tokens per step -------------------------------------------------------------------


def expected_tokens(alpha, gamma):
    """Expected tokens committed per target forward, bonus included: (1 - a^(g+1)) / (1 - a).

    alpha: per-token acceptance probability in [0, 1]; gamma: draft length >= 1 (integers).
    """
    a = check_probability("alpha", alpha)
    g = check_positive_int("gamma", gamma)
    d = 1.0 - a
    with np.errstate(divide="ignore", invalid="ignore"):
        # -expm1((g+1) log1p(-d)) / d == (1 - a^(g+1)) / (1 - a) without cancellation near a = 1
        geometric = -np.expm1((g + 1) * np.log1p(-d)) / d
    return np.where(a >= 1.0, g + 1.0, np.where(a <= 0.0, 1.0, geometric))


def expected_tokens_by_position(beta, gamma=None, new_tokens=None):
    """Position-dependent form: 1 + sum_{i<=g} prod_{j<=i} beta_j.

    beta: array (..., G) of per-position conditional acceptance probabilities (beta_i = P(token i
    accepted | tokens 1..i-1 accepted)); gamma (optional, broadcast against beta[..., 0]) uses only
    the first gamma positions (default all G); new_tokens: over a generation of that many tokens
    (`generation_tokens`), default the steady state.
    """
    b = check_probability("beta", beta)
    if b.ndim == 0 or b.shape[-1] == 0:
        raise ValueError("beta must have a last axis of positions, length >= 1")
    reach = np.cumprod(b, axis=-1)
    if gamma is not None:
        g = check_positive_int("gamma", gamma)
        if np.any(g > b.shape[-1]):
            raise ValueError(f"gamma {int(np.max(g))} exceeds the {b.shape[-1]} positions given in beta")
        reach = reach * (np.arange(1, b.shape[-1] + 1) <= g[..., None])
    return generation_tokens(reach, new_tokens)


def generation_tokens(reach, new_tokens=None):
    """Tokens a step commits on average, bonus included, from reach[..., i - 1] = P(a step commits
    more than i tokens), i = 1..G. None: the steady state, 1 + sum(reach). Else over a generation
    that stops after `new_tokens` (its last step clipped there): new_tokens / E[steps], exact.
    A step starts at every committed count the generation stops on below new_tokens, so E[steps]
    sums the renewal probabilities u(n) = sum_j P(X = j) u(n - j), u(0) = 1, over n < new_tokens;
    u(n) settles at 1 / E[X] geometrically, and once a row's last G + 1 have, the rest of that row is
    summed in closed form and the row leaves the loop (most settle in ~70 steps, a few take 200); the
    arrays hold one row per lag, so each step is a few contiguous vector operations written in place
    (a third of the sweep's scoring is spent here). Short generations matter: a step's tokens past the
    end are wasted (at 32 tokens and E[X] = 4.3, 8% fewer per step than the steady state)."""
    r = np.asarray(reach, dtype=float)
    if r.ndim == 0 or r.shape[-1] == 0:
        raise ValueError("reach must have a last axis of positions, length >= 1")
    if np.any(~np.isfinite(r)) or np.any(r < 0) or np.any(r > 1) or np.any(np.diff(r, axis=-1) > 1e-12):
        raise ValueError("reach must be probabilities in [0, 1], non-increasing along positions")
    mean = 1.0 + r.sum(axis=-1)
    if new_tokens is None:
        return mean
    total = int(check_positive_int("new_tokens", new_tokens))
    flat = r.reshape(-1, r.shape[-1])
    survival = np.concatenate([np.ones((flat.shape[0], 1)), flat, np.zeros((flat.shape[0], 1))], axis=1)
    p = np.ascontiguousarray((survival[:, :-1] - survival[:, 1:]).T)     # p[j - 1] = P(X = j), j = 1..G + 1
    width = p.shape[0]
    ring = width + 1                             # u(n - width) is read while u(n) is written: one slot more
    limit = 1.0 / mean.reshape(-1)
    history = np.zeros((ring, flat.shape[0]))    # history[m % ring] = u(m)
    history[0] = 1.0                             # u(0)
    steps = np.ones(flat.shape[0])               # E[steps] per row, final once its row leaves
    live = np.arange(flat.shape[0])              # rows still in the loop
    summed = steps.copy()                        # E[steps] so far of the live rows
    unsettled = np.ones(live.size, bool)         # of those, the ones not settled yet
    near = np.zeros(live.size, np.int64)         # how many u(n) in a row lie within 1e-13 of the limit
    term = np.empty(live.size)
    gap = np.empty(live.size)
    close = np.empty(live.size, bool)
    for n in range(1, total):
        u = history[n % ring]
        np.multiply(p[0], history[(n - 1) % ring], out=u)
        for j in range(2, width + 1):
            np.multiply(p[j - 1], history[(n - j) % ring], out=term)
            u += term
        np.add(summed, u, out=summed, where=unsettled)
        np.subtract(u, limit, out=gap)
        np.less(np.abs(gap, out=gap), 1e-13, out=close)
        near += 1
        near *= close
        if n >= width:
            settled = unsettled & (near >= width)     # the whole ring, u(n - width + 1..n), at the limit
            if settled.any():
                summed[settled] += (total - 1 - n) * limit[settled]     # the rest of a settled row, closed form
                unsettled &= ~settled
            if (live.size - np.count_nonzero(unsettled)) * 8 > live.size:   # drop the settled rows once an eighth
                steps[live[~unsettled]] = summed[~unsettled]
                keep = unsettled
                live, p, history, limit, summed, near = (live[keep], p[:, keep], history[:, keep], limit[keep],
                                                         summed[keep], near[keep])
                unsettled = np.ones(live.size, bool)
                term, gap, close = np.empty(live.size), np.empty(live.size), np.empty(live.size, bool)
                if not live.size:
                    break
    steps[live] = summed
    return (total / steps).reshape(mean.shape)


def alpha_from_expected_tokens(tau, gamma, iterations: int = 60):
    """Invert `expected_tokens`: the per-token alpha that gives tau tokens per step at draft length gamma.

    tau must lie in [1, gamma + 1]. Vectorised bisection (monotone in alpha), error < 2^-iterations.
    """
    g = check_positive_int("gamma", gamma)
    t = np.asarray(tau, dtype=float)
    if np.any(~np.isfinite(t)) or np.any(t < 1.0) or np.any(t > g + 1.0):
        raise ValueError("tau must lie in [1, gamma + 1] (expected tokens per step, bonus included)")
    lo = np.zeros(np.broadcast(t, g).shape)
    hi = np.ones_like(lo)
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        below = expected_tokens(mid, g) < t
        lo = np.where(below, mid, lo)
        hi = np.where(below, hi, mid)
    return 0.5 * (lo + hi)


def vllm_rate(alpha, gamma):
    """vLLM's draft acceptance rate (accepted / drafted) implied by per-token alpha: (E - 1) / gamma."""
    g = check_positive_int("gamma", gamma)
    return (expected_tokens(alpha, g) - 1.0) / g


def alpha_from_vllm_rate(rate, gamma):
    """Per-token alpha from vLLM's accepted/drafted rate at draft length gamma (iid acceptance assumed)."""
    g = check_positive_int("gamma", gamma)
    r = check_probability("vLLM acceptance rate", rate)
    return alpha_from_expected_tokens(1.0 + r * g, g)


# ---- speedup --------------------------------------------------------------------------------------


def speedup(alpha, gamma, c):
    """Leviathan's expected walltime improvement: (1 - a^(g+1)) / ((1 - a)(g c + 1)).

    alpha: per-token acceptance; c: cost coefficient = draft forward time / target forward time
    (>= 0), with verification of gamma + 1 tokens assumed to cost one target forward.
    """
    cost = check_nonnegative("c", c)
    g = check_positive_int("gamma", gamma)
    return expected_tokens(alpha, g) / (g * cost + 1.0)


def optimal_gamma(alpha, c, max_gamma: int = 32):
    """The integer gamma in 1..max_gamma that maximises `speedup`, and that speedup (both arrays)."""
    a = check_probability("alpha", alpha)
    cost = check_nonnegative("c", c)
    if int(max_gamma) < 1:
        raise ValueError(f"max_gamma must be >= 1, got {max_gamma}")
    gammas = np.arange(1, int(max_gamma) + 1)
    values = speedup(a[..., None], gammas, cost[..., None])
    best = np.argmax(values, axis=-1)
    return gammas[best], np.take_along_axis(values, best[..., None], axis=-1)[..., 0]


def speedup_from_latency(tokens_per_step, gamma, draft_latency, target_latency):
    """Walltime speedup of a chain step against plain decoding, through a latency model.

    tokens_per_step: expected tokens per step (any acceptance model); draft_latency(n_tokens) and
    target_latency(n_tokens): seconds for one forward of n query tokens, given as callables or as
    arrays indexed by n_tokens. One step = gamma draft forwards of 1 token + one target forward of
    gamma + 1 tokens; plain decoding = one target forward of 1 token per token.
    """
    g = check_positive_int("gamma", gamma)
    draft = latency_at(draft_latency, np.ones_like(g))
    verify = latency_at(target_latency, g + 1)
    baseline = latency_at(target_latency, np.ones_like(g))
    return np.asarray(tokens_per_step, dtype=float) * baseline / (g * draft + verify)


def latency_at(latency: Callable | np.ndarray, n_tokens):
    """Seconds per forward of n_tokens from a callable or an array indexed by n_tokens."""
    n = np.asarray(n_tokens)
    if callable(latency):
        return np.asarray(latency(n), dtype=float)
    table = np.asarray(latency, dtype=float)
    if table.ndim != 1:
        raise ValueError("a latency array must be 1-D, indexed by the number of query tokens")
    if np.any(n < 0) or np.any(n >= table.shape[0]):
        raise ValueError(f"latency array covers n_tokens 0..{table.shape[0] - 1}, asked for {int(np.max(n))}")
    return table[n]


# ---- shared input checks (one clear line each) ----------------------------------------------------


def check_probability(name: str, x) -> np.ndarray:
    """x as a float array, or ValueError if any entry is outside [0, 1] or not a number."""
    arr = np.asarray(x, dtype=float)
    bad = ~((arr >= 0.0) & (arr <= 1.0))
    if np.any(bad):
        raise ValueError(f"{name} must lie in [0, 1]; got {float(arr[bad].flat[0]):g}")
    return arr


def check_positive_int(name: str, x) -> np.ndarray:
    """x as an integer array, or ValueError if any entry is not an integer >= 1."""
    arr = np.asarray(x)
    if arr.dtype.kind not in "iu":
        as_float = arr.astype(float)
        if np.any(~np.isfinite(as_float)) or np.any(as_float != np.round(as_float)):
            bad = as_float[~np.isfinite(as_float) | (as_float != np.round(as_float))]
            raise ValueError(f"{name} must be an integer >= 1; got {float(bad.flat[0]):g}")
        arr = as_float.astype(np.int64)
    if np.any(arr < 1):
        raise ValueError(f"{name} must be an integer >= 1; got {arr[arr < 1].flat[0]}")
    return arr


def check_nonnegative(name: str, x) -> np.ndarray:
    """x as a float array, or ValueError if any entry is negative or not finite."""
    arr = np.asarray(x, dtype=float)
    bad = ~(np.isfinite(arr) & (arr >= 0.0))
    if np.any(bad):
        raise ValueError(f"{name} must be a finite number >= 0; got {float(arr[bad].flat[0]):g}")
    return arr
