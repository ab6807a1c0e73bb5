"""The drafters at a target's shape, timed one decode-step draft forward at a time, beside the
target's `traces.timing` grid: a LatencyTrace (role `draft`) that the GPU campaign and the SmolLM2
recordings both write.

Which drafters exist at an architecture is the methods' (`MethodSpec.drafters(arch)`: Profile
drafter entries, each naming its latency rows `model`); how one draft forward of a kind runs is its
runtime drafter class's (`DRAFTER.timed_draft(entry, bench)`, runtime.drafters). This module builds
the random-weight layers they need, fills their caches at each context and times the forwards.
With `rows` (`drafter_rows(..., batches, rows=True)`) a drafter that batches (GLIDE) is timed as the
continuous-batching engine runs it: `batch` rows of the engine's caches (`runtime.ragged.BatchKVCache`),
every row at the context, with the engine's masks.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Sequence

import pandas as pd
import torch

import methods
from runtime.drafters.io import drafter_class
from runtime.graph import GraphRunner
from runtime.models import random_architecture, tiny_model
from traces import schema
from common.rundir import git_commit
from traces.timer import Timer, hardware_name, retime_outliers
from traces.forwards import filled_cache, filled_rows


def drafter_entries(arch: str) -> dict[str, dict[str, Any]]:
    """Every registered method's own drafters at `arch` that have latency rows of their own."""
    return {name: entry for spec in methods.specs() for name, entry in spec.drafters(arch).items() if "model" in entry}


@dataclass
class Bench:
    """What a drafter's `timed_draft` asks for: random-weight target layers at the architecture
    (`build(n_layers)`, built once per depth) and caches filled with `ctx` random entries."""

    arch: str
    device: Any
    dtype: torch.dtype
    seed: int
    mode: str
    runner: GraphRunner | None
    batch: int = 1
    rows: bool = False        # fill_rows: the batch engine's caches (module docstring)

    def __post_init__(self):
        self.build = lru_cache(maxsize=None)(self._build)

    def _build(self, n_layers: int):
        if self.arch == "tiny":
            return tiny_model(self.seed, dtype=self.dtype, num_layers=n_layers)
        return random_architecture(self.arch, num_layers=n_layers, seed=self.seed, dtype=self.dtype,
                                   device=self.device)

    def fill(self, module, ctx: int, config=None):
        """A cache of `module` (its `new_cache`; `config` its shape where the module has no `config`)
        holding `ctx` random entries."""
        model = module if config is None else SimpleNamespace(new_cache=module.new_cache, config=config,
                                                              device=self.device)
        return filled_cache(model, 1, ctx, 1, self.seed, self.mode, self.runner)

    def fill_rows(self, module, ctx: int):
        """The batch engine's cache of `module`: `batch` rows, each holding `ctx` random entries."""
        return filled_rows(module, self.batch, ctx, 1, self.seed)


def drafter_rows(arch: str, ctxs: Sequence[int], timer: Timer, device, dtype, seed: int = 0,
                 mode: str = "eager", entries: dict[str, dict[str, Any]] | None = None,
                 batches: Sequence[int] = (1,), rows: bool = False) -> list[dict]:
    """Latency rows of one decode-step draft forward of every drafter entry (default: all of
    `drafter_entries(arch)`) at each context and batch, in runtime `mode` (graph: each drafter's
    forward captured in the warm-up, replayed when timed); `rows`: in the batch engine's caches. In
    eager mode a drafter's points that stand out from their neighbours are timed again (`retime_outliers`)."""
    out, forwards = [], {}
    with torch.inference_mode():
        for batch in batches:
            bench = Bench(arch, device, dtype, seed, mode, GraphRunner(device) if mode == "graph" else None,
                          batch, rows)
            for entry in (drafter_entries(arch) if entries is None else entries).values():
                forward_at = drafter_class(entry["kind"]).timed_draft(entry, bench)
                for ctx in ctxs:
                    forward = forward_at(ctx)
                    if mode == "eager":         # kept to be timed again; a graph is captured once
                        forwards[entry["model"], ctx, batch] = forward
                    seconds, repeats = timer.median(*forward)
                    out.append(dict(model=entry["model"], role="draft", n_tokens=1, ctx_len=ctx, batch=batch,
                                    seconds=seconds, repeats=repeats, mode=mode))
        for model in dict.fromkeys(model for model, _, _ in forwards):
            retime_outliers([r for r in out if r["model"] == model],
                            lambda n, ctx, batch: timer.median(*forwards[model, ctx, batch]))
    return out


def write_drafter_latency(path: Path, archs: Sequence[str], ctxs: Sequence[int], timer: Timer, device, dtype,
                          seed: int = 0, mode: str = "eager", entries: dict[str, dict[str, Any]] | None = None,
                          batches: Sequence[int] = (1,), rows: bool = False) -> pd.DataFrame:
    """`drafter_rows` of every architecture, written as one LatencyTrace (role `draft`) at `path`."""
    found = [r for arch in archs for r in drafter_rows(arch, ctxs, timer, device, dtype, seed, mode, entries,
                                                       batches, rows)]
    dtype_name = "bf16" if dtype == torch.bfloat16 else "fp16" if dtype == torch.float16 else "fp32"
    frame = pd.DataFrame(found).assign(hardware=hardware_name(device), dtype=dtype_name)[
        [*schema.LATENCY_COLUMNS, "mode"]]
    schema.write_trace(path, frame, schema.RunMetadata(kind="latency", hardware=hardware_name(device), dtype=dtype_name,
                                                       seed=seed, commit=git_commit(), extra={"stage": "drafter shapes",
                                                                                            "cache": "batch" if rows else "kv",
                                                                                            "threads": torch.get_num_threads()}))
    return frame
