"""transformers' own forwards behind the interface `traces.timing` times (`--engine transformers`).

A peer engine that runs transformers (`generate`, an assistant model) pays transformers' forward, not
this project's: its own attention, cache and projections, whose cost per verified token differs
from ours (SmolLM2 on two CPU cores: a one-token forward of ours with `F.linear` takes ~89 ms, transformers'
~55 ms). So its Profile's latency tables time transformers' forwards themselves: the model's full
forward over n new tokens after a `DynamicCache` holding ctx random entries, logits at every
position (as an assisted step's verification computes them), the cache cropped back after each.

`layers:K` is the target's first K layers with its norm and full head as a transformers model, the
shape of the assistant the peer exports (`campaigns.transformers_engine`).
"""
from __future__ import annotations

from types import SimpleNamespace

import torch

from common.errors import InputError
from runtime.models import load_transformers


class TransformersForward:
    """A transformers causal LM with what `traces.forwards.profile_model` calls: `config.num_layers`,
    `config.vocab_size`, `device`, `filled_cache(...)` and `model(ids, cache)`."""

    def __init__(self, hf):
        self.hf = hf.eval()
        self.config = SimpleNamespace(num_layers=hf.config.num_hidden_layers, vocab_size=hf.config.vocab_size)
        self.device = next(hf.parameters()).device
        self._cache_arg = cache_argument(hf)

    def filled_cache(self, batch: int, ctx_len: int, seed: int) -> "FilledCache":
        """`ctx_len` random keys and values in every layer."""
        cfg = self.hf.config
        heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        dtype = next(self.hf.parameters()).dtype
        gen = torch.Generator().manual_seed(seed)
        return FilledCache([tuple(torch.randn(batch, heads, ctx_len, head_dim, generator=gen).to(self.device, dtype)
                                  for _ in range(2)) for _ in range(self.config.num_layers)])

    def __call__(self, ids: torch.Tensor, cache: "FilledCache") -> torch.Tensor:
        mask = torch.ones(ids.shape[0], cache.ctx_len + ids.shape[1], dtype=torch.long, device=ids.device)
        return self.hf(input_ids=ids, attention_mask=mask, use_cache=True, **{self._cache_arg: cache.dynamic}).logits


def cache_argument(hf) -> str:
    """transformers 5.x renames `past_key_values` to `cache`; either runs the same forward (read once,
    not on every timed forward)."""
    import inspect

    return "cache" if "cache" in inspect.signature(hf.forward).parameters else "past_key_values"


class FilledCache:
    """A DynamicCache over fixed random entries; `crop` starts a fresh one on them (outside the timed
    forward), which needs none of the cache API that changes between transformers versions."""

    def __init__(self, layers: list[tuple[torch.Tensor, torch.Tensor]]):
        self.layers = layers
        self.ctx_len = layers[0][0].shape[2] if layers else 0
        self.crop()

    def crop(self, length: int | None = None) -> None:
        from transformers import DynamicCache

        self.dynamic = DynamicCache()
        if self.ctx_len:
            for i, (keys, values) in enumerate(self.layers):
                self.dynamic.update(keys, values, i)


def first_layers(hf, num_layers: int):
    """The first `num_layers` layers of a transformers Llama with its embeddings, norm and full head
    (weights shared): the assistant's shape."""
    total = hf.config.num_hidden_layers
    if not 1 <= num_layers <= total:
        raise InputError(f"layers:{num_layers}: the target has {total} layers")
    config = hf.config.__class__(**{**hf.config.to_dict(), "num_hidden_layers": num_layers})
    small = type(hf)(config).eval()
    small.model.embed_tokens = hf.model.embed_tokens
    small.model.layers = torch.nn.ModuleList(list(hf.model.layers)[:num_layers])
    small.model.norm = hf.model.norm
    small.lm_head = hf.lm_head
    return small


def load_units(model_spec: str, drafters: list[str], dtype: torch.dtype, device: torch.device, quiet: bool = False
               ) -> list[tuple[str, str, TransformersForward]]:
    """(name, role, forward) of the target and each `--drafter` (layers:K or a model spec), loaded
    through transformers (`quiet`: without its loading bars)."""
    from transformers.utils import logging

    if quiet:
        logging.disable_progress_bar()

    hf, _ = load_transformers(model_spec, tokenizer=False)
    hf = hf.to(device=device, dtype=dtype)
    units = [(model_spec, "target", TransformersForward(hf))]
    for spec in drafters:
        if spec.startswith("layers:"):
            try:
                k = int(spec.split(":", 1)[1])
            except ValueError:
                raise InputError(f"--drafter '{spec}': layers:K needs a whole number K") from None
            drafter = first_layers(hf, k)
        else:
            drafter, _ = load_transformers(spec, tokenizer=False)
            if drafter.config.vocab_size != hf.config.vocab_size:
                raise InputError(f"--drafter '{spec}' has a vocabulary of {drafter.config.vocab_size} tokens, "
                                 f"the target {hf.config.vocab_size}")
            drafter = drafter.to(device=device, dtype=dtype)
        units.append((spec, "draft", TransformersForward(drafter)))
    return units
