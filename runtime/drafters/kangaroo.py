"""Kangaroo: self-drafting through the target's first l layers plus a small adapter (Kangaroo §3.1).

The self-draft model is A o M_b[:l]: the target's shallow sub-network (its own weights and its
own KV cache for layers 0..l-1) followed by the adapter A, which is one multi-head attention
block between two RMSNorms, with the target's LM head shared:
    h = f + Attn(norm_in(f));   logits = lm_head(norm_out(h)).
The adapter keeps a one-layer KV cache of its own. Drafting stops after the first drafted token
whose top-1 probability is <= eta (Kangaroo Eq. 4); the early features of all drafted tokens are
then passed through the remaining layers l..N-1 of the target in one forward to verify them.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn

from runtime.drafters.common import materialise, positions
from common.errors import InputError
from runtime.llama import Attention, KVCache, Llama, LlamaConfig, RMSNorm


@dataclass
class KangarooConfig:
    exit_layer: int          # l: the adapter reads the output of target layers 0..l-1
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    target_layers: int
    rms_eps: float = 1e-5

    @classmethod
    def for_target(cls, target: LlamaConfig, exit_layer: int) -> "KangarooConfig":
        if not 1 <= exit_layer < target.num_layers:
            raise InputError(f"kangaroo exit layer must lie in 1..{target.num_layers - 1}, got {exit_layer}")
        return cls(exit_layer=exit_layer, hidden_size=target.hidden_size, num_heads=target.num_heads,
                   num_kv_heads=target.num_kv_heads, head_dim=target.head_dim,
                   target_layers=target.num_layers, rms_eps=target.rms_eps)

    def attention_config(self, target: LlamaConfig) -> LlamaConfig:
        """A one-layer LlamaConfig for the adapter's attention and cache (the target's RoPE)."""
        return LlamaConfig(**{**target.__dict__, "num_layers": 1, "num_heads": self.num_heads,
                              "num_kv_heads": self.num_kv_heads, "head_dim": self.head_dim})


class KangarooAdapter(nn.Module):
    """The adapter A; the target (shallow layers, LM head, RoPE) is passed to each call."""

    kind = "kangaroo"

    def __init__(self, config: KangarooConfig, target_config: LlamaConfig):
        super().__init__()
        self.config = config
        self.attn_config = config.attention_config(target_config)
        self.norm_in = RMSNorm(config.hidden_size, config.rms_eps)
        self.attn = Attention(self.attn_config)
        self.norm_out = RMSNorm(config.hidden_size, config.rms_eps)

    @property
    def exit_layer(self) -> int:
        return self.config.exit_layer

    def config_dict(self) -> dict:
        return asdict(self.config)

    @classmethod
    def from_config_dict(cls, config: dict, target: Llama) -> "KangarooAdapter":
        c = KangarooConfig(**config)
        if (c.hidden_size, c.target_layers) != (target.config.hidden_size, target.config.num_layers):
            raise InputError("kangaroo adapter was built for a target of another shape (width or depth)")
        return cls(c, target.config)

    @classmethod
    def for_target(cls, target: Llama, exit_layer: int, *, seed: int = 0, std: float = 0.02) -> "KangarooAdapter":
        """An untrained adapter for `target` exiting after layer `exit_layer` (seeded weights)."""
        config = KangarooConfig.for_target(target.config, exit_layer)
        return materialise(lambda: cls(config, target.config), target, seed, std)

    def new_cache(self, batch: int = 1, capacity: int = 256, *, dtype=None, device=None) -> KVCache:
        """The adapter's own one-layer KV cache."""
        w = self.norm_in.weight
        return KVCache(self.attn_config, batch, capacity, dtype=dtype or w.dtype, device=device or w.device)

    def shallow(self, target: Llama, input_ids: torch.Tensor, cache: KVCache, **kw) -> torch.Tensor:
        """Early features: the target's layers 0..l-1 on `input_ids` (writes the target's cache there)."""
        return target(input_ids, cache, layers=range(0, self.exit_layer), logits=False, **kw).hidden

    def forward(self, features: torch.Tensor, target: Llama, cache: KVCache | None,
                position_ids: torch.Tensor | None = None, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Draft logits [batch, q, V] from early features [batch, q, hidden] (the adapter cache grows by q)."""
        b, q, _ = features.shape
        past = cache.length if cache is not None else 0
        position_ids = positions(position_ids, past, b, q, features.device)
        cos, sin = target.rope(position_ids)
        attn_mask = Llama._attention_mask(mask, past, q, features.device)
        h = features + self.attn(self.norm_in(features), cos, sin, attn_mask, cache, 0)
        return target.lm_head(self.norm_out(h))
