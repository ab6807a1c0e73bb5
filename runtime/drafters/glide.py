"""GLIDE: a small decoder whose layers also cross-attend to the target's KV cache (GLIDE §4.1).

Each drafter layer is self-attention -> cross-attention -> MLP (pre-norm, residual). The
cross-attention projects the drafter's hidden states into one query per *target* attention
head (head_dim of the target), rotates them with the target's RoPE at their own positions (the
cached target keys are rotated already) and attends to the keys/values that the target cached
in its last verification; drafter layer m (0-based) reads target layer N_T - N_D + m. Its output
is projected back to the drafter width (W^O).

Which cached target positions a query may see is the `cross_mask`: at inference every query of
a round lies after the whole cache (the delayed cache of the paper), and the prompt is processed
with `causal_cross_mask` (key k visible to a query at position j iff k < j). Training
passes `block_cross_mask` (block length 5 in the paper), which reproduces that delay.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from common.errors import InputError
from runtime.cache import KVCache
from runtime.drafters.common import UNTRAINED, check_untrained, int_option, materialise, positions, resolve_drafter
from runtime.engine.base import Decoder, Proposing
from runtime.engine.cape import CAPE
from runtime.engine.draft_model import DrafterState
from runtime.engine.sd import SD
from runtime.graph import static_forward
from runtime.linear import Linear
from runtime.llama import ForwardOutput, Llama, LlamaConfig, RMSNorm, rotate_half
from runtime.ragged import BatchKVCache, RowInput


@dataclass
class GlideConfig:
    """Drafter shape; the target_* numbers fix the cross-attention's query heads and layer map."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    target_layers: int
    target_heads: int
    target_kv_heads: int
    target_head_dim: int
    rope_theta: float = 10000.0
    rms_eps: float = 1e-5

    @classmethod
    def for_target(cls, target: LlamaConfig, *, num_layers: int = 1, hidden_size: int | None = None,
                   intermediate_size: int | None = None, num_heads: int | None = None) -> "GlideConfig":
        """A GLIDE shape for `target`: by default one layer at the target's width (the paper's choice)."""
        hidden = hidden_size or target.hidden_size
        heads = num_heads or max(1, hidden // (target.head_dim or 64))
        if hidden % heads:
            raise InputError(f"GLIDE hidden size {hidden} is not a multiple of its {heads} heads")
        if not 1 <= num_layers <= target.num_layers:
            raise InputError(f"GLIDE needs 1..{target.num_layers} layers (the target's depth), got {num_layers}")
        return cls(vocab_size=target.vocab_size, hidden_size=hidden,
                   intermediate_size=intermediate_size or (target.intermediate_size * hidden) // target.hidden_size,
                   num_layers=num_layers, num_heads=heads, num_kv_heads=heads,
                   target_layers=target.num_layers, target_heads=target.num_heads,
                   target_kv_heads=target.num_kv_heads, target_head_dim=target.head_dim,
                   rope_theta=target.rope_theta, rms_eps=target.rms_eps)

    def llama_config(self) -> LlamaConfig:
        """The drafter's own decoder stack (self-attention, MLP, norms, embeddings, head)."""
        return LlamaConfig(vocab_size=self.vocab_size, hidden_size=self.hidden_size,
                           intermediate_size=self.intermediate_size, num_layers=self.num_layers,
                           num_heads=self.num_heads, num_kv_heads=self.num_kv_heads,
                           rope_theta=self.rope_theta, rms_eps=self.rms_eps)

    def target_layer(self, m: int) -> int:
        """The target layer (0-based) that drafter layer m (0-based) reads: N_T - N_D + m."""
        return self.target_layers - self.num_layers + m


class CrossAttention(nn.Module):
    """Queries from the drafter, keys/values from one target layer's cache (GQA allowed)."""

    def __init__(self, c: GlideConfig):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = c.target_heads, c.target_kv_heads, c.target_head_dim
        self.q_proj = Linear(c.hidden_size, c.target_heads * c.target_head_dim, bias=False)
        self.o_proj = Linear(c.target_heads * c.target_head_dim, c.hidden_size, bias=False)

    def forward(self, x, cos, sin, keys, values, mask) -> torch.Tensor:
        b, q, _ = x.shape
        if keys.shape[2] == 0:
            return torch.zeros_like(x)
        qs = self.q_proj(x).view(b, q, self.heads, self.head_dim).transpose(1, 2)
        qs = qs * cos + rotate_half(qs) * sin
        out = F.scaled_dot_product_attention(qs, keys, values, attn_mask=mask,
                                             enable_gqa=self.kv_heads != self.heads)
        if mask is not None:  # a query that may see no cached key reads nothing (not NaN)
            out = out.masked_fill(~mask.any(-1, keepdim=True), 0.0)
        return self.o_proj(out.transpose(1, 2).reshape(b, q, -1))


def causal_cross_mask(position_ids: torch.Tensor, n_keys: int) -> torch.Tensor:
    """[batch, 1, q, n_keys]: cached target position k is visible to a query at position j iff k < j."""
    pos = position_ids if position_ids.dim() == 2 else position_ids[None]
    keys = torch.arange(n_keys, device=pos.device)
    return (keys[None, None, :] < pos[:, :, None])[:, None]


def block_cross_mask(seq_len: int, block: int = 5, device="cpu") -> torch.Tensor:
    """[seq_len, seq_len] training mask of GLIDE §4.1: query j sees key k iff block(j) > block(k)."""
    if block < 1:
        raise InputError(f"GLIDE block length must be >= 1, got {block}")
    idx = torch.arange(seq_len, device=device) // block
    return idx[:, None] > idx[None, :]


class GlideDrafter(nn.Module):
    """GLIDE drafter. Owns a `Llama` stack (embeddings, layers, head) plus one cross-attention per layer."""

    kind = "glide"

    def __init__(self, config: GlideConfig):
        super().__init__()
        self.config = config
        self.base = Llama(config.llama_config())
        self.cross_norms = nn.ModuleList(RMSNorm(config.hidden_size, config.rms_eps) for _ in range(config.num_layers))
        self.cross_attn = nn.ModuleList(CrossAttention(config) for _ in range(config.num_layers))

    # -- configuration / persistence
    def config_dict(self) -> dict:
        return asdict(self.config)

    @classmethod
    def from_config_dict(cls, config: dict, target: Llama) -> "GlideDrafter":
        c = GlideConfig(**config)
        if (c.vocab_size, c.target_layers, c.target_heads, c.target_head_dim) != (
                target.config.vocab_size, target.config.num_layers, target.config.num_heads, target.config.head_dim):
            raise InputError("GLIDE drafter was built for a target of another shape (vocabulary, layers or heads)")
        return cls(c)

    @classmethod
    def for_target(cls, target: Llama, *, seed: int = 0, std: float = 0.02, **shape) -> "GlideDrafter":
        """An untrained drafter for `target` with seeded N(0, std) weights (norms at one)."""
        config = GlideConfig.for_target(target.config, **shape)
        drafter = materialise(lambda: cls(config), target, seed, std)
        drafter.base.inv_freq = config.llama_config().inv_freq.to(target.device)  # built off the meta device
        return drafter

    @classmethod
    def timed_draft(cls, entry: dict, bench):
        """One decode-step draft forward at a filled context, for `traces.drafter_timing` (`bench`
        builds the target's layers and fills caches): ctx -> (run, reset)."""
        one = bench.build(1)
        glide = cls.for_target(one, seed=bench.seed)
        ids = torch.zeros(1, 1, dtype=torch.long, device=one.device)

        def at(ctx: int):
            if getattr(bench, "rows", False):       # the batch engine's caches, as its DrafterState runs them
                target_cache, glide_cache = bench.fill_rows(one, ctx), bench.fill_rows(glide.base, ctx)
                rows_ids, positions, mask = glide_cache.inputs([RowInput([0])] * bench.batch)
                cross = causal_cross_mask(positions, target_cache.width) & target_cache.filled()
                run = lambda: glide(rows_ids, glide.target_kv(target_cache), one.rope, cache=glide_cache,  # noqa: E731
                                    position_ids=positions, mask=mask, cross_mask=cross)
                return run, lambda: None
            pos = torch.tensor([ctx], device=one.device)
            target_cache, glide_cache = bench.fill(one, ctx), bench.fill(glide.base, ctx)
            if bench.mode == "eager":
                run = lambda: glide(ids, glide.target_kv(target_cache), one.rope, cache=glide_cache,  # noqa: E731
                                    position_ids=pos)
            else:
                run = lambda: glide.static_draft(ids, target_cache, one.rope, glide_cache, pos)  # noqa: E731
            return run, lambda: glide_cache.crop(ctx)
        return at

    def new_cache(self, batch: int = 1, capacity: int = 256, *, mode: str = "eager", runner=None) -> KVCache:
        return self.base.new_cache(batch, capacity, mode=mode, runner=runner)

    def target_kv(self, cache: KVCache) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The target layers' cached (k, v) that drafter layers 0..N_D-1 read."""
        return [cache.layer_kv(self.config.target_layer(m)) for m in range(self.config.num_layers)]

    # -- forward
    def forward(self, input_ids: torch.Tensor, target_kv: list[tuple[torch.Tensor, torch.Tensor]],
                target_rope, *, cache: KVCache | None = None, position_ids: torch.Tensor | None = None,
                mask: torch.Tensor | None = None, cross_mask: torch.Tensor | None = None,
                logits: bool = True) -> ForwardOutput:
        """Draft logits for `input_ids` [batch, q].

        target_kv: one (keys, values) per drafter layer, [batch, kv_heads, T, head_dim], as cached by
        the target (see `target_kv`). target_rope: the target's `rope(position_ids)` (its RoPE for
        the queries). mask: self-attention mask as in `Llama.forward` (default causal).
        cross_mask: boolean [q, T] / [batch, 1, q, T]; default `causal_cross_mask` (k < position).
        """
        base = self.base
        b, q = input_ids.shape
        past = cache.length if cache is not None else 0
        position_ids = positions(position_ids, past, b, q, input_ids.device)
        if len(target_kv) != self.config.num_layers:
            raise ValueError(f"GLIDE needs {self.config.num_layers} target (k, v) pairs, got {len(target_kv)}")
        n_keys = target_kv[0][0].shape[2]
        if cross_mask is None:
            cross_mask = causal_cross_mask(position_ids, n_keys)
        while cross_mask.dim() < 4:
            cross_mask = cross_mask.unsqueeze(0) if cross_mask.dim() == 2 else cross_mask.unsqueeze(1)
        attn_mask = base._attention_mask(mask, past, q, input_ids.device)
        x = self._layers(input_ids, target_kv, target_rope, position_ids, attn_mask, cross_mask, cache)
        return ForwardOutput(base.head(x) if logits else None, x)

    def _layers(self, input_ids, target_kv, target_rope, position_ids, attn_mask, cross_mask, cache) -> torch.Tensor:
        base = self.base
        cos, sin = base.rope(position_ids)
        tcos, tsin = target_rope(position_ids)
        x = base.embed_tokens(input_ids)
        for m, layer in enumerate(base.layers):
            x = x + layer.self_attn(layer.input_layernorm(x), cos, sin, attn_mask, cache, m)
            keys, values = target_kv[m]
            x = x + self.cross_attn[m](self.cross_norms[m](x), tcos, tsin, keys, values, cross_mask)
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return x

    def static_draft(self, input_ids: torch.Tensor, target_cache, target_rope, cache,
                     position_ids: torch.Tensor | None = None, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Draft logits [batch, q, V] over static caches (its own and the target's, read whole).

        The cross mask is the default one (`causal_cross_mask`) restricted to the target's
        filled entries, built on the device per forward (`runtime.graph.static_forward`).
        """
        n_layers = self.config.num_layers
        target_len = target_cache.lengths[self.config.target_layer(0)]
        kv = [(target_cache.keys[t], target_cache.values[t]) for t in map(self.config.target_layer, range(n_layers))]

        def run(positions, mask, slots, input_ids, cross_mask):
            cache.slots = slots
            return (self.base.head(self._layers(input_ids, kv, target_rope, positions, mask, cross_mask, cache)),)

        def cross(window):
            visible = causal_cross_mask(window.positions, target_cache.buffer) & target_cache.visible_keys(target_len)
            return {"cross_mask": visible}

        return static_forward(cache, ("glide", id(self)), run, input_ids.shape[1], layers=range(n_layers),
                              batch=input_ids.shape[0], rows={"input_ids": input_ids}, mask=mask,
                              position_ids=position_ids, extra=cross, reads=(target_cache,))[0]



DRAFTER = GlideDrafter        # the class `runtime.drafters.io` loads for its kind


# ------------------------------------------------------------------------------- the decoder

class GlideState(DrafterState):
    """`DrafterState` for a GLIDE drafter: every forward also reads the target's current cache.

    In a batch that cache's rows hold their own lengths (`runtime.ragged.BatchKVCache`): a query
    sees a row's cached target keys before its position and within that row's length only.
    """

    def __init__(self, model: GlideDrafter, decoder: Decoder, cache):
        super().__init__(model, cache)
        self.decoder = decoder

    @property
    def target_cache(self):
        return self.decoder.target_cache

    def forward(self, ids: torch.Tensor, cache, positions: torch.Tensor | None, mask: torch.Tensor | None,
                target_cache) -> torch.Tensor:
        rope = self.decoder.target.rope
        if cache.static:
            return self.model.static_draft(ids, target_cache, rope, cache, positions, mask)
        cross = None
        if isinstance(target_cache, BatchKVCache):
            cross = causal_cross_mask(positions, target_cache.width) & target_cache.filled()
        return self.model(ids, self.model.target_kv(target_cache), rope, cache=cache, position_ids=positions,
                          mask=mask, cross_mask=cross).logits


class Glide(CAPE):
    """GLIDE drafter; a chain like `sd`, or CAPE's expansion sets when `bins` is given."""

    method = "glide"
    needs_drafter, own_drafter = False, True
    options = {"layers": 1, "hidden": None, **UNTRAINED}
    drafter_logits = Decoder.drafter_logits     # its drafter reads the target's cache: no pass of its own

    def __init__(self, target: Llama, drafter: Any = None, *, sampling=None, seed: int = 0, **config: Any):
        super().__init__(target, None, sampling=sampling, seed=seed, **config)
        o = self.options
        self.drafter = resolve_drafter(GlideDrafter, drafter, target, lambda: GlideDrafter.for_target(
            target, seed=o["drafter_seed"], std=o["drafter_std"], num_layers=o["layers"], hidden_size=o["hidden"]))
        if self.drafter.config.vocab_size != target.config.vocab_size:
            raise InputError(f"GLIDE drafter vocabulary size {self.drafter.config.vocab_size} differs from the "
                             f"target's {target.config.vocab_size}")

    def check_config(self) -> None:
        o = self.options
        o["layers"] = int_option("glide", "layers", o["layers"], 1)
        o["hidden"] = None if o["hidden"] is None else int_option("glide", "hidden", o["hidden"], 1)
        check_untrained(self)

    def start_drafter(self, prompt: list[int]) -> None:
        self.draft = GlideState(self.drafter, self, self.new_cache("drafter", self.drafter, len(prompt)))

    def propose(self) -> Proposing:
        return SD.propose(self) if self.config.bins is None else CAPE.propose(self)
