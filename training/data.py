"""Offline training data for the drafters: the target's signals on the corpus (`training.corpus`).

Target signals (`target_signals`): the frozen target is run once over fixed-length windows of the
corpus and what the drafter losses need is kept, so several drafters never rerun the target:
    ids [N, L] (long); topk_ids [N, L, k] (long), topk_logp [N, L, k] (the target's full-softmax
    log-probabilities of its top k next tokens, best first); hidden.<i> [N, L, H] (the input of
    layer i, i = num_layers is the last layer's output before the final norm, `ForwardOutput.hidden`);
    k.<i>, v.<i> [N, kv_heads, L, head_dim] (layer i's cached keys, rotated, and values).
Requested by `SignalSpec`. Deterministic given the corpus, and cached under `.cache/specsim/train/`
in files named by a content hash of every input (model fingerprint, windows, spec).
"""
from __future__ import annotations

import hashlib
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

import torch

from common import atomic
from common.errors import InputError
from runtime.llama import Llama
from runtime.models import LoadedModel
from training.corpus import DEFAULT_CACHE, FORMAT_VERSION, CorpusConfig, build_corpus, content_hash, model_fingerprint


@dataclass(frozen=True)
class SignalSpec:
    """Which target signals a drafter's loss reads (see the module docstring for the keys)."""

    topk: int = 8
    hidden_layers: tuple[int, ...] = ()
    kv_layers: tuple[int, ...] = ()

    def union(self, other: "SignalSpec") -> "SignalSpec":
        return SignalSpec(max(self.topk, other.topk), tuple(sorted({*self.hidden_layers, *other.hidden_layers})),
                          tuple(sorted({*self.kv_layers, *other.kv_layers})))

    def covers(self, other: "SignalSpec") -> bool:
        return self.union(other) == self


EARLY_LAYER = 2      # the early features the feature drafters' one shared spec carries


def feature_spec(target: Llama, exit_layer: int = EARLY_LAYER, topk: int = 8) -> SignalSpec:
    """Signals of the feature drafters: early features at `exit_layer` and the last layer's features.

    The early-exit adapter, the EAGLE drafter and its router all ask for this one spec (with the
    default exit layer), so one cached target pass over the corpus serves the three of them.
    """
    return SignalSpec(topk=topk, hidden_layers=tuple(sorted({exit_layer, target.config.num_layers})))


def shared_spec(n_layers: int) -> SignalSpec:
    """What every drafter kind together reads from a target of `n_layers` layers, computed in ONE
    target pass: top-8, the inputs of layers 1-4, 6, 8 (early-exit layers) and the last output
    (EAGLE/CORAL features), the K/V of the two upper layers (GLIDE with 1 or 2 layers)."""
    hidden = {i for i in (1, 2, 3, 4, 6, 8) if i < n_layers} | {n_layers}
    return SignalSpec(8, tuple(sorted(hidden)), tuple(sorted({max(0, n_layers - 2), n_layers - 1})))


def windows(docs: Sequence[Sequence[int]], seq_len: int) -> torch.Tensor:
    """Documents packed end to end and cut into [N, seq_len] windows (the tail that does not fill one is dropped)."""
    stream = [t for d in docs for t in d]
    n = len(stream) // seq_len
    if n == 0:
        raise InputError(f"{len(stream)} tokens do not fill one window of {seq_len}")
    return torch.tensor(stream[: n * seq_len], dtype=torch.long).view(n, seq_len)


def compute_signals(target: Llama, ids: torch.Tensor, spec: SignalSpec, batch: int = 8,
                    store_dtype: torch.dtype = torch.bfloat16) -> dict[str, torch.Tensor]:
    """Run the frozen target over windows `ids` [N, L] and keep the signals of `spec`."""
    n_layers = target.config.num_layers
    for i in spec.hidden_layers:
        if not 0 <= i <= n_layers:
            raise InputError(f"hidden layer {i} outside 0..{n_layers}")
    for i in spec.kv_layers:
        if not 0 <= i < n_layers:
            raise InputError(f"kv layer {i} outside 0..{n_layers - 1}")
    parts: dict[str, list[torch.Tensor]] = {}
    with torch.no_grad():
        for lo in range(0, ids.shape[0], batch):
            chunk = ids[lo:lo + batch].to(target.device)
            cache = target.new_cache(batch=chunk.shape[0], capacity=chunk.shape[1]) if spec.kv_layers else None
            out = target(chunk, cache, output_hidden_states=bool(spec.hidden_layers))
            logp = torch.log_softmax(out.logits.float(), dim=-1)
            top = logp.topk(spec.topk, dim=-1)
            got = {"topk_ids": top.indices, "topk_logp": top.values}
            for i in spec.hidden_layers:
                got[f"hidden.{i}"] = out.hidden_states[i].to(store_dtype)
            for i in spec.kv_layers:
                k, v = cache.layer_kv(i)
                got[f"k.{i}"], got[f"v.{i}"] = k.to(store_dtype), v.to(store_dtype)
            for name, t in got.items():
                parts.setdefault(name, []).append(t.cpu())
    return {"ids": ids, **{name: torch.cat(ts) for name, ts in parts.items()}}


def target_signals(loaded: LoadedModel, ids: torch.Tensor, spec: SignalSpec, *,
                   cache_dir: str | Path | None = DEFAULT_CACHE, batch: int = 8) -> dict[str, torch.Tensor]:
    """`compute_signals`, cached as safetensors under a hash of (model, windows, spec)."""
    from safetensors.torch import load_file, save_file

    key = content_hash({"v": FORMAT_VERSION, "model": model_fingerprint(loaded), "spec": asdict(spec),
                "ids": hashlib.sha256(ids.numpy().tobytes()).hexdigest(), "shape": list(ids.shape)})
    path = Path(cache_dir) / f"signals-{key}.safetensors" if cache_dir is not None else None
    if path is not None and path.is_file():
        return load_file(str(path))
    signals = compute_signals(loaded.model, ids, spec, batch)
    if path is not None:
        with atomic.atomic_path(path) as tmp:
            save_file({k: v.contiguous() for k, v in signals.items()}, str(tmp))
    return signals


@dataclass
class TrainingData:
    """Train and held-out signals (dicts of tensors with a leading window axis) and corpus metadata."""

    train: dict[str, torch.Tensor]
    eval: dict[str, torch.Tensor]
    meta: dict[str, Any]


def training_data(loaded: LoadedModel, spec: SignalSpec, *, corpus_config: CorpusConfig = CorpusConfig(),
                  seq_len: int = 128, cache_dir: str | Path | None = DEFAULT_CACHE, log=print) -> TrainingData:
    """Corpus -> windows per split -> target signals: everything a drafter's training reads.

    A spec within `shared_spec` is served from the one shared target pass (one cache file)."""
    started = time.perf_counter()
    shared = shared_spec(loaded.model.config.num_layers)
    spec = shared if shared.covers(spec) else spec
    corpus = build_corpus(loaded, corpus_config, cache_dir=cache_dir, log=log)
    splits = {}
    for name in ("train", "eval"):
        splits[name] = target_signals(loaded, windows(corpus.split(name), seq_len), spec, cache_dir=cache_dir)
    meta = {**corpus.meta, "corpus_hash": corpus.content_hash(), "seq_len": seq_len,
            "train_windows": int(splits["train"]["ids"].shape[0]), "eval_windows": int(splits["eval"]["ids"].shape[0]),
            "data_seconds": round(time.perf_counter() - started, 1)}
    return TrainingData(splits["train"], splits["eval"], meta)
