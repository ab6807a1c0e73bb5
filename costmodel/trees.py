"""Multi-candidate trees: k-configurations (MCSD), alpha@k curves, top-k accuracy, best tree for a budget.

A k-configuration k1 x ... x kg drafts k_i candidates at depth i (MCSD's tree of prod(k) leaves).
Per-step acceptance with k candidates is MCSD's alpha@k; steps are taken independent, so a
configuration commits E = 1 + sum_i prod_{j<=i} alpha@k_j tokens (bonus included).
"""
from __future__ import annotations

import re
from functools import lru_cache

import numpy as np

from costmodel.leviathan import check_positive_int, check_probability

MAX_DEPTH = 64   # deepest chain or tree a configuration may ask for
_CONFIG_RE = re.compile(r"^\s*\d+(\s*[x×*]\s*\d+)*\s*$")


def parse_k_config(config) -> tuple[int, ...]:
    """'4x2x1', (4, 2, 1) or [4, 2, 1] -> (4, 2, 1); ValueError unless every factor is an integer >= 1."""
    if type(config) is tuple and config and set(map(type, config)) == {int} and min(config) >= 1 \
            and len(config) <= MAX_DEPTH:
        return config           # already one: a space labels 10^5 of them
    if isinstance(config, str):
        if not _CONFIG_RE.match(config):
            raise ValueError(f"k-configuration '{config}' is not a product of positive integers like '4x2x1'")
        factors = tuple(int(f) for f in re.split(r"[x×*]", config.replace(" ", "")))
    else:
        try:
            factors = tuple(config)
        except TypeError:
            factors = (config,)
        if not factors or not all(isinstance(f, (int, np.integer)) and not isinstance(f, bool) for f in factors):
            raise ValueError(f"k-configuration {config!r} is not a product of positive integers like (4, 2, 1)")
        factors = tuple(int(f) for f in factors)
    if not factors or any(f < 1 for f in factors):
        raise ValueError(f"k-configuration {config!r} is not a product of positive integers (factors must be >= 1)")
    if len(factors) > MAX_DEPTH:
        raise ValueError(f"k-configuration has {len(factors)} levels, at most {MAX_DEPTH} supported")
    return factors


def format_k_config(config) -> str:
    return "x".join(map(str, parse_k_config(config)))


def alpha_at_k_lookup(alpha_at_k, ks) -> np.ndarray:
    """alpha@k for each k in `ks` from a mapping {k: alpha} (keys int or str) or a curve array indexed k-1."""
    ks = check_positive_int("k", ks)
    if isinstance(alpha_at_k, dict):
        curve = {int(k): v for k, v in alpha_at_k.items()}
        missing = sorted({int(k) for k in np.unique(ks)} - set(curve))
        if missing:
            raise ValueError(f"alpha@k is not given for k = {', '.join(map(str, missing))} (given: {sorted(curve)})")
        table = np.zeros(max(curve) + 1)
        for k, v in curve.items():
            table[k] = v
        return check_probability("alpha@k", table)[ks]
    curve = check_probability("alpha@k", alpha_at_k)
    if np.any(ks > curve.shape[-1]):
        raise ValueError(f"alpha@k curve has {curve.shape[-1]} entries, k = {int(ks.max())} asked")
    return curve[..., ks - 1]


def expected_tokens_tree(configs, alpha_at_k):
    """Expected tokens per step (bonus included) of one k-configuration or a list of them.

    configs: "4x2x1", a tuple/list of ints (ONE configuration), or a list of strings/tuples.

    alpha_at_k: {k: alpha@k} or an array whose entry k-1 is alpha@k (may carry leading axes for
    several acceptance curves, broadcast against the configurations). Use the without-replacement
    curve for MCSS without replacement and the with-replacement curve otherwise.
    """
    single = isinstance(configs, (str, int, np.integer)) or (
        isinstance(configs, (list, tuple)) and all(isinstance(c, (int, np.integer)) for c in configs))
    parsed = [parse_k_config(configs)] if single else [parse_k_config(c) for c in configs]
    depth = max(len(c) for c in parsed)
    ks = np.ones((len(parsed), depth), dtype=np.int64)
    used = np.zeros((len(parsed), depth), dtype=bool)
    for row, cfg in enumerate(parsed):
        ks[row, : len(cfg)] = cfg
        used[row, : len(cfg)] = True
    if isinstance(alpha_at_k, dict):
        per_depth = alpha_at_k_lookup(alpha_at_k, ks)
    else:
        curve = check_probability("alpha@k", alpha_at_k)
        per_depth = alpha_at_k_lookup(curve, ks)
    reach = np.cumprod(np.where(used, per_depth, 1.0), axis=-1)
    tokens = 1.0 + np.sum(np.where(used, reach, 0.0), axis=-1)
    return tokens[..., 0] if single else tokens


def alpha_at_k_with_replacement(p, q, k):
    """Exact MCSS-with-replacement acceptance of one step: k iid draws from q verified against p.

    Candidate i is drawn from q and accepted with prob min(1, p_i(x)/q(x)), where p_i is the residual
    after i-1 rejections, p_{i+1} = norm(max(0, p_i - q)). So P(reject i | reached) = 1 - sum min(p_i, q)
    and alpha@k = 1 - prod_{i<=k} (1 - sum_x min(p_i(x), q(x))). p, q: (..., V) distributions.
    """
    p = check_probability("p", p)
    q = check_probability("q", q)
    kk = int(check_positive_int("k", k))
    residual = p / p.sum(axis=-1, keepdims=True)
    reject_all = np.ones(np.broadcast_shapes(p.shape, q.shape)[:-1])
    for _ in range(kk):
        overlap = np.minimum(residual, q).sum(axis=-1)
        reject_all = reject_all * (1.0 - overlap)
        excess = np.maximum(residual - q, 0.0)
        mass = excess.sum(axis=-1, keepdims=True)
        residual = np.where(mass > 0, excess / np.where(mass > 0, mass, 1.0), residual)
    return 1.0 - reject_all


def topk_accuracy(rank_probs, k):
    """Greedy top-k accuracy = alpha@k without replacement under greedy decoding.

    rank_probs: (..., R) with entry r-1 = P(the target's token has rank r in the draft's
    distribution); returns P(rank <= k). Under greedy decoding with replacement every candidate is
    the draft's top-1, so alpha@k with replacement = topk_accuracy(rank_probs, 1).
    """
    probs = check_probability("rank probability", rank_probs)
    kk = check_positive_int("k", k)
    cumulative = np.concatenate([np.zeros(probs.shape[:-1] + (1,)), np.cumsum(probs, axis=-1)], axis=-1)
    return np.minimum(cumulative[..., np.minimum(kk, probs.shape[-1])], 1.0)


# ---- Sequoia-style dynamic programme ------------------------------------------------------------


def best_tree(acceptance_by_rank, budget: int, max_depth: int | None = None):
    """Best token tree for a node budget, from P(the rank-r child is the accepted one | parent reached).

    acceptance_by_rank: 1-D, entry r-1 for the r-th ranked candidate (sum <= 1; the same at every
    depth). budget: number of draft tokens (nodes other than the root). Returns (expected tokens per
    step including the bonus, parents) where parents[i] is the parent of draft node i+1 (0 = root)
    and children are listed in rank order. Value of a tree = 1 + sum over draft nodes of the product
    of acceptance_by_rank along its path; the DP is exact for that model (Sequoia, Chen et al. 2024).
    """
    probs = check_probability("acceptance by rank", acceptance_by_rank)
    if probs.ndim != 1 or probs.size == 0:
        raise ValueError("acceptance by rank must be a non-empty 1-D array")
    if probs.sum() > 1.0 + 1e-9:
        raise ValueError(f"acceptance by rank must sum to at most 1; sums to {probs.sum():g}")
    n_budget = int(check_positive_int("budget", budget))
    depth_cap = n_budget if max_depth is None else int(check_positive_int("max_depth", max_depth))
    p = tuple(float(x) for x in probs)

    @lru_cache(maxsize=None)
    def subtree(n: int, depth: int) -> float:
        """Best value of a subtree of n nodes (its root counts 1) allowed `depth` more levels."""
        if n == 1 or depth == 0:
            return 1.0
        return 1.0 + children(n - 1, 0, depth)

    @lru_cache(maxsize=None)
    def children(m: int, rank: int, depth: int) -> float:
        """Best sum of p_r * subtree over children of ranks rank.. using m nodes in all."""
        if m == 0 or rank >= len(p):
            return 0.0
        best = 0.0  # ranks are used in order (rank r only after r-1), as a top-k expansion would
        for size in range(1, m + 1):
            best = max(best, p[rank] * subtree(size, depth - 1) + children(m - size, rank + 1, depth))
        return best

    value = subtree(n_budget + 1, depth_cap)
    parents: list[int] = []

    def build(n: int, depth: int, node: int) -> None:
        m, rank = n - 1, 0
        while m > 0 and depth > 0 and rank < len(p):
            target = children(m, rank, depth)
            for size in range(1, m + 1):
                if abs(p[rank] * subtree(size, depth - 1) + children(m - size, rank + 1, depth) - target) < 1e-12:
                    parents.append(node)
                    child = len(parents)
                    build(size, depth - 1, child)
                    m, rank = m - size, rank + 1
                    break
            else:  # pragma: no cover - the optimum is always attained by some size
                break

    build(n_budget + 1, depth_cap, 0)
    return value, parents


def tree_value(parents, acceptance_by_rank) -> float:
    """Expected tokens per step of a given tree (parents list as from `best_tree`, children in rank order)."""
    probs = check_probability("acceptance by rank", acceptance_by_rank)
    reach = [1.0]
    child_count: dict[int, int] = {}
    for parent in parents:
        rank = child_count.get(parent, 0)
        child_count[parent] = rank + 1
        reach.append(reach[parent] * (float(probs[rank]) if rank < probs.size else 0.0))
    return float(sum(reach))
