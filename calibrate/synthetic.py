"""Synthetic traces drawn from known parameters, so that every fit can be checked against the truth.

Each generator returns a frame in its trace contract (traces.schema) and the RunMetadata to write
it with; noise is multiplicative log-normal (latency) or the sampling noise of the process itself
(acceptance), always from `numpy.random.default_rng(seed)`.
"""
from __future__ import annotations

import itertools

import numpy as np
import pandas as pd

from traces.schema import RunMetadata, validate

DEFAULT_GRID = {
    "n_tokens": [1, 2, 4, 8, 16, 32, 64, 128, 256, 512],
    "ctx_len": [0, 128, 256, 512, 1024, 2048],
    "batch": [1, 2, 4, 8, 16],
}


def synthetic_latency_trace(model, grid: dict[str, list[int]] | None = None, noise: float = 0.0, seed: int = 0,
                            model_name: str = "model", hardware: str = "unknown", dtype: str = "fp16",
                            role: str = "target", repeats: int = 5) -> tuple[pd.DataFrame, RunMetadata]:
    """LatencyTrace rows of `model.predict` on the full grid, times exp(N(0, noise)) per row."""
    axes = grid or DEFAULT_GRID
    rows = pd.DataFrame(list(itertools.product(axes["n_tokens"], axes["ctx_len"], axes["batch"])),
                        columns=["n_tokens", "ctx_len", "batch"])
    rng = np.random.default_rng(seed)
    seconds = model.predict(rows["n_tokens"], rows["ctx_len"], rows["batch"]) * np.exp(rng.normal(0.0, noise, len(rows)))
    frame = rows.assign(model=model_name, hardware=hardware, dtype=dtype, role=role, seconds=seconds, repeats=repeats)
    meta = RunMetadata(kind="latency", models={role: model_name}, hardware=hardware, dtype=dtype, seed=seed,
                       extra={"synthetic": True, "noise": noise})
    return validate(frame, "latency", source="synthetic latency trace"), meta
