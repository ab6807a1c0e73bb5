"""Kangaroo (Liu et al., 2024): CTAR, early-exit drafting with threshold eta, compression rate, speedup.

Drafting stops after the first token whose top-1 confidence is <= eta (that token is still
verified) or after gamma tokens. Confidences fall in bins with frequency freq[b]; a bin's tokens
continue drafting with probability cont[b] (default: the share of the bin above eta, confidence
uniform inside a bin) and match the target with probability hit[b]; positions are independent.
Compression rate CR = expected tokens per target forward (Eq. 1), bonus included.
"""
from __future__ import annotations

import numpy as np

from costmodel.leviathan import check_nonnegative, check_positive_int, check_probability, generation_tokens
from costmodel.params import Arch, attention_params


def ctar(w, alpha=None, beta=None):
    """CTAR(w) = P(the first w draft tokens are all accepted): alpha^w, or prod_{j<=w} beta_j."""
    ww = check_positive_int("w", w)
    if (alpha is None) == (beta is None):
        raise ValueError("give exactly one of alpha (per-token acceptance) or beta (per-position acceptance)")
    if alpha is not None:
        return check_probability("alpha", alpha) ** ww
    b = check_probability("beta", beta)
    if np.any(ww > b.shape[-1]):
        raise ValueError(f"w = {int(np.max(ww))} exceeds the {b.shape[-1]} positions in beta")
    return np.cumprod(b, axis=-1)[..., ww - 1]


def ctar_empirical(accepted_per_step, w):
    """Eq. 2: share of steps whose committed tokens s_k exceed w (s_k includes the bonus token)."""
    s = np.asarray(accepted_per_step, dtype=float)
    if s.ndim != 1 or s.size == 0 or np.any(s < 1):
        raise ValueError("accepted_per_step must be a non-empty 1-D list of counts >= 1")
    return np.mean(s[:, None] - check_positive_int("w", w).reshape(-1)[None, :] > 0, axis=0)


def continue_probability(eta, n_bins: int = 11):
    """Share of each confidence bin [b/10, (b+1)/10) above eta, confidence uniform within a bin."""
    e = check_probability("eta", eta)
    lower = np.arange(n_bins) / 10.0
    upper = np.minimum(lower + 0.1, 1.0)
    width = np.where(upper > lower, upper - lower, 1.0)
    share = np.clip((upper - e[..., None]) / width, 0.0, 1.0)
    return np.where(upper > lower, share, (lower > e[..., None]).astype(float))


def early_exit(freq, hit, eta, gamma, cont=None, new_tokens=None):
    """(expected draft steps, expected tokens per step = CR) under early exit.

    freq, hit: (n_bins,) bin frequencies (sum 1) and P(top-1 matches the target | bin); eta the
    threshold (ignored if cont, the per-bin continue probability, is given); gamma max draft steps.
    E[steps] = sum_{i<=g} c^(i-1) with c = P(continue); CR = 1 + sum_{i<=g} u^(i-1) a with
    u = P(match and continue), a = P(match); over a generation of `new_tokens` where given
    (`leviathan.generation_tokens`).
    """
    f = check_probability("bin frequency", freq)
    h = check_probability("hit", hit)
    if abs(f.sum() - 1.0) > 1e-6 or f.shape != h.shape:
        raise ValueError("freq must sum to 1 and have the same bins as hit")
    c_bins = continue_probability(eta, f.shape[-1]) if cont is None else check_probability("cont", cont)
    g = check_positive_int("gamma", gamma)
    c = np.sum(f * c_bins, axis=-1)
    u = np.sum(f * h * c_bins, axis=-1)
    a = np.sum(f * h, axis=-1)
    powers = np.arange(int(np.max(g)))
    mask = powers < np.asarray(g)[..., None]
    steps = np.sum(np.where(mask, np.asarray(c)[..., None] ** powers, 0.0), axis=-1)
    reach = np.where(mask, np.asarray(a)[..., None] * np.asarray(u)[..., None] ** powers, 0.0)
    return steps, generation_tokens(reach, new_tokens)


def speedup(compression_rate, draft_steps, shallow_cost, adapter_cost):
    """Walltime speedup of self-drafting with a shared shallow sub-network.

    Costs are fractions of one full target forward: each draft step runs the shallow layers plus
    the adapter (and LM head, include it in adapter_cost); verification runs only the remaining
    layers, 1 - shallow_cost, since the drafted tokens' shallow features are reused.
    """
    s = check_nonnegative("shallow cost", shallow_cost)
    if np.any(s >= 1):
        raise ValueError("shallow cost must be a fraction < 1 of the full forward")
    cycle = check_nonnegative("draft steps", draft_steps) * (s + check_nonnegative("adapter cost", adapter_cost)) + (1 - s)
    return np.asarray(compression_rate, dtype=float) / cycle


def adapter_params(hidden, vocab, with_head=False):
    """Kangaroo's adapter: one attention block (4 hidden^2) plus two norms (2 hidden), LM head shared
    unless with_head (+ hidden x vocab)."""
    d = check_positive_int("hidden", hidden)
    return 4 * d * d + 2 * d + (d * check_positive_int("vocab", vocab) if with_head else 0)


def drafter_arch(t: Arch, base: dict, **options) -> dict:
    """The self-draft model's architecture (`costmodel.params.drafter_arch("kangaroo", ...)`): the
    target's first `exit_layer` layers plus an adapter of one attention block and two norms, with
    the target's LM head. The shallow layers, their KV cache and the embeddings are the target's
    own (stored once); the adapter's weights and its one-layer KV cache are the drafter's."""
    exit_layer = int(options.get("exit_layer", 2))
    if not 1 <= exit_layer < t.n_layers:
        raise ValueError(f"kangaroo exit_layer {exit_layer} must lie in 1..{t.n_layers - 1}")
    return dict(base, n_layers=exit_layer, extra_params=attention_params(t) + 2 * t.hidden, extra_kv_layers=1,
                shared_layers=exit_layer, shared_embeddings=True,
                source=f"Kangaroo: target layers 1..{exit_layer} + adapter (attention + 2 norms), target LM head")
