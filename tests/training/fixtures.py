"""Shared by the training tests: a tiny random target and its (uncached) training data."""
from __future__ import annotations

import functools

import torch

from runtime.models import LoadedModel, tiny_model
from training.corpus import CorpusConfig
from training.data import SignalSpec, TrainingData, training_data

TINY_CORPUS = CorpusConfig(n_generated=12, n_edit=4, max_new_tokens=24, gen_batch=6, n_source=12, chunk_tokens=96,
                           eval_fraction=0.25, seed=0)


def tiny_target(seed: int = 0) -> LoadedModel:
    """A 2-layer random Llama, vocabulary 64, fp64, frozen (ByteTokenizer text)."""
    model = tiny_model(seed)
    for p in model.parameters():
        p.requires_grad_(False)
    return LoadedModel(model, None, f"tiny:{seed}")


@functools.lru_cache(maxsize=None)
def tiny_data(spec: SignalSpec, seq_len: int = 32) -> tuple[LoadedModel, TrainingData]:
    """The tiny target and its training data for `spec` (built once per test session)."""
    target = tiny_target()
    torch.manual_seed(0)
    return target, training_data(target, spec, corpus_config=TINY_CORPUS, seq_len=seq_len, cache_dir=None,
                                 log=lambda *_: None)
