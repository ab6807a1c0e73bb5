"""CAPE (GLIDE paper, Sec. 4.2): confidence-aware proposal expansion, expected tokens and verification size.

At each of gamma draft positions the draft's top-1 confidence falls in bin b = floor(10 * conf)
(11 bins, conf == 1 -> bin 10) with frequency freq[b]; the bin array S[b] gives how many top-ranked
tokens are verified at that position (top-1 included, so S[b] - 1 expansion tokens). Only the top-1
chain is extended: if the target's token at position i is the draft's top-1 the step goes on; if it
is another of the top-S[b] it is accepted and the step ends (its logits give the bonus token).
Inputs: freq (11,), topk_hit {K: (11,)} = P(target token within the draft's top K | bin), bins (..., 11).
Positions are taken as independent with the same bin distribution.
"""
from __future__ import annotations

import re

import numpy as np

from costmodel.leviathan import check_positive_int, check_probability, generation_tokens

N_BINS = 11
MAX_SET = 35          # largest set a bin may verify: one base-36 character in a label (`format_bins`)


def _hit_table(topk_hit) -> tuple[np.ndarray, np.ndarray]:
    """{K: (11,)} -> (sorted K array, (n_K, 11) hit probabilities), checked non-decreasing in K."""
    if not isinstance(topk_hit, dict) or not topk_hit:
        raise ValueError("topk_hit must be a non-empty mapping {K: 11 probabilities}")
    ks = np.array(sorted(int(k) for k in topk_hit))
    check_positive_int("K of topk_hit", ks)
    table = np.stack([check_probability(f"topk_hit[{k}]", topk_hit[k] if k in topk_hit else topk_hit[str(k)])
                      for k in ks])
    if table.shape[-1] != N_BINS:
        raise ValueError(f"topk_hit rows must have {N_BINS} confidence bins, got {table.shape[-1]}")
    if ks[0] != 1:
        raise ValueError("topk_hit must include K = 1 (top-1 agreement per bin)")
    return ks, table


def _check_freq(freq) -> np.ndarray:
    f = check_probability("bin frequency", freq)
    if f.shape[-1] != N_BINS or abs(f.sum(axis=-1) - 1.0).max() > 1e-6:
        raise ValueError(f"bin frequency must have {N_BINS} entries summing to 1")
    return f


def _check_bins(bins, ks) -> np.ndarray:
    s = check_positive_int("CAPE bin array entry", bins)
    if s.shape[-1] != N_BINS:
        raise ValueError(f"a CAPE bin array has {N_BINS} entries (bins floor(10*conf)), got {s.shape[-1]}")
    missing = sorted(set(np.unique(s).tolist()) - set(ks.tolist()))
    if missing:
        raise ValueError(f"topk_hit has no row for K = {', '.join(map(str, missing))} used by the bin array")
    return s


def cape_hit_rates(bins, freq, topk_hit):
    """(h1, hS): P(top-1 hit) and P(hit within the bin array's top-S) at one position, per bin array."""
    ks, table = _hit_table(topk_hit)
    f = _check_freq(freq)
    s = _check_bins(bins, ks)
    row = np.searchsorted(ks, s)                       # (..., 11) row of table for each bin's S
    hit_s = table[row, np.arange(N_BINS)]              # (..., 11) P(hit within top-S[b] | bin b)
    return f @ table[0], np.sum(f * hit_s, axis=-1)


def cape_expected_tokens(bins, freq, topk_hit, gamma, new_tokens=None, chain=None):
    """Expected tokens per step (bonus included): 1 + hS * sum_{i=1..gamma} h1^(i-1); over a
    generation of `new_tokens` where given (`leviathan.generation_tokens`).

    chain: (..., G) the chain's own per-position top-1 acceptance beta_i where measured (zero past
    each gamma); the expansion sets then catch a share c = (hS - h1) / (1 - h1) of its misses, and
    P(a step commits more than i tokens) = r_(i+1) + c r_i (1 - beta_i), r_i = prod_{j<i} beta_j
    (beta_i = h1 gives the line above)."""
    h1, hs = cape_hit_rates(bins, freq, topk_hit)
    g = check_positive_int("gamma", gamma)
    if chain is not None:
        beta = check_probability("chain", chain)
        h1, hs = np.broadcast_arrays(np.asarray(h1, dtype=float), np.asarray(hs, dtype=float))
        miss = 1.0 - h1
        catch = np.divide(hs - h1, miss, out=np.zeros_like(miss), where=miss > 0)
        reach = np.cumprod(np.concatenate([np.ones(beta.shape[:-1] + (1,)), beta], axis=-1), axis=-1)
        i = np.arange(1, beta.shape[-1] + 1)
        caught = catch[..., None] * reach[..., :-1] * (1.0 - beta)
        more = (reach[..., 1:] + caught) * (i <= np.asarray(g)[..., None])
        return generation_tokens(more, new_tokens)
    h1, hs = np.broadcast_arrays(np.asarray(h1, dtype=float), np.asarray(hs, dtype=float), g)[:2]
    if new_tokens is None:
        with np.errstate(divide="ignore", invalid="ignore"):
            series = np.where(h1 >= 1.0, g, -np.expm1(g * np.log1p(np.minimum(h1, 1.0) - 1.0)) / (1.0 - h1))
        return 1.0 + hs * series
    i = np.arange(1, int(np.max(g)) + 1)
    reach = hs[..., None] * np.minimum(h1, 1.0)[..., None] ** (i - 1) * (i <= np.asarray(g)[..., None])
    return generation_tokens(reach, new_tokens)


def cape_verify_tokens(bins, freq, gamma):
    """Expected candidate tokens sent to the target per step: gamma * E[S[bin]] (root token not counted)."""
    f = _check_freq(freq)
    s = check_positive_int("CAPE bin array entry", bins)
    if s.shape[-1] != N_BINS:
        raise ValueError(f"a CAPE bin array has {N_BINS} entries (bins floor(10*conf)), got {s.shape[-1]}")
    return check_positive_int("gamma", gamma) * np.sum(f * s, axis=-1)


def cape_verify_distribution(bins, freq, gamma) -> tuple[np.ndarray, np.ndarray]:
    """The verify forward's query tokens, 1 + sum over the gamma positions of S[bin], each position's
    bin drawn from freq independently: (tokens (C, K), probability (C, K)), K = 1 + gamma_max * max S.
    Its mean is 1 + cape_verify_tokens."""
    f = _check_freq(freq)
    s = np.atleast_2d(check_positive_int("CAPE bin array entry", bins))
    g = np.atleast_1d(check_positive_int("gamma", gamma))
    s, g = np.broadcast_to(s, (max(len(s), len(g)), N_BINS)), np.broadcast_to(g, (max(len(s), len(g)),))
    top = int(s.max())
    one = np.zeros((len(s), top + 1))                          # one position's P(S = v)
    np.add.at(one, (np.repeat(np.arange(len(s)), N_BINS), s.reshape(-1)), np.tile(f, len(s)))
    width = int(g.max()) * top + 1
    pmf = np.zeros((len(s), width))
    pmf[:, 0] = 1.0
    out = np.zeros_like(pmf)
    for n in range(1, int(g.max()) + 1):                       # convolve one more position in
        nxt = np.zeros_like(pmf)
        for v in np.flatnonzero(one.any(axis=0)):
            nxt[:, v:] += pmf[:, : width - v] * one[:, v : v + 1]
        pmf = nxt
        out[g == n] = pmf[g == n]
    return np.broadcast_to(1.0 + np.arange(width), out.shape), out


def confidence_bin(confidence):
    """Bin index floor(10 * conf) in 0..10 for confidences in [0, 1]."""
    return np.minimum(np.floor(10.0 * check_probability("confidence", confidence)).astype(int), N_BINS - 1)


PAPER_BINS = (8, 8, 8, 8, 6, 6, 6, 6, 4, 4, 2)   # GLIDE Alg. 1's S (its 12th entry, conf > 1, is unreachable)


def parse_bins(value) -> tuple[int, ...]:
    """A bin array: 11 integers in 1..MAX_SET (or the paper's printed 12), as text ('8,8,...', or one
    character each: '88886666442', 'a' = 10) or a sequence. The one parser of bin arrays."""
    if isinstance(value, str):
        text = value.strip().strip("[]")
        parts = [p for p in re.split(r"[,\s]+", text) if p] if ("," in text or " " in text) else list(text)
        try:
            bins = tuple(int(p, 36) for p in parts)
        except ValueError:
            raise ValueError(f"bad CAPE bin array {value!r} (expected {N_BINS} integers)") from None
    else:
        try:
            bins = tuple(int(v) for v in value)
        except (TypeError, ValueError):
            raise ValueError(f"bad CAPE bin array {value!r} (expected {N_BINS} integers)") from None
    if len(bins) not in (N_BINS, N_BINS + 1):
        raise ValueError(f"a CAPE bin array needs {N_BINS} entries (one per floor(10*conf)), got {len(bins)}")
    if any(not 1 <= b <= MAX_SET for b in bins[:N_BINS]):
        raise ValueError(f"CAPE bin array entries count the chain token, so each lies in 1..{MAX_SET}, got "
                         f"{', '.join(str(b) for b in bins[:N_BINS])}")
    return bins[:N_BINS]


def format_bins(bins) -> str:
    """'88886666442': one base-36 character per bin (the inverse of parse_bins)."""
    return "".join(np.base_repr(int(b), 36).lower() for b in bins)
