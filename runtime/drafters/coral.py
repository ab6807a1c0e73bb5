"""CORAL / EAGLE-style feature drafter with CORAL's LM-head router.

At position s the drafter reads the token t_s and the feature of position s-1, where a feature
is the target's last-layer hidden state (before its final norm, `ForwardOutput.hidden`):
    f^d_s = Layer(fc([embed(t_s); f_{s-1}])),   logits_s = head(f^d_s)  (predicts t_{s+1}).
Embeddings, final norm and LM head are the target's (shared, frozen); the drafter owns `fc`,
one Llama decoder layer with its own one-layer KV cache, and optionally an `LMHeadRouter`.
During drafting f_{s-1} is the drafter's own previous output feature; after verification the
accepted positions are re-run with the target's true features (EAGLE), which is also what
multi-step (HASS) training with CORAL's alignment loss trains for (issue 7).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn

from runtime.drafters.common import materialise, positions
from runtime.drafters.router import LMHeadRouter
from common.errors import InputError
from runtime.cache import make_cache
from runtime.graph import static_forward
from runtime.cache import KVCache
from runtime.llama import DecoderLayer, Llama, LlamaConfig


@dataclass
class CoralConfig:
    hidden_size: int
    vocab_size: int
    router_groups: int = 0   # N (0: no router, the plain head)
    router_top_n: int = 0    # top-n groups computed

    @classmethod
    def for_target(cls, target: LlamaConfig, router_groups: int = 0, router_top_n: int = 0) -> "CoralConfig":
        if router_groups:
            if not 1 <= router_groups <= target.vocab_size:
                raise InputError(f"router groups must lie in 1..{target.vocab_size}, got {router_groups}")
            if not 1 <= router_top_n <= router_groups:
                raise InputError(f"router top-n must lie in 1..{router_groups} (the group count), got {router_top_n}")
        return cls(target.hidden_size, target.vocab_size, router_groups, router_top_n)


class FeatureDrafter(nn.Module):
    """fc + one decoder layer (+ router); the target gives embeddings, RoPE, norm and LM head."""

    kind = "coral"

    def __init__(self, config: CoralConfig, target_config: LlamaConfig):
        super().__init__()
        self.config = config
        self.layer_config = LlamaConfig(**{**target_config.__dict__, "num_layers": 1})
        self.fc = nn.Linear(2 * config.hidden_size, config.hidden_size, bias=True)
        self.layer = DecoderLayer(self.layer_config)
        self.router = (LMHeadRouter(config.hidden_size, config.vocab_size, config.router_groups, config.router_top_n)
                       if config.router_groups else None)

    def config_dict(self) -> dict:
        return asdict(self.config)

    @classmethod
    def from_config_dict(cls, config: dict, target: Llama) -> "FeatureDrafter":
        c = CoralConfig(**config)
        if (c.hidden_size, c.vocab_size) != (target.config.hidden_size, target.config.vocab_size):
            raise InputError("CORAL drafter was built for a target of another shape (width or vocabulary)")
        return cls(c, target.config)

    @classmethod
    def for_target(cls, target: Llama, *, router_groups: int = 0, router_top_n: int = 0,
                   seed: int = 0, std: float = 0.02) -> "FeatureDrafter":
        """An untrained drafter for `target` (seeded weights), with or without a router."""
        config = CoralConfig.for_target(target.config, router_groups, router_top_n)
        return materialise(lambda: cls(config, target.config), target, seed, std)

    def with_router(self, router_groups: int, router_top_n: int, *, seed: int = 0, std: float = 0.02) -> "FeatureDrafter":
        """The same drafter (shared fc/layer) with a fresh router; CORAL trains the router second."""
        config = CoralConfig(self.config.hidden_size, self.config.vocab_size, router_groups, router_top_n)
        with torch.device("meta"):
            clone = FeatureDrafter(CoralConfig(config.hidden_size, config.vocab_size), self.layer_config)
        clone.config, clone.fc, clone.layer = config, self.fc, self.layer
        if router_groups:
            w = self.fc.weight
            router = LMHeadRouter(config.hidden_size, config.vocab_size, router_groups, router_top_n)
            gen = torch.Generator().manual_seed(seed)
            with torch.no_grad():
                for p in router.parameters():
                    p.copy_(torch.randn(p.shape, generator=gen) * std)
            clone.router = router.to(device=w.device, dtype=w.dtype)
        return clone.eval()

    def new_cache(self, batch: int = 1, capacity: int = 256, *, mode: str = "eager", runner=None) -> KVCache:
        w = self.fc.weight
        return make_cache(self.layer_config, batch, capacity, dtype=w.dtype, device=w.device, mode=mode,
                          runner=runner)

    def forward(self, input_ids: torch.Tensor, prev_features: torch.Tensor, target: Llama,
                cache: KVCache | None = None, position_ids: torch.Tensor | None = None,
                mask: torch.Tensor | None = None) -> torch.Tensor:
        """Output features [batch, q, hidden] for tokens [batch, q] and the features one position earlier."""
        b, q = input_ids.shape
        if cache is not None and cache.static:
            def run(positions, mask, slots, input_ids, prev_features):
                cache.slots = slots
                return (self._layer(input_ids, prev_features, target, positions, mask, cache),)

            return static_forward(cache, ("coral", id(self), id(target)), run, q, layers=range(1), batch=b,
                                  rows={"input_ids": input_ids, "prev_features": prev_features}, mask=mask,
                                  position_ids=position_ids)[0]
        past = cache.length if cache is not None else 0
        position_ids = positions(position_ids, past, b, q, input_ids.device)
        attn_mask = Llama._attention_mask(mask, past, q, input_ids.device)
        return self._layer(input_ids, prev_features, target, position_ids, attn_mask, cache)

    def _layer(self, input_ids, prev_features, target: Llama, position_ids, attn_mask, cache) -> torch.Tensor:
        cos, sin = target.rope(position_ids)
        x = self.fc(torch.cat([target.embed_tokens(input_ids), prev_features], dim=-1))
        return self.layer(x, cos, sin, attn_mask, cache, 0)

    def logits(self, features: torch.Tensor, target: Llama) -> torch.Tensor:
        """Draft logits [..., V]: the target's norm + LM head, only over the routed groups if a router is set."""
        normed = target.norm(features)
        if self.router is None:
            return target.lm_head(normed)
        return self.router.routed_logits(normed, target.lm_head.weight)


DRAFTER = FeatureDrafter      # the class `runtime.drafters.io` loads for its kind
