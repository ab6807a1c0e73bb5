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
        )


def _grid(n_tokens, ctx_len, batch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n, c, bt = np.broadcast_arrays(np.asarray(n_tokens, float), np.asarray(ctx_len, float), np.asarray(batch, float))
    if np.any(n < 1) or np.any(bt < 1):
        raise ValueError("n_tokens and batch must be >= 1")
    if np.any(c < 0):
        raise ValueError("ctx_len must be >= 0")
    return n, c, bt


def forward_bytes_flops(shape: ForwardShape, n_tokens, ctx_len, batch=1) -> tuple[np.ndarray, np.ndarray]:
    """Bytes moved and FLOPs of one forward, broadcast over the three arguments."""
    n, c, bt = _grid(n_tokens, ctx_len, batch)
    ctx = np.minimum(c, shape.sliding_window) if shape.sliding_window else c
    moved = (shape.weight_bytes + bt * (ctx + n) * shape.kv_bytes_per_token
             + bt * ctx * shape.cross_kv_bytes_per_token)
    flops = 2.0 * bt * n * shape.matmul_params + bt * n * (ctx + n) * shape.attn_flops_per_pair
    return moved, flops


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
) -> np.ndarray:
    """Seconds per forward: max(memory time, compute time, launch time) + overhead, broadcast over the grid."""
    if bw_eff <= 0 or flops_eff <= 0 or overhead_s < 0 or launch_s < 0:
        raise ValueError(f"efficiencies must be > 0 and overheads >= 0 (bw_eff={bw_eff}, flops_eff={flops_eff}, "
                         f"overhead_s={overhead_s}, launch_s={launch_s})")
    hw = get_hardware(hardware) if isinstance(hardware, str) else hardware
    moved, flops = forward_bytes_flops(shape, n_tokens, ctx_len, batch)
    device = np.maximum(moved / (hw.bandwidth * bw_eff), flops / (hw.peak(dtype) * flops_eff))
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

