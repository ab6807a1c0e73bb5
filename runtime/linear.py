"""The projections of every model the engine runs, with a CPU path for the few-row products of decoding.

Decoding multiplies a weight by 1 to ~8 rows (one token, or a verified draft). On the project's
CPU (2 cores, MKL in PyTorch 2.13, fp32) `F.linear` does that badly: one row goes through a
matrix-vector kernel that runs on one core at about 9 GB/s, and 2-7 rows through a GEMM blocked for
tall inputs, slower still (SmolLM2-135M's projections: 54 ms for 1 row, 97 ms for 2, 89 ms for 5).
The same product taken as W @ x^T (the weight as the tall operand), with a single row doubled to
two, runs at 30-50 ms for every width up to 7 (`python -m experiments.bench.kernels` prints the
table for this machine). The values are those of `F.linear` up to float rounding.

`linear(x, weight, bias)` takes that path on a CPU for up to `SKINNY_ROWS` rows and `F.linear`
everywhere else (a GPU, training batches); `Linear` is `nn.Linear` with that forward (same
parameters, same state-dict keys). `use_skinny(False)` turns the path off, for the benchmark's
comparison and for checks that both paths agree.
"""
from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch import nn

SKINNY_ROWS = 8          # up to this many rows the W @ x^T path wins on the project's CPU (bench.kernels)
_enabled = True


@contextlib.contextmanager
def use_skinny(enabled: bool):
    """Within the block, take (True) or skip (False) the few-row CPU path."""
    global _enabled
    before, _enabled = _enabled, bool(enabled)
    try:
        yield
    finally:
        _enabled = before


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x @ weight^T (+ bias) for x [..., in], weight [out, in]; few rows on a CPU as W @ x^T."""
    rows = x.numel() // max(x.shape[-1], 1)
    if not (_enabled and x.device.type == "cpu" and 1 <= rows <= SKINNY_ROWS and x.dim() >= 1):
        return F.linear(x, weight, bias)
    flat = x.reshape(rows, x.shape[-1])
    if rows == 1:
        flat = torch.cat([flat, flat])   # one row would take the slow matrix-vector kernel
    out = (weight @ flat.T)[:, :rows].T.contiguous()
    if bias is not None:
        out = out + bias
    return out.reshape(*x.shape[:-1], weight.shape[0])


class Linear(nn.Linear):
    """`nn.Linear` whose forward is `linear` (few decoding rows on a CPU take the fast path)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias)
