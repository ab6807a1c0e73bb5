"""The roofline's efficiencies on the H100, fitted on the project's own forwards replayed as CUDA graphs
(`graph_grid.jsonl` of ../shared/measurements/h100-2026-11-23: tokens 1-256 x context 0-4096 x
batch 1-8, seven architectures, median of 5 replays).

The project's forward and vLLM's share the matmuls (bf16 `F.linear`, cuBLAS) and differ around them:
the project runs q, k, v, gate and up as separate GEMMs (vLLM merges them into two), its norms,
rotary, SiLU and residual adds as unfused elementwise kernels (vLLM fuses them into a few custom
kernels), and its attention through SDPA over a contiguous cache, with a mask whenever more than one
query token runs (vLLM: FlashAttention over paged KV, any query length). So:

- carried over: the weight-streaming efficiency of the GEMMs (`bw_eff`: one token a sequence, the
  seven architectures regressed on their weight bytes and layer counts, so that the per-layer time of
  the small kernels comes out apart from it), their compute efficiency and how round the roofline's
  corner is (`flops_eff` and `corner`, fitted together on every llama-3-8b point at context 0, 1 to
  2,048 tokens: with a sharp corner the forwards of 32-512 tokens come out up to 23% too fast), and
  the KV read at one query token (a check: its bandwidth share at batch 8 against `bw_eff`);
- not carried over: the per-layer time of the project's unfused kernels (vLLM's fused forward and its
  engine's per-step costs are `calibrate.vllm.engine`'s, fitted on published vLLM figures) and the
  context cost of its masked multi-token attention (16 times the KV read at 2 query tokens).
Activation traffic of the unfused kernels grows with tokens and lowers the fitted `flops_eff` a little
below what vLLM's fused forward reaches: a conservative value, reported as such.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from common.errors import InputError
from costmodel.hardware import get_hardware
from costmodel.params import forward_params, get_arch, kv_bytes_per_token
from profiles.latency import RooflineLatency

# the project's H100 measurements sit beside the checkout (../shared/measurements/), not inside it
GRID = Path(__file__).resolve().parents[3] / "shared" / "measurements" / "h100-2026-11-23" / "graph_grid.jsonl"
TARGET_ARCH = "llama-3-8b"
CORNER_MAX = 50.0                  # a corner this sharp is the max
DTYPE = "bf16"


@dataclass(frozen=True)
class GridFit:
    """The efficiencies carried to vLLM and what the fit saw."""

    bw_eff: float
    flops_eff: float
    corner: float
    layer_s: float                  # the project's per-layer small-kernel time (not carried over)
    kv_bw_eff_batch8: float         # the KV read's bandwidth share at one query token, batch 8 (a check)
    errors: dict = field(default_factory=dict)
    source: dict = field(default_factory=dict)
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {"bw_eff": round(self.bw_eff, 4), "flops_eff": round(self.flops_eff, 4), "corner": round(self.corner, 3),
                "project_layer_s": self.layer_s, "kv_bw_eff_batch8": round(self.kv_bw_eff_batch8, 4),
                "errors": self.errors, "source": self.source, "warnings": list(self.warnings)}


def read_grid(path: str | Path = GRID) -> pd.DataFrame:
    """The grid's rows with each architecture's weight bytes and layers; one line when it is unusable."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"H100 graph grid not found: {p} (graph_grid.jsonl of the shared H100 measurements)")
    try:
        frame = pd.read_json(p, lines=True)
    except ValueError as exc:
        raise InputError(f"{p}: not JSON lines ({exc})") from None
    need = {"model", "n_tokens", "ctx_len", "batch", "graph_s"}
    if not need <= set(frame.columns):
        raise InputError(f"{p}: lacks column(s) {', '.join(sorted(need - set(frame.columns)))}")
    frame["arch"] = frame["model"].str.split(":").str[-1]
    if TARGET_ARCH not in set(frame["arch"]):
        raise InputError(f"{p}: no rows of {TARGET_ARCH}")
    archs = {a: get_arch(a) for a in frame["arch"].unique()}
    frame["weight_bytes"] = [forward_params(archs[a]) * 2.0 for a in frame["arch"]]
    frame["layers"] = [archs[a].n_layers for a in frame["arch"]]
    return frame


def fit_grid(path: str | Path = GRID, hardware: str = "H100") -> GridFit:
    """`GridFit` of the grid at `path` (module docstring)."""
    frame = read_grid(path)
    hw = get_hardware(hardware)
    decode = frame[(frame["n_tokens"] == 1) & (frame["ctx_len"] == 0) & (frame["batch"] == 1)]
    design = np.c_[np.ones(len(decode)), decode["layers"], decode["weight_bytes"] / hw.bandwidth]
    (fixed_s, layer_s, inverse), *_ = np.linalg.lstsq(design, decode["graph_s"].to_numpy(), rcond=None)
    bw_eff = 1.0 / inverse
    warnings = []
    if not 0 < bw_eff <= 1:
        warnings.append(f"bw_eff {bw_eff:.3f} outside (0, 1]: the grid's decode times do not separate weight "
                        "streaming from per-layer time; clipped to 1")
        bw_eff = min(max(bw_eff, 1e-3), 1.0)
    target = frame[(frame["arch"] == TARGET_ARCH) & (frame["ctx_len"] == 0)].copy()
    target["floor_s"] = fixed_s + layer_s * target["layers"]
    arch = get_arch(TARGET_ARCH)

    def predicted(x, rows: pd.DataFrame) -> np.ndarray:
        model = RooflineLatency(arch=arch, hardware=hw.name, dtype=DTYPE, bw_eff=bw_eff, flops_eff=float(x[0]),
                                attention_apart=True, corner=float(x[1]), name=TARGET_ARCH)
        return model.predict(rows["n_tokens"], rows["ctx_len"], rows["batch"]) + rows["floor_s"]

    fit = least_squares(lambda x: np.log(predicted(x, target) / target["graph_s"]), [0.6, 2.0],
                        bounds=([0.05, 1.0], [1.0, CORNER_MAX]))
    flops_eff, corner = (float(v) for v in fit.x)
    for name, value, low, high in (("flops_eff", flops_eff, 0.05, 1.0), ("corner", corner, 1.0, CORNER_MAX)):
        if min(value - low, high - value) < 1e-3 * high:
            warnings.append(f"{name} {value:.3f} on its bound [{low:g}, {high:g}]")
    error = predicted(fit.x, target) / target["graph_s"] - 1.0
    kv = frame[(frame["arch"] == TARGET_ARCH) & (frame["n_tokens"] == 1) & (frame["batch"] == 8)].sort_values("ctx_len")
    slope = np.polyfit(kv["ctx_len"] * 8 * kv_bytes_per_token(arch, 2.0), kv["graph_s"], 1)[0]
    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    return GridFit(float(bw_eff), flops_eff, corner, float(layer_s), float(1.0 / (slope * hw.bandwidth)),
                   errors={"decode_points": int(len(decode)), "target_points": int(len(target)),
                           "llama-3-8b ctx 0 median |error|": round(float(np.median(np.abs(error))), 4),
                           "llama-3-8b ctx 0 worst error": round(float(error[np.abs(error).idxmax()]), 4)},
                   source={"file": str(path), "sha256": digest, "rows": int(len(frame)),
                           "measured": "project commit f4fd15a, one H100 80GB HBM3, PyTorch 2.11, bf16, CUDA graphs"},
                   warnings=tuple(warnings))
