"""Lookahead decoding in closed form (Fu et al., 2024, Sec. 4): Eq. 5 with b = G, gamma = N - 1, and Eq. 7.

S = (f - 1 + E) / f is the step compression ratio (tokens per step): one step in f has a good
speculation committing E tokens (Eq. 5 with per-token alpha), the other f - 1 commit one token.
A step feeds (W + G)(N - 1) input tokens (lookahead branch + verification branch), so its walltime
comes from a latency model evaluated at that size; prompt-as-reference n-grams are not modelled.
Eq. 7 serves the papers' profiles, fitted to their tables.

Fitted on the engine's own steps, the pool's growth (last section) replaces f: whether a step finds
a candidate at all depends on the n-grams the window has collected, so a small W and a short
generation gain little, which a steady-state f fitted at a few W cannot tell.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import special

from costmodel.leviathan import check_positive_int, latency_at
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
# start with the pending token is modelled as Poisson with mean `pool`, so a step verifies
# E[min(G, Poisson(pool))] candidates of N - 1 tokens (Eq. 7 Profiles that carry a fill; Profiles
# fitted on the engine's steps use the pool's growth below, which prices the candidates itself).

def _poisson_pmf(k, mu) -> np.ndarray:
    """P(X = k), X ~ Poisson(mu), by scipy.stats.poisson's own formula (scipy.special only: importing
    scipy.stats costs each sweep worker about a second)."""
    k = np.asarray(k)
    kept = np.maximum(k, 0)
    return np.where(k >= 0, np.exp(special.xlogy(kept, mu) - special.gammaln(kept + 1) - mu), 0.0)


def _poisson_sf(k, mu) -> np.ndarray:
    """P(X > k), X ~ Poisson(mu), as scipy.stats.poisson.sf computes it (1 below the support)."""
    k = np.asarray(k)
    return np.where(k >= 0, special.pdtrc(np.floor(np.maximum(k, 0)), mu), 1.0)


def expected_candidates(g, pool) -> np.ndarray:
    """E[min(G, X)], X ~ Poisson(pool): the candidate n-grams one step verifies."""
    g_arr = check_positive_int("G", g)
    pool = float(pool)
    if not np.isfinite(pool) or pool < 0:
        raise ValueError(f"pool (mean matching n-grams) must be a finite number >= 0; got {pool!r}")
    j = np.arange(1, int(np.max(g_arr)) + 1)
    tail = _poisson_sf(j - 1, pool)                                    # P(X >= j)
    return np.cumsum(tail)[g_arr - 1]


def expected_forward_tokens(n, w, g, pool=None) -> np.ndarray:
    """Query tokens of one step: the pending token, the W (N - 1) window and the candidates'
    N - 1 tokens each; `pool` None prices a full pool (G candidates: the paper's (W + G)(N - 1) + 1)."""
    n_arr, w_arr, g_arr = (check_positive_int(k, x) for k, x in (("N", n), ("W", w), ("G", g)))
    cands = g_arr if pool is None else expected_candidates(g_arr, pool)
    return 1.0 + (w_arr + cands) * (n_arr - 1)


# ------------------------------------------------------------------------------ the pool's growth
# On the engine's own steps, whether a step finds any candidate at all decides most of
# Lookahead's gain, and that depends on how many n-grams the window has collected so far.
# A window of W harvests W n-grams per step once its N - 1 levels are full (from step N - 2 on), so
# by step t the pool holds W max(0, t - N + 2). A step finds candidates with probability
# hit (1 - exp(-collected / fill)); it then verifies K = min(G, 1 + Poisson(pool)) of them. A
# candidate's first token is accepted with alpha and each later one, given the ones before, with
# alpha_next (a matching n-gram tends to go on matching, so alpha_next runs above alpha). The
# candidates share their first token and are far from independent, so the longest accepted prefix
# follows Eq. 5's tail with b = 1 + spread (K - 1) effective speculations (spread 0: one, 1: K
# independent).
# On short generations the warm-up and a small W dominate; Eq. 7's f assumes a steady state.

def collected_ngrams(n, w, step) -> np.ndarray:
    """N-grams the pool holds before step `step` (0-based) of a generation."""
    return np.asarray(w) * np.maximum(0, np.asarray(step) - np.asarray(n) + 2)


def hit_probability(hit, fill, collected) -> np.ndarray:
    """P(a step finds at least one candidate) with `collected` n-grams in the pool."""
    return hit * -np.expm1(-np.asarray(collected, dtype=float) / fill)


def candidate_pmf(g, pool) -> np.ndarray:
    """P(K = k | hit) for k = 1..max(G), K = min(G, 1 + Poisson(pool)): one row per G."""
    g_arr = np.atleast_1d(check_positive_int("G", g))
    k = np.arange(1, int(g_arr.max()) + 1)
    pmf = np.where(k[None, :] < g_arr[:, None], _poisson_pmf(k - 1, pool)[None, :], 0.0)
    pmf[np.arange(g_arr.size), g_arr - 1] = _poisson_sf(g_arr - 2, pool)     # K = G: X >= G - 1
    return pmf


def prefix_tail(model, gamma, k) -> np.ndarray:
    """P(L >= i), i = 1..max(gamma), for the longest accepted prefix L of k candidates: one
    candidate's alpha alpha_next^(i - 1), through Eq. 5 with b = 1 + spread (k - 1); positions past
    gamma are 0. Broadcasts gamma and k (trailing axis: i)."""
    gamma, k = np.asarray(gamma), np.asarray(k, dtype=float)
    i = np.arange(1, int(np.max(gamma)) + 1)
    b = (1.0 + model.spread * (k - 1.0))[..., None]
    one = np.minimum(model.alpha * model.alpha_next ** (i - 1.0), 1 - 1e-12)
    return -np.expm1(b * np.log1p(-one)) * (i <= gamma[..., None])


def prefix_pmf(model, n, g) -> tuple[np.ndarray, np.ndarray]:
    """Per (N, G): (P(L = l | hit), l = 0..max(N) - 1, over the candidates a hit step verifies;
    the mean candidates E[K | hit])."""
    n_arr, g_arr = np.broadcast_arrays(np.atleast_1d(check_positive_int("N", n)), np.atleast_1d(check_positive_int("G", g)))
    pmf = candidate_pmf(g_arr, model.pool)                                   # (M, K)
    k = np.arange(1, pmf.shape[1] + 1)
    tail = np.einsum("mk,mki->mi", pmf, prefix_tail(model, (n_arr - 1)[:, None], k[None, :]))    # P(L >= i)
    ones, zeros = np.ones((len(n_arr), 1)), np.zeros((len(n_arr), 1))
    return -np.diff(np.concatenate([ones, tail, zeros], axis=1), axis=1), pmf @ k


def pool_trajectory(model, n, w, g, new_tokens: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(tokens per step (M,), query-token grid (V,), P(a step verifies that many) (M, V)) of a
    generation of `new_tokens` under the pool-growth model (`model`: alpha, alpha_next, spread,
    hit, fill, pool), exact: the distribution of tokens committed is carried step by step until the
    generation ends (the last step clipped), which weighs each step by the chance it runs. The
    verify sizes are a distribution, not a mean, because a CPU's forward latency is far from linear
    at a few tokens. None: the steady state (a full window, a pool collected long enough)."""
    n_arr, w_arr, g_arr = np.broadcast_arrays(*(np.atleast_1d(check_positive_int(k, x)) for k, x in
                                               (("N", n), ("W", w), ("G", g))))
    jumps, _ = prefix_pmf(model, n_arr, g_arr)                                 # P(L = l | hit): (M, I + 1)
    m = len(n_arr)
    if new_tokens is None:
        tokens = 1.0 + model.hit * (jumps @ np.arange(jumps.shape[1]))
        weight = np.ones((m, 1))                                               # one step at a full window
        hits, levels = np.full((m, 1), model.hit), (n_arr - 1)[:, None]
    else:
        total = int(check_positive_int("new_tokens", new_tokens))
        steps = np.arange(total)[None, :]
        hits = hit_probability(model.hit, model.fill, collected_ngrams(n_arr[:, None], w_arr[:, None], steps))
        levels = np.minimum(steps + 1, n_arr[:, None] - 1)
        weight = np.zeros((m, total))                  # P(step t runs)
        committed = np.zeros((m, total))               # P(c tokens committed, c < total: still generating)
        committed[:, 0] = 1.0
        for t in range(total):                         # >= 1 token per step: done after `total` steps
            weight[:, t] = committed.sum(axis=1)
            h, moved = hits[:, t], np.zeros_like(committed)
            for length in range(min(jumps.shape[1], total - 1)):   # the step commits 1 + length tokens
                p = h * jumps[:, length] + (1.0 - h) * (length == 0)
                moved[:, length + 1:] += committed[:, :total - length - 1] * p[:, None]
            committed = moved
        tokens = total / weight.sum(axis=1)
        weight = weight / weight.sum(axis=1, keepdims=True)
    return (tokens, *verify_distribution(model, n_arr, w_arr, g_arr, weight, hits, levels))


def verify_distribution(model, n, w, g, weight, hits, levels) -> tuple[np.ndarray, np.ndarray]:
    """(query-token grid 1..V, probability (M, V)): steps weighted by `weight` (M, T), each with
    its window of `levels` (M, T) levels of W and min(G, 1 + Poisson(pool)) candidates of N - 1
    tokens with probability `hits` (M, T), none otherwise."""
    pmf = candidate_pmf(g, model.pool)                                          # (M, K)
    grid = np.arange(1, int(np.max(1 + (w + g) * (n - 1))) + 1)
    prob = np.zeros((len(n), grid.size))
    rows = np.arange(len(n))
    for level in np.unique(levels):
        at = levels == level
        none, some = (weight * (1.0 - hits) * at).sum(axis=1), (weight * hits * at).sum(axis=1)
        base = w * level                                                        # index of 1 + W level tokens
        ok = level <= n - 1
        np.add.at(prob, (rows[ok], base[ok]), none[ok])
        for k in range(1, pmf.shape[1] + 1):
            fits = ok & (k <= g)               # a row of smaller G has no k candidates (its grid may end first)
            np.add.at(prob, (rows[fits], (base + k * (n - 1))[fits]), (some * pmf[:, k - 1])[fits])
    return grid, prob


def fit_pool_growth(n, w, g, step, candidates, accepted) -> dict[str, float]:
    """The pool-growth model from measured steps (one entry per step: its N, W, G, 0-based step
    index, candidates verified and tokens committed): hit and fill by maximum likelihood of
    "any candidate" against the n-grams collected, pool from the candidates of hit steps (per G),
    alpha, alpha_next and spread by maximum likelihood of the prefixes hit steps accepted."""
    from scipy.optimize import minimize

    n, w, g, step, cands, acc = (np.asarray(a, dtype=float) for a in (n, w, g, step, candidates, accepted))
    if n.size == 0 or not np.all(np.isfinite(cands)) or np.any(cands < 0) or np.any(acc < 1):
        raise ValueError("fitting the pool needs steps with candidates >= 0 and tokens >= 1")
    found = cands > 0.5
    if found.sum() < 2 or found.all():
        raise ValueError(f"fitting the pool needs steps with and without candidates, got {int(found.sum())} "
                         f"of {n.size} with")
    collected = collected_ngrams(n, w, step)

    def nll(x):
        p = np.clip(hit_probability(1 / (1 + np.exp(-x[0])), np.exp(x[1]), collected), 1e-9, 1 - 1e-9)
        return -np.sum(np.where(found, np.log(p), np.log1p(-p)))
    best = minimize(nll, x0=np.array([0.0, np.log(20.0)]), method="Nelder-Mead",
                    options={"xatol": 1e-5, "fatol": 1e-7, "maxiter": 2000}).x
    hit, fill = 1 / (1 + np.exp(-best[0])), float(np.exp(best[1]))

    frame = pd.DataFrame({"gamma": (n - 1)[found].astype(int), "g": g[found].astype(int),
                          "k": np.rint(cands[found]).astype(int), "acc": acc[found]})
    per_g = frame.groupby("g")["k"].agg(["mean", "size"])
    pool = _fit_hit_pool(per_g["mean"].to_numpy(), per_g.index.to_numpy(), per_g["size"].to_numpy())
    counts = frame.assign(l=frame["acc"].astype(int) - 1).groupby(["gamma", "k", "l"]).size()
    prefix = _fit_prefix(*(counts.index.get_level_values(i).to_numpy() for i in range(3)), counts.to_numpy())
    return {**prefix, "hit": float(hit), "fill": fill, "pool": pool}


def _fit_prefix(gamma, k, length, count) -> dict[str, float]:
    """alpha, alpha_next, spread by maximum likelihood of the accepted prefix lengths of hit steps
    (`count` steps with k candidates of gamma tokens accepted `length`), on a grid and then refined
    (Nelder-Mead from the best cell)."""
    from types import SimpleNamespace

    from scipy.optimize import minimize

    rows = np.arange(len(gamma))

    def nll(a, b, s):
        tail = prefix_tail(SimpleNamespace(alpha=a, alpha_next=b, spread=s), gamma, k)
        tail = np.concatenate([np.ones((len(gamma), 1)), tail, np.zeros((len(gamma), 1))], axis=1)
        p = tail[rows, length] - tail[rows, length + 1]
        return float(-np.sum(count * np.log(np.maximum(p, 1e-12))))
    grid = [(a, b, s) for a in np.linspace(0.02, 0.98, 25) for b in np.linspace(0.02, 0.98, 25)
            for s in np.linspace(0.0, 1.0, 6)]
    start = min(grid, key=lambda x: nll(*x))
    clipped = lambda x: np.clip(x, [1e-3, 1e-3, 0.0], [0.999, 0.999, 1.0])
    best = clipped(minimize(lambda x: nll(*clipped(x)), np.array(start), method="Nelder-Mead",
                            options={"xatol": 1e-4, "fatol": 1e-9, "maxiter": 2000}).x)
    return {"alpha": float(best[0]), "alpha_next": float(best[1]), "spread": float(best[2])}


def _fit_hit_pool(mean_k, g, weight) -> float:
    """The Poisson mean whose E[min(G, 1 + X)] best matches each G's mean candidates of hit steps."""
    from scipy.optimize import minimize_scalar

    def loss(lam):
        pmf = candidate_pmf(g.astype(np.int64), lam)
        return float(np.sum(weight * (pmf @ np.arange(1, pmf.shape[1] + 1) - mean_k) ** 2))
    bound = float(np.max(mean_k)) * 4.0 + 1.0
    return float(minimize_scalar(loss, bounds=(0.0, bound), method="bounded", options={"xatol": 1e-4}).x)
