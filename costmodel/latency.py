"""Roofline latency of one forward pass, vectorised over tokens per forward, context and batch.

A forward of `batch` sequences, each with `n_tokens` new query tokens on top of `ctx_len` cached
ones, moves

    bytes = forward_params * b                      (every weight once, LM head included)
          + batch * (ctx' + n_tokens) * kv_bytes     (KV cache read, new entries written)
          + batch * ctx' * cross_kv_bytes            (another model's cache, GLIDE)

and computes

    flops = 2 * batch * n_tokens * forward_params
          + batch * n_tokens * (ctx' + n_tokens) * attention_flops_per_pair

with ctx' = min(ctx_len, sliding_window). Its time is

    seconds = max(bytes / (bandwidth * bw_eff), flops / (peak * flops_eff), launch_s) + overhead_s

A continuous-batching engine runs rows of their own query tokens n_r and contexts ctx_r in one forward
(decodes, verifications of different widths, prefill chunks). Such a ragged forward is priced from
sums over its rows (`RowSums`): bytes = weights + sum_r (ctx'_r + n_r) * kv_bytes (+ cross), flops =
2 * forward_params * sum_r n_r + sum_r n_r (ctx'_r + n_r) * attention_flops_per_pair, where a row
whose logits are not all needed (a prefill chunk samples at its last position only) multiplies the
LM head for those alone. A uniform batch is the case n_r = n, ctx_r = ctx, and goes through the same
sums, to the last bit of the formulas above.

`attention_apart` prices the attention kernels apart from the weight matmuls, as an engine that runs
them as separate kernels does (FlashAttention between cuBLAS GEMMs): max(weight bytes / bandwidth,
matmul flops / peak) + max(KV bytes / bandwidth, attention flops / peak). The default (False) overlaps
the two in one roofline, as every Profile before it did. `corner` p > 0 rounds the roofline's corner:
each kernel class takes (memory^p + compute^p)^(1/p) instead of the larger of the two (a GEMM near its
ridge is neither at full bandwidth nor at peak; p = 1 adds them, p -> infinity is the max, p = 0 means
the max itself).

where bandwidth and peak are datasheet figures (costmodel.hardware) and bw_eff, flops_eff,
launch_s and overhead_s are what calibration fits per (model, hardware, engine). launch_s is the
host's time to issue the forward's kernels (Python, launches): the device runs them while the host
issues the next ones, so a forward takes the longer of the two, and a small model (a drafter) is
launch-bound where a large one is bandwidth-bound. overhead_s is work that does not overlap
(synchronisation, sampling after the forward). Activations are left out: for the token counts of speculative decoding they are a few
per cent of the weight bytes at most.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from costmodel.hardware import Hardware, dtype_bytes, get_hardware
from costmodel.params import (
    Arch,
    as_arch,
    attention_flops_per_pair,
    cross_kv_bytes_per_token,
    forward_params,
    kv_bytes_per_token,
    lm_head_params,
    total_params,
)


@dataclass(frozen=True)
class ForwardShape:
    """The per-forward constants of one model at one dtype that the roofline multiplies out."""

    weight_bytes: float
    matmul_params: float
    kv_bytes_per_token: float
    cross_kv_bytes_per_token: float
    attn_flops_per_pair: float
    sliding_window: int
    head_params: float = 0.0          # the LM head's share of matmul_params (logits at a row's sampled positions only)

    @classmethod
    def of(cls, arch: "Arch | dict[str, Any] | str", dtype: str) -> "ForwardShape":
        a = as_arch(arch)
        b = dtype_bytes(dtype)
        return cls(
            weight_bytes=forward_params(a) * b,
            matmul_params=forward_params(a),
            kv_bytes_per_token=kv_bytes_per_token(a, b),
            cross_kv_bytes_per_token=cross_kv_bytes_per_token(a, b),
            attn_flops_per_pair=attention_flops_per_pair(a),
            sliding_window=a.sliding_window,
            head_params=a.lm_head_fraction * lm_head_params(a),
        )


def _grid(n_tokens, ctx_len, batch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n, c, bt = np.broadcast_arrays(np.asarray(n_tokens, float), np.asarray(ctx_len, float), np.asarray(batch, float))
    if np.any(n < 1) or np.any(bt < 1):
        raise ValueError("n_tokens and batch must be >= 1")
    if np.any(c < 0):
        raise ValueError("ctx_len must be >= 0")
    return n, c, bt


@dataclass(frozen=True)
class RowSums:
    """What a forward over rows costs depends on, summed over its rows (arrays: one value per forward).

    tokens: sum_r n_r query tokens; kv_tokens: sum_r (ctx_r + n_r), the KV entries read and written;
    pairs: sum_r n_r (ctx_r + n_r), the (query, key) pairs attention computes; ctx_tokens: sum_r ctx_r,
    the context other models' caches are read at (cross-attention); logit_tokens: positions whose
    logits are computed (None: every query token, as a decode or verify forward needs)."""

    tokens: np.ndarray
    kv_tokens: np.ndarray
    pairs: np.ndarray
    ctx_tokens: np.ndarray
    logit_tokens: np.ndarray | None = None

    @classmethod
    def of(cls, n_tokens, ctx_len, sliding_window: int = 0, logits=None, axis: int = 0, forward=None,
           forwards: int | None = None) -> "RowSums":
        """Sums over `axis` of per-row query tokens and contexts (arrays of one shape; rows of n_tokens
        0 are absent), each context cut at the sliding window; `logits`: per-row positions with logits
        (None: all of them). `forward`: instead of an axis, each row's forward (an index < `forwards`),
        rows of one forward summed together."""
        n, c = np.asarray(n_tokens, float), np.asarray(ctx_len, float)
        if n.shape != c.shape:
            n, c = np.broadcast_arrays(n, c)
        if n.size and (n.min() < 0 or c.min() < 0):
            raise ValueError("a row's n_tokens and ctx_len must be >= 0")
        c = (np.minimum(c, sliding_window) if sliding_window else c) * (n > 0)
        kv = c + n
        if forward is None:
            reduce = lambda x: x.sum(axis=axis)
        else:
            reduce = lambda x: np.bincount(forward, weights=x, minlength=forwards)
        held = None if logits is None else np.asarray(logits, float)
        return cls(reduce(n), reduce(kv), reduce(n * kv), reduce(c),
                   None if held is None else reduce(held if held.shape == n.shape else np.broadcast_to(held, n.shape)))

    @classmethod
    def uniform(cls, shape: ForwardShape, n_tokens, ctx_len, batch=1) -> "RowSums":
        """`batch` rows of `n_tokens` on `ctx_len` each, broadcast over the three arguments."""
        n, c, bt = _grid(n_tokens, ctx_len, batch)
        ctx = np.minimum(c, shape.sliding_window) if shape.sliding_window else c
        tokens = bt * n
        return cls(tokens, bt * (ctx + n), tokens * (ctx + n), bt * ctx)


@dataclass(frozen=True)
class ForwardWork:
    """Bytes and FLOPs of forwards, by kernel: the weight matmuls, and attention over the KV cache."""

    weight_bytes: np.ndarray
    kv_bytes: np.ndarray
    cross_kv_bytes: np.ndarray
    matmul_flops: np.ndarray
    attention_flops: np.ndarray

    @property
    def moved(self) -> np.ndarray:
        return self.weight_bytes + self.kv_bytes + self.cross_kv_bytes

    @property
    def flops(self) -> np.ndarray:
        return self.matmul_flops + self.attention_flops


def rows_work(shape: ForwardShape, sums: RowSums) -> ForwardWork:
    """What forwards over rows move and compute (module docstring)."""
    if sums.logit_tokens is None:
        matmul = 2.0 * sums.tokens * shape.matmul_params
    else:
        matmul = 2.0 * sums.tokens * (shape.matmul_params - shape.head_params) + 2.0 * sums.logit_tokens * shape.head_params
    kv = sums.kv_tokens * shape.kv_bytes_per_token
    weights = np.broadcast_to(np.asarray(shape.weight_bytes, float), np.shape(kv))
    return ForwardWork(weights, kv, sums.ctx_tokens * shape.cross_kv_bytes_per_token, matmul,
                       sums.pairs * shape.attn_flops_per_pair)


def forward_bytes_flops(shape: ForwardShape, n_tokens, ctx_len, batch=1) -> tuple[np.ndarray, np.ndarray]:
    """Bytes moved and FLOPs of one forward, broadcast over the three arguments."""
    work = rows_work(shape, RowSums.uniform(shape, n_tokens, ctx_len, batch))
    return work.moved, work.flops


def roofline_seconds(
    shape: ForwardShape,
    hardware: "Hardware | str",
    dtype: str,
    n_tokens,
    ctx_len,
    batch=1,
    bw_eff: float = 1.0,
    flops_eff: float = 1.0,
    overhead_s: float = 0.0,
    launch_s: float = 0.0,
    attention_apart: bool = False,
    corner: float = 0.0,
) -> np.ndarray:
    """Seconds per forward: max(memory time, compute time, launch time) + overhead, broadcast over the grid."""
    return rows_roofline_seconds(shape, hardware, dtype, RowSums.uniform(shape, n_tokens, ctx_len, batch), bw_eff,
                                 flops_eff, overhead_s, launch_s, attention_apart, corner)


def rows_roofline_seconds(shape: ForwardShape, hardware: "Hardware | str", dtype: str, sums: RowSums,
                          bw_eff: float = 1.0, flops_eff: float = 1.0, overhead_s: float = 0.0, launch_s: float = 0.0,
                          attention_apart: bool = False, corner: float = 0.0) -> np.ndarray:
    """Seconds of forwards over ragged rows (`RowSums`, one value per forward): the roofline of the
    module docstring, the attention kernels apart from the matmuls where `attention_apart`, the
    corner rounded where `corner` > 0."""
    if bw_eff <= 0 or flops_eff <= 0 or overhead_s < 0 or launch_s < 0 or corner < 0:
        raise ValueError(f"efficiencies must be > 0 and overheads and corner >= 0 (bw_eff={bw_eff}, "
                         f"flops_eff={flops_eff}, overhead_s={overhead_s}, launch_s={launch_s}, corner={corner})")
    hw = get_hardware(hardware) if isinstance(hardware, str) else hardware
    bandwidth, peak = hw.bandwidth * bw_eff, hw.peak(dtype) * flops_eff
    work = rows_work(shape, sums)

    def bound(memory, compute):
        return np.maximum(memory, compute) if not corner else (memory ** corner + compute ** corner) ** (1.0 / corner)

    if attention_apart:
        device = (bound(work.weight_bytes / bandwidth, work.matmul_flops / peak)
                  + bound((work.kv_bytes + work.cross_kv_bytes) / bandwidth, work.attention_flops / peak))
    else:
        device = bound(work.moved / bandwidth, work.flops / peak)
    return np.maximum(device, launch_s) + overhead_s


def ridge_tokens(shape: ForwardShape, hardware: "Hardware | str", dtype: str, ctx_len: float = 0.0,
                 bw_eff: float = 1.0, flops_eff: float = 1.0) -> float:
    """Tokens per forward (batch x n_tokens, short context) at which the forward turns compute-bound."""
    hw = get_hardware(hardware) if isinstance(hardware, str) else hardware
    bandwidth, peak = hw.bandwidth * bw_eff, hw.peak(dtype) * flops_eff
    per_token_flops = 2.0 * shape.matmul_params + ctx_len * shape.attn_flops_per_pair
    per_token_bytes = (ctx_len + 1) * shape.kv_bytes_per_token
    denominator = per_token_flops / peak - per_token_bytes / bandwidth
    return float("inf") if denominator <= 0 else shape.weight_bytes / bandwidth / denominator


def kv_capacity_tokens(arch: "Arch | dict[str, Any] | str", hardware: "Hardware | str", dtype: str,
                       n_gpus: int = 1, reserve_fraction: float = 0.1) -> float:
    """Tokens of KV cache that fit beside the weights on `n_gpus` devices, keeping a reserve."""
    a = as_arch(arch)
    hw = get_hardware(hardware) if isinstance(hardware, str) else hardware
    b = dtype_bytes(dtype)
    free = n_gpus * hw.memory * (1.0 - reserve_fraction) - total_params(a) * b
    return max(0.0, free / kv_bytes_per_token(a, b))

