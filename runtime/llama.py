"""A compact Llama-family forward (Llama, Mistral, Qwen2, SmolLM2) built for speculative decoding.

Hugging Face's modules hide the parts speculative decoding needs to control. This one exposes
them: an explicit per-layer KV cache (`KVCache`) that can be cropped (rollback) or gathered (keep
only the accepted tree path), an arbitrary boolean attention mask over cached + new keys (tree
masks, CAPE's mask, a Jacobi window's mask), explicit position ids, running a range of layers
only (an early-exit drafter stops after layer l, verification resumes from l) and the per-layer
hidden states and K/V (GLIDE reads the target's upper-layer KV cache; EAGLE/CORAL reads the last
hidden feature).

Weights come from any HF Llama/Mistral/Qwen2 causal LM (`from_hf`), including SmolLM2 loaded
from GGUF by transformers; `tests/test_models.py` checks the logits against HF's own forward.
Mistral's sliding window is not applied: it only matters beyond 4096 tokens of context.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from common.errors import InputError
from runtime.cache import KVCache, causal_mask, make_cache
from runtime.graph import static_forward
from runtime.linear import Linear


@dataclass
class LlamaConfig:
    """Architecture numbers. `inv_freq`/`rope_scale` override the default RoPE (e.g. Llama-3 scaling)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int | None = None
    rope_theta: float = 10000.0
    rms_eps: float = 1e-5
    tie_embeddings: bool = False
    qkv_bias: bool = False
    inv_freq: torch.Tensor | None = field(default=None, repr=False)
    rope_scale: float = 1.0

    def __post_init__(self):
        if self.head_dim is None:
            self.head_dim = self.hidden_size // self.num_heads
        if self.num_heads % self.num_kv_heads:
            raise InputError(f"num_heads {self.num_heads} is not a multiple of num_kv_heads {self.num_kv_heads}")
        if self.inv_freq is None:
            steps = torch.arange(0, self.head_dim, 2, dtype=torch.float64) / self.head_dim
            self.inv_freq = (1.0 / (self.rope_theta**steps)).float()

    def arch_numbers(self) -> dict:
        """These numbers as a Profile's architecture entry (`costmodel.params.Arch` fields)."""
        return {"n_layers": self.num_layers, "hidden": self.hidden_size, "intermediate": self.intermediate_size,
                "n_heads": self.num_heads, "n_kv_heads": self.num_kv_heads, "vocab": self.vocab_size,
                "head_dim": self.head_dim, "tie_embeddings": self.tie_embeddings, "qkv_bias": self.qkv_bias}

    @classmethod
    def from_hf(cls, hf_config) -> "LlamaConfig":
        """From a transformers LlamaConfig / MistralConfig / Qwen2Config (RoPE scaling included)."""
        from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

        rope = dict(getattr(hf_config, "rope_parameters", None) or {})
        rope_type = rope.get("rope_type", "default")
        theta = float(rope.get("rope_theta", getattr(hf_config, "rope_theta", 10000.0)))
        head_dim = getattr(hf_config, "head_dim", None) or hf_config.hidden_size // hf_config.num_attention_heads
        inv_freq, scale = None, 1.0
        if rope_type != "default":
            inv_freq, scale = ROPE_INIT_FUNCTIONS[rope_type](hf_config, None)
            inv_freq = inv_freq.float().cpu()
        model_type = getattr(hf_config, "model_type", "llama")
        return cls(
            vocab_size=hf_config.vocab_size,
            hidden_size=hf_config.hidden_size,
            intermediate_size=hf_config.intermediate_size,
            num_layers=hf_config.num_hidden_layers,
            num_heads=hf_config.num_attention_heads,
            num_kv_heads=getattr(hf_config, "num_key_value_heads", None) or hf_config.num_attention_heads,
            head_dim=head_dim,
            rope_theta=theta,
            rms_eps=float(getattr(hf_config, "rms_norm_eps", 1e-5)),
            tie_embeddings=bool(getattr(hf_config, "tie_word_embeddings", False)),
            qkv_bias=bool(getattr(hf_config, "attention_bias", False)) or model_type == "qwen2",
            inv_freq=inv_freq,
            rope_scale=float(scale),
        )


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        h = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Attention(nn.Module):
    def __init__(self, c: LlamaConfig):
        super().__init__()
        self.c = c
        self.q_proj = Linear(c.hidden_size, c.num_heads * c.head_dim, bias=c.qkv_bias)
        self.k_proj = Linear(c.hidden_size, c.num_kv_heads * c.head_dim, bias=c.qkv_bias)
        self.v_proj = Linear(c.hidden_size, c.num_kv_heads * c.head_dim, bias=c.qkv_bias)
        self.o_proj = Linear(c.num_heads * c.head_dim, c.hidden_size, bias=False)

    def project_kv(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys (rotated) and values of `x`, [batch, kv_heads, q, head_dim]."""
        b, q, _ = x.shape
        k = self.k_proj(x).view(b, q, self.c.num_kv_heads, self.c.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, q, self.c.num_kv_heads, self.c.head_dim).transpose(1, 2)
        return k * cos + rotate_half(k) * sin, v

    def forward(self, x, cos, sin, mask, cache: KVCache | None, layer: int) -> torch.Tensor:
        b, q, _ = x.shape
        qs = self.q_proj(x).view(b, q, self.c.num_heads, self.c.head_dim).transpose(1, 2)
        qs = qs * cos + rotate_half(qs) * sin
        k, v = self.project_kv(x, cos, sin)
        if cache is not None:
            k, v = cache.append(layer, k, v)
        out = F.scaled_dot_product_attention(qs, k, v, attn_mask=mask, enable_gqa=self.c.num_kv_heads != self.c.num_heads)
        return self.o_proj(out.transpose(1, 2).reshape(b, q, -1))


class MLP(nn.Module):
    def __init__(self, c: LlamaConfig):
        super().__init__()
        self.gate_proj = Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.up_proj = Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.down_proj = Linear(c.intermediate_size, c.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, c: LlamaConfig):
        super().__init__()
        self.self_attn = Attention(c)
        self.mlp = MLP(c)
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_eps)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_eps)

    def forward(self, x, cos, sin, mask, cache, layer):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask, cache, layer)
        return x + self.mlp(self.post_attention_layernorm(x))


@dataclass
class ForwardOutput:
    """`logits` [batch, q, vocab] (None if not asked), `hidden` the output of the last layer run
    (before the final norm), `hidden_states` the input of every layer run plus `hidden` if asked."""

    logits: torch.Tensor | None
    hidden: torch.Tensor
    hidden_states: list[torch.Tensor] | None = None


class Llama(nn.Module):
    """Decoder-only Llama-family model with explicit cache, mask, positions and layer range."""

    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_eps)
        self.lm_head = Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        self.register_buffer("inv_freq", config.inv_freq.clone(), persistent=False)

    @property
    def dtype(self) -> torch.dtype:
        return self.embed_tokens.weight.dtype

    @property
    def device(self) -> torch.device:
        return self.embed_tokens.weight.device

    def new_cache(self, batch: int = 1, capacity: int = 256, *, mode: str = "eager", runner=None) -> KVCache:
        """A KV cache for this model; `mode` and `runner` as `runtime.cache.make_cache`."""
        return make_cache(self.config, batch, capacity, dtype=self.dtype, device=self.device, mode=mode, runner=runner)

    def rope(self, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos/sin [batch, 1, q, head_dim] for position ids [batch, q] (computed in fp32 like HF)."""
        freqs = position_ids[..., None].float() * self.inv_freq.float()
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos() * self.config.rope_scale, emb.sin() * self.config.rope_scale
        return cos.to(self.dtype)[:, None], sin.to(self.dtype)[:, None]

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        cache: KVCache | None = None,
        position_ids: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        *,
        hidden: torch.Tensor | None = None,
        layers: range | None = None,
        logits: bool = True,
        logits_at: torch.Tensor | slice | None = None,
        output_hidden_states: bool = False,
    ) -> ForwardOutput:
        """Run the layers `layers` (default all) on new tokens.

        input_ids [batch, q] (or `hidden` [batch, q, hidden] to resume mid-stack). Position ids
        default to cache length + arange(q). `mask` is boolean, True = may attend, of shape
        [q, K], [batch, q, K] or [batch, 1, q, K] with K = cached length + q (the new tokens'
        keys come last); default causal. Logits are computed when `logits` and the run reaches
        the last layer, at the query positions `logits_at` (default all).
        """
        layers = layers if layers is not None else range(self.config.num_layers)
        if cache is not None and cache.static:
            return self._static_forward(input_ids, cache, position_ids, mask, hidden, layers, logits, logits_at,
                                        output_hidden_states)
        x = self.embed_tokens(input_ids) if hidden is None else hidden
        b, q = x.shape[:2]
        past = 0
        if cache is not None:
            lens = {cache.lengths[i] for i in layers}
            if len(lens) != 1:
                raise ValueError(f"layers {layers.start}..{layers.stop - 1} hold different cache lengths {sorted(lens)}")
            past = lens.pop()
        if position_ids is None:
            position_ids = torch.arange(past, past + q, device=x.device)[None].expand(b, q)
        elif position_ids.dim() == 1:
            position_ids = position_ids[None].expand(b, q)
        cos, sin = self.rope(position_ids.to(x.device))
        attn_mask = self._attention_mask(mask, past, q, x.device)
        states = [] if output_hidden_states else None
        for i in layers:
            if states is not None:
                states.append(x)
            x = self.layers[i](x, cos, sin, attn_mask, cache, i)
        if states is not None:
            states.append(x)
        out_logits = None
        if logits and layers.stop == self.config.num_layers:
            out_logits = self.head(x if logits_at is None else x[:, logits_at])
        return ForwardOutput(out_logits, x, states)

    def _static_forward(self, input_ids, cache, position_ids, mask, hidden, layers, logits, logits_at, states):
        """The forward over a static cache (`runtime.graph.static_forward`): one pure tensor function
        of ids or hidden rows, positions, mask and slots, captured per width on a GPU."""
        with_logits = logits and layers.stop == self.config.num_layers
        rows = {"input_ids": input_ids} if hidden is None else {"hidden": hidden}
        b, q = (input_ids if hidden is None else hidden).shape[:2]

        def run(positions, mask, slots, input_ids=None, hidden=None):
            cache.slots = slots
            x = self.embed_tokens(input_ids) if hidden is None else hidden
            cos, sin = self.rope(positions)
            seen = [] if states else None
            for i in layers:
                if seen is not None:
                    seen.append(x)
                x = self.layers[i](x, cos, sin, mask, cache, i)
            return (self.head(x) if with_logits else None, x, *(seen + [x] if states else ()))

        key = ("llama", id(self), layers.start, layers.stop, with_logits, states, "hidden" if hidden is not None else "ids")
        out = static_forward(cache, key, run, q, layers=layers, batch=b, rows=rows, mask=mask, position_ids=position_ids)
        out_logits = out[0] if logits_at is None or out[0] is None else out[0][:, logits_at]
        return ForwardOutput(out_logits, out[1], list(out[2:]) if states else None)

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        """Final norm and LM head on last-layer hidden states."""
        return self.lm_head(self.norm(hidden))

    @staticmethod
    def _attention_mask(mask: torch.Tensor | None, past: int, q: int, device) -> torch.Tensor | None:
        if mask is None:
            if q == 1:
                return None
            mask = causal_mask(past, q, device)
        if mask.shape[-1] != past + q or mask.shape[-2] != q:
            raise ValueError(f"attention mask of shape {tuple(mask.shape)} does not cover {q} queries x {past + q} keys")
        mask = mask.to(device=device, dtype=torch.bool)
        while mask.dim() < 4:
            mask = mask.unsqueeze(0) if mask.dim() == 2 else mask.unsqueeze(1)
        return mask


_HF_PREFIXES = ("model.", "")


def from_hf(hf_model, dtype: torch.dtype | None = None) -> Llama:
    """Build a `Llama` with the weights of a transformers Llama/Mistral/Qwen2 causal LM."""
    model_type = getattr(hf_model.config, "model_type", "")
    if model_type not in ("llama", "mistral", "qwen2"):
        raise InputError(f"model type '{model_type}' is not a Llama-family model (llama, mistral, qwen2)")
    config = LlamaConfig.from_hf(hf_model.config)
    state = hf_model.state_dict()
    ours: dict[str, torch.Tensor] = {}
    for key, tensor in state.items():
        name = key[len("model."):] if key.startswith("model.") else key
        if name.endswith("rotary_emb.inv_freq"):
            continue
        ours[name] = tensor
    if "lm_head.weight" not in ours:
        ours["lm_head.weight"] = ours["embed_tokens.weight"]
    with torch.device("meta"):
        model = Llama(config)
    model.load_state_dict(ours, strict=True, assign=True)
    if config.tie_embeddings:
        model.lm_head.weight = model.embed_tokens.weight
    model.inv_freq = config.inv_freq.clone().to(model.embed_tokens.weight.device)
    if dtype is not None:
        model = model.to(dtype)
    return model.eval()
