"""Forwards over a static KV cache: padded to a width bucket, captured as CUDA graphs on a GPU.

`static_forward` is the one way a module (the target, a draft model, GLIDE, Kangaroo's adapter,
the CORAL drafter) runs over a `runtime.cache.StaticKVCache`: it builds the device window (mask,
slots, positions) padded to the runner's bucket, pads the token/feature inputs with zeros, calls
the module's pure tensor function through the cache's `GraphRunner`, records the new length and
cuts the outputs back to the real rows.

`GraphRunner.call` keeps, per (function key, input shapes), static input buffers: the first call
records them (on CUDA: warm-up on a side stream, then `torch.cuda.CUDAGraph` capture into one
shared memory pool), later calls copy their inputs into those buffers and replay. The buffers
are refilled with the same values a direct call would see, so the result is the direct call's.
On a CPU (or with capture off) "replay" calls the function again on the static buffers: the
bucketing, padding and buffer copies run, only the capture itself does not. Without a runner
("static" mode) the function runs directly at the exact width.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from runtime.cache import StaticKVCache

BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)   # widths captured; wider forwards (prefill) run uncaptured


@dataclass
class _Entry:
    fn: Callable
    inputs: dict[str, torch.Tensor]
    outputs: tuple
    graph: object | None
    owners: tuple            # the caches the graph writes or reads (kept alive while it exists)


class GraphRunner:
    """Per-shape static buffers and (on CUDA) captured graphs for one decoder's forwards."""

    def __init__(self, device: torch.device | str, capture: bool | None = None):
        self.device = torch.device(device)
        self.capture = self.device.type == "cuda" if capture is None else capture
        self.entries: dict[tuple, _Entry] = {}
        self.pool = None
        self.captures = 0      # graphs captured (or buffer sets recorded without capture)
        self.replays = 0

    @staticmethod
    def width(q: int) -> int:
        """The bucket a forward of q tokens is padded to (q itself past the largest bucket)."""
        for b in BUCKETS:
            if q <= b:
                return b
        return q

    def forget(self, cache) -> None:
        """Drop the graphs recorded on `cache` (it is being replaced)."""
        self.entries = {k: e for k, e in self.entries.items() if all(o is not cache for o in e.owners)}

    def call(self, key: tuple, fn: Callable, inputs: dict[str, torch.Tensor], owners: tuple, width: int) -> tuple:
        """fn(**inputs) -> tuple of tensors (or None), through the static buffers of its shape."""
        if width > BUCKETS[-1]:
            return fn(**inputs)
        full_key = key + tuple(sorted((name, tuple(t.shape), t.dtype) for name, t in inputs.items()))
        entry = self.entries.get(full_key)
        if entry is None:
            entry = self._record(fn, inputs, owners)
            self.entries[full_key] = entry
        else:
            for name, tensor in inputs.items():
                entry.inputs[name].copy_(tensor)
            self.replays += 1
        if entry.graph is not None:
            entry.graph.replay()
        else:
            entry.outputs = entry.fn(**entry.inputs)
        return tuple(None if o is None else o.clone() for o in entry.outputs)

    def _record(self, fn: Callable, inputs: dict[str, torch.Tensor], owners: tuple) -> _Entry:
        static = {name: t.clone() for name, t in inputs.items()}
        self.captures += 1
        if not self.capture:
            return _Entry(fn, static, (), None, owners)
        # warm-up (allocator, kernels' workspaces) then capture; the warm-up writes the same K/V at
        # the same slots as the replay that follows, so it leaves the caches as the replay will
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            fn(**static)
        torch.cuda.current_stream().wait_stream(stream)
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            outputs = fn(**static)
        return _Entry(fn, static, outputs, graph, owners)


def _pad(t: torch.Tensor, width: int) -> torch.Tensor:
    """Zero rows appended along dim 1 up to `width`."""
    extra = width - t.shape[1]
    if extra == 0:
        return t
    return torch.cat([t, t.new_zeros((t.shape[0], extra) + tuple(t.shape[2:]))], dim=1)


def static_forward(cache: StaticKVCache, key: tuple, fn: Callable, q: int, *, layers: range, batch: int,
                   rows: dict[str, torch.Tensor], mask: torch.Tensor | None = None,
                   position_ids: torch.Tensor | None = None, past: int | None = None,
                   extra: Callable | None = None, reads: tuple = ()) -> tuple:
    """Run `fn(**rows, positions=, mask=, slots=, **extra(window))` over `cache` for q new rows.

    rows: per-token inputs [batch, q, ...] (padded here); layers: the cache layers fn writes (they
    must hold one length, `past`); extra(window) -> more device inputs built from the window
    (GLIDE's cross mask); reads: other caches fn reads (kept alive with its graph). Returns fn's
    outputs cut to the q real rows.
    """
    if past is None:
        lens = {cache.lengths[i] for i in layers}
        if len(lens) != 1:
            raise ValueError(f"layers {layers.start}..{layers.stop - 1} hold different cache lengths {sorted(lens)}")
        past = lens.pop()
    runner = cache.runner
    width = runner.width(q) if runner is not None else q
    window = cache.window(past, q, width, mask, position_ids, batch)
    inputs = {name: _pad(t, width) for name, t in rows.items()}
    inputs.update(positions=window.positions, mask=window.mask, slots=window.slots)
    if extra is not None:
        inputs.update(extra(window))
    if runner is None:
        outputs = fn(**inputs)
    else:
        outputs = runner.call(key + (id(cache),) + tuple(id(c) for c in reads), fn, inputs, (cache, *reads),
                              width)
    cache.settle(layers, past + q)
    return tuple(None if o is None else o[:, :q] for o in outputs)


# tolerance (atol, rtol) of `mode_agreement` per dtype: max |a - b| <= atol + rtol * max |eager|
TOLERANCE = {torch.bfloat16: (5e-2, 2e-2), torch.float16: (1e-2, 5e-3), torch.float32: (1e-4, 1e-4),
             torch.float64: (1e-9, 1e-9)}


@dataclass
class Agreement:
    points: list[tuple[int, float, float]]   # (tokens, max |logit difference|, argmax agreement)
    max_abs: float
    bound: float
    ok: bool


def mode_agreement(model, mode: str = "graph", *, tokens=(1, 4, 64), ctx_len: int = 512, batch: int = 1,
                   seed: int = 0, atol: float | None = None, rtol: float | None = None) -> Agreement:
    """Do `mode`'s target forwards give the eager logits (within the dtype's tolerance)?

    For each width n: a seeded random context of `ctx_len` tokens is prefilled, then n random
    tokens are run, once on an eager cache and once on a cache of `mode` (graph: captured on a
    GPU, then replayed). The GPU campaign runs this before timing anything in graph mode.
    """
    default_atol, default_rtol = TOLERANCE.get(model.dtype, TOLERANCE[torch.float32])
    atol = default_atol if atol is None else atol
    rtol = default_rtol if rtol is None else rtol
    gen = torch.Generator().manual_seed(seed)
    vocab = model.config.vocab_size
    context = torch.randint(0, vocab, (batch, ctx_len), generator=gen).to(model.device)
    runner = GraphRunner(model.device) if mode == "graph" else None
    points, worst, bound = [], 0.0, float("inf")
    with torch.no_grad():
        for n in tokens:
            ids = torch.randint(0, vocab, (batch, n), generator=gen).to(model.device)
            logits = {}
            for m in ("eager", mode):
                cache = model.new_cache(batch, ctx_len + n, mode=m, runner=runner if m == mode else None)
                model(context, cache, logits=False)
                logits[m] = model(ids, cache).logits.float()
            diff = float((logits[mode] - logits["eager"]).abs().max())
            agree = float((logits[mode].argmax(-1) == logits["eager"].argmax(-1)).float().mean())
            points.append((n, diff, agree))
            worst = max(worst, diff)
            bound = min(bound, atol + rtol * float(logits["eager"].abs().max()))
    return Agreement(points, worst, bound, worst <= bound)
