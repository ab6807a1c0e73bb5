"""The forwards a latency grid times (`python -m traces.timing`, `calibrate.quick`, `traces.drafter_timing`):
caches filled with random entries of the right length instead of a prefill (their contents do not change
the time), a model's full forwards or its LM head over a grid of (tokens, context, batch), and the points
a run already timed (an earlier grid's, or a killed run's journal).

`cache_kind` "kv" is `runtime.cache.KVCache` (in eager or graph mode); "batch" is the continuous-batching
engine's `runtime.ragged.BatchKVCache` with the ids, positions and per-row mask its `inputs` builds (built
once per point, outside the timing: that host work is the engine's, which its calibration fits per row).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from common.errors import InputError
from common.rundir import PointLog
from runtime.cache import KVCache
from runtime.drafters.router import LMHeadRouter
from runtime.graph import GraphRunner
from runtime.llama import Llama
from runtime.ragged import BatchKVCache, RowInput
from traces.timer import Timer, retime_outliers

CACHES = ("kv", "batch")              # runtime.cache.KVCache, or the batch engine's runtime.ragged.BatchKVCache


def filled_cache(model: Llama, batch: int, ctx_len: int, extra: int, seed: int, mode: str = "eager",
                 runner=None) -> KVCache:
    """A KV cache (of runtime `mode`) holding `ctx_len` random entries, with room for `extra` more
    (a transformers model fills its own: `traces.timing_transformers`)."""
    if hasattr(model, "filled_cache"):
        return model.filled_cache(batch, ctx_len, seed)
    if mode == "eager":
        cache = model.new_cache(batch=batch, capacity=ctx_len + extra)
    else:
        cache = model.new_cache(batch=batch, capacity=ctx_len + extra, mode=mode, runner=runner)
    gen = torch.Generator(device=model.device).manual_seed(seed)
    for layer in range(model.config.num_layers):
        for store in (cache.keys, cache.values):
            store[layer][:, :, :ctx_len].normal_(generator=gen)
    cache.lengths = [ctx_len] * model.config.num_layers
    return cache


def filled_rows(model: Llama, batch: int, ctx_len: int, extra: int, seed: int) -> BatchKVCache:
    """A batch engine's cache (`runtime.ragged.BatchKVCache`) of `batch` rows, each holding `ctx_len`
    random entries, with room for `extra` more. A forward does not move its row lengths (the engine
    counts them after), so it needs no crop between timed runs."""
    cache = BatchKVCache(model.config, batch, ctx_len + extra, model.dtype, model.device)
    gen = torch.Generator(device=model.device).manual_seed(seed)
    for store in (cache.keys, cache.values):
        for buffer in store:
            buffer[:, :, :ctx_len].normal_(generator=gen)
    cache.row_lengths = [ctx_len] * batch
    return cache


@dataclass
class Grid:
    tokens: tuple[int, ...]
    ctx: tuple[int, ...]
    batch: tuple[int, ...]

    def points(self, with_context: bool = True) -> list[tuple[int, int, int]]:
        contexts = self.ctx if with_context else (0,)
        return [(n, c, b) for b in self.batch for c in contexts for n in self.tokens]


class Finished:
    """The points of one unit (role and model) already timed: an earlier trace's (`--retime`), or read
    back from the run's journal when it resumes, and appended to it as each new point finishes, so a
    kill loses one point."""

    def __init__(self, log: PointLog | None = None, unit: str = "",
                 earlier: dict[tuple[int, int, int], tuple[float, int]] | None = None):
        self.log, self.unit = log, unit
        self.points = {**(earlier or {}), **{(i["n_tokens"], i["ctx_len"], i["batch"]): (i["seconds"], i["repeats"])
                                             for i in (log.items if log else []) if i["unit"] == unit}}

    def __contains__(self, key: tuple[int, int, int]) -> bool:
        return key in self.points

    def timed(self, key: tuple[int, int, int], measure: Callable[[], tuple[float, int]]) -> tuple[float, int]:
        if key not in self.points:
            self.points[key] = measure()
            if self.log is not None:
                n, ctx_len, batch = key
                seconds, repeats = self.points[key]
                self.log.append({"unit": self.unit, "n_tokens": n, "ctx_len": ctx_len, "batch": batch,
                                 "seconds": seconds, "repeats": repeats})
        return self.points[key]


def profile_model(model: Llama, grid: Grid, timer: Timer, seed: int, progress=None,
                  done: Finished | None = None, mode: str = "eager", cache_kind: str = "kv") -> list[dict]:
    """Rows (n_tokens, ctx_len, batch, seconds) for full forwards of `model` over the grid; points
    that stand out from their neighbours are timed again (`retime_outliers`). Points in
    `done` are taken from it, new ones added to it. `mode` (runtime.cache.MODES): graph forwards
    are captured during the warm-up runs and replayed in the timed ones. `cache_kind` "batch": the
    batch engine's cache and masks (module docstring)."""
    if cache_kind not in CACHES:
        raise InputError(f"unknown cache '{cache_kind}' (known: {', '.join(CACHES)})")
    if cache_kind == "batch" and mode != "eager":
        raise InputError(f"--cache batch times the batch engine's forwards, which run eager only; got mode {mode!r}")
    done = done if done is not None else Finished()
    rows = []
    gen = torch.Generator().manual_seed(seed)
    runner = None

    def fill(batch: int, ctx_len: int, extra: int):
        if cache_kind == "batch":
            return filled_rows(model, batch, ctx_len, extra, seed)
        return filled_cache(model, batch, ctx_len, extra, seed, mode, runner)

    def point(n: int, ctx_len: int, batch: int, cache=None) -> tuple[float, int]:
        cache = cache if cache is not None else fill(batch, ctx_len, n)
        ids = torch.randint(0, model.config.vocab_size, (batch, n), generator=gen).to(model.device)
        if cache_kind == "batch":
            ids, positions, mask = cache.inputs([RowInput(row.tolist()) for row in ids.cpu()])
            return timer.median(lambda: model(ids, cache, position_ids=positions, mask=mask), lambda: None)
        return timer.median(lambda: model(ids, cache), lambda: cache.crop(ctx_len))

    with torch.inference_mode():
        for batch in grid.batch:
            for ctx_len in grid.ctx:
                cache = None  # filled for the first point not yet timed
                runner = GraphRunner(model.device) if mode == "graph" else None  # graphs of this cache only
                for n in grid.tokens:
                    if (n, ctx_len, batch) not in done and cache is None:
                        cache = fill(batch, ctx_len, max(grid.tokens))
                    seconds, repeats = done.timed((n, ctx_len, batch), lambda: point(n, ctx_len, batch, cache))
                    rows.append({"n_tokens": n, "ctx_len": ctx_len, "batch": batch, "seconds": seconds,
                                 "repeats": repeats})
                    if progress is not None:
                        progress.update(1)
                del cache
        retime_outliers(rows, point)
    return rows


def profile_head(model: Llama, router: LMHeadRouter | None, grid: Grid, timer: Timer, seed: int,
                 progress=None, done: Finished | None = None) -> list[dict]:
    """Rows for the final norm + LM head (plain, or routed) on n x batch hidden states."""
    done = done if done is not None else Finished()
    rows = []
    gen = torch.Generator().manual_seed(seed)
    weight = model.lm_head.weight
    with torch.inference_mode():
        for n, _, batch in grid.points(with_context=False):
            hidden = torch.randn(batch, n, model.config.hidden_size, generator=gen).to(weight)
            if router is None:
                run = lambda: model.head(hidden)
            else:
                run = lambda: router.routed_logits(model.norm(hidden), weight)
            seconds, repeats = done.timed((n, 0, batch), lambda: timer.median(run, lambda: None))
            rows.append({"n_tokens": n, "ctx_len": 0, "batch": batch, "seconds": seconds, "repeats": repeats})
            if progress is not None:
                progress.update(1)
    return rows


def build_router(model: Llama, groups: int, top_n: int, seed: int) -> LMHeadRouter:
    """CORAL's router head at the target's width and vocabulary, seeded random weights."""
    router = LMHeadRouter(model.config.hidden_size, model.config.vocab_size, groups, top_n)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in router.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.02)
    return router.to(device=model.device, dtype=model.dtype).eval()
