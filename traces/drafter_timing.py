"""The drafters at their papers' shapes, timed one decode-step draft forward at a time: GLIDE (one
layer at the target's width, cross-attending to the target's cache), Kangaroo (exit layer
KANGAROO_EXIT plus its adapter) and an EAGLE layer with and without CORAL's router, at each context.
The rows are a LatencyTrace (role `draft`) beside the target's `traces.timing` grid; the GPU campaign
and the SmolLM2 recordings both write them.
"""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Sequence

import pandas as pd
import torch

from runtime.drafters.coral import FeatureDrafter
from runtime.drafters.glide import GlideDrafter
from runtime.drafters.kangaroo import KangarooAdapter
from runtime.graph import GraphRunner
from runtime.models import random_architecture, tiny_model
from traces import schema
from traces.timing import Timer, filled_cache, git_commit, hardware_name

ROUTED = ((16, 2), (32, 4))                               # CORAL routers timed: (groups, top-n)
EAGLE_HEADS = ("vicuna-7b", "llama-3-8b", "qwen2.5-7b")   # 32k, 128k and 152k vocabularies
KANGAROO_EXIT = 2


def router_drafter(groups: int, top_n: int) -> str:
    """The name of an EAGLE drafter with CORAL's router (its latency rows are `<name>@<arch>`)."""
    return f"eagle-router{groups}:{top_n}"


def _fake_model(cache_factory, config, device):
    """What `traces.timing.filled_cache` needs of a model: new_cache, config, device."""
    return SimpleNamespace(new_cache=cache_factory, config=config, device=device)


def drafter_rows(arch: str, ctxs: Sequence[int], timer: Timer, device, dtype, seed: int = 0,
                 mode: str = "eager") -> list[dict]:
    """Latency rows of one decode-step draft forward of GLIDE / Kangaroo / EAGLE(+router) at `arch`'s shape,
    in runtime `mode` (graph: each drafter's forward captured in the warm-up, replayed when timed)."""
    rows = []
    runner = GraphRunner(device) if mode == "graph" else None

    def add(model: str, run, reset, ctx):
        seconds, repeats = timer.median(run, reset)
        rows.append(dict(model=model, role="draft", n_tokens=1, ctx_len=ctx, batch=1, seconds=seconds, repeats=repeats,
                         mode=mode))

    def fill(module, ctx, factory=None, config=None):
        model = module if factory is None else _fake_model(factory, config, device)
        return filled_cache(model, 1, ctx, 1, seed, mode, runner)

    with torch.inference_mode():
        one = random_architecture(arch, num_layers=1, seed=seed, dtype=dtype, device=device) if arch != "tiny" \
            else tiny_model(seed, dtype=dtype, num_layers=1)
        ids = torch.zeros(1, 1, dtype=torch.long, device=one.device)
        glide = GlideDrafter.for_target(one, seed=seed)
        eagle = FeatureDrafter.for_target(one, seed=seed)
        routed = [(g, n, eagle.with_router(g, n, seed=seed)) for g, n in ROUTED if g <= one.config.vocab_size]
        deep = random_architecture(arch, num_layers=KANGAROO_EXIT + 1, seed=seed, dtype=dtype, device=device) \
            if arch != "tiny" else tiny_model(seed, dtype=dtype, num_layers=KANGAROO_EXIT + 1)
        adapter = KangarooAdapter.for_target(deep, KANGAROO_EXIT, seed=seed)
        for ctx in ctxs:
            pos = torch.tensor([ctx], device=one.device)
            target_cache, glide_cache = fill(one, ctx), fill(glide.base, ctx)
            if mode == "eager":
                glide_step = lambda: glide(ids, glide.target_kv(target_cache), one.rope, cache=glide_cache,  # noqa: E731
                                           position_ids=pos)
            else:
                glide_step = lambda: glide.static_draft(ids, target_cache, one.rope, glide_cache, pos)  # noqa: E731
            add(f"glide@{arch}", glide_step, lambda: glide_cache.crop(ctx), ctx)
            shallow = fill(deep, ctx)
            own = fill(None, ctx, adapter.new_cache, adapter.attn_config)

            def kangaroo_step():
                adapter(adapter.shallow(deep, ids, shallow, position_ids=pos), deep, own)

            def kangaroo_reset():
                shallow.crop(ctx, range(0, KANGAROO_EXIT))
                own.crop(ctx)

            add(f"kangaroo-l{KANGAROO_EXIT}@{arch}", kangaroo_step, kangaroo_reset, ctx)
            feature = torch.zeros(1, 1, one.config.hidden_size, dtype=one.dtype, device=one.device)
            for label, drafter in [("eagle", eagle)] + [(router_drafter(g, n), d) for g, n, d in routed]:
                dcache = fill(None, ctx, drafter.new_cache, drafter.layer_config)
                add(f"{label}@{arch}", lambda: drafter.logits(drafter(ids, feature, one, dcache, pos), one),
                    lambda: dcache.crop(ctx), ctx)
    return rows


def write_drafter_latency(path: Path, archs: Sequence[str], ctxs: Sequence[int], timer: Timer, device, dtype,
                          seed: int = 0, mode: str = "eager") -> pd.DataFrame:
    """`drafter_rows` of every architecture, written as one LatencyTrace (role `draft`) at `path`."""
    rows = [r for arch in archs for r in drafter_rows(arch, ctxs, timer, device, dtype, seed, mode)]
    dtype_name = "bf16" if dtype == torch.bfloat16 else "fp16" if dtype == torch.float16 else "fp32"
    frame = pd.DataFrame(rows).assign(hardware=hardware_name(device), dtype=dtype_name)[
        [*schema.LATENCY_COLUMNS, "mode"]]
    schema.write_trace(path, frame, schema.RunMetadata(kind="latency", hardware=hardware_name(device), dtype=dtype_name,
                                                       seed=seed, commit=git_commit(), extra={"stage": "drafter shapes"}))
    return frame
