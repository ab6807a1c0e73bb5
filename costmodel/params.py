"""Parameter counts and KV-cache sizes from architecture numbers, and a registry of real architectures.

An architecture is a plain dict (the form a Profile stores under "models" and the engine uses to
build random-weight models of the real shape): n_layers, hidden, intermediate, n_heads,
n_kv_heads, vocab, and optionally head_dim, tie_embeddings, gated_mlp, qkv_bias, sliding_window,
and three fields for drafters that are not plain decoder stacks:

- extra_params: weights read by every forward besides the decoder layers (EAGLE's 2h->h fc,
  an early-exit drafter's adapter, GLIDE's cross-attention projections);
- extra_kv_layers: attention layers with their own KV cache besides the decoder layers;
- cross_kv_layers: layers that read another model's KV cache (GLIDE reads the target's);
- lm_head_fraction: the part of the LM head a forward multiplies (a CORAL router activating
  top-n of N vocabulary groups: top_n / N, plus its own weights in extra_params);

and two for what a drafter borrows from its target, stored and cached once (`own_params`,
`own_kv_bytes_per_token`): shared_layers (its first layers are the target's own, with their KV
cache: Kangaroo's shallow sub-network) and shared_embeddings (the embedding table and LM head are
the target's: EAGLE / CORAL, Kangaroo). A forward still runs and reads them, so latency counts them.

Embeddings are counted apart from the rest (CORAL's Eq. 5 ratio excludes them): a decode forward
reads one embedding row per token but the whole LM head.
"""
from __future__ import annotations

import importlib
from dataclasses import asdict, dataclass, fields
from typing import Any

ARCH_REQUIRED = ("n_layers", "hidden", "intermediate", "n_heads", "n_kv_heads", "vocab")
# Hugging Face config.json names -> ours, so that a model's config (or runtime.models' registry) reads directly
HF_KEYS = {"num_hidden_layers": "n_layers", "hidden_size": "hidden", "intermediate_size": "intermediate",
           "num_attention_heads": "n_heads", "num_key_value_heads": "n_kv_heads", "vocab_size": "vocab",
           "tie_word_embeddings": "tie_embeddings", "attention_bias": "qkv_bias"}


@dataclass(frozen=True)
class Arch:
    """Architecture numbers of one decoder-only transformer (or drafter built from its parts)."""

    n_layers: int
    hidden: int
    intermediate: int
    n_heads: int
    n_kv_heads: int
    vocab: int
    head_dim: int = 0                 # 0: hidden // n_heads
    tie_embeddings: bool = False
    gated_mlp: bool = True            # SwiGLU: gate, up and down projections
    qkv_bias: bool = False
    sliding_window: int = 0           # 0: full attention
    extra_params: float = 0.0
    extra_kv_layers: int = 0
    cross_kv_layers: int = 0
    lm_head_fraction: float = 1.0
    shared_layers: int = 0            # first layers that are the target's own (weights and KV cache)
    shared_embeddings: bool = False   # embedding table and LM head are the target's
    source: str = ""

    @classmethod
    def from_dict(cls, raw: dict[str, Any], name: str = "model") -> "Arch":
        """Build from a registry/Profile dict; ValueError naming the first missing or bad field."""
        if not isinstance(raw, dict):
            raise ValueError(f"architecture '{name}' must be a mapping of numbers")
        raw = {HF_KEYS.get(k, k): v for k, v in raw.items()}
        if "n_kv_heads" not in raw and "n_heads" in raw:
            raw["n_kv_heads"] = raw["n_heads"]  # HF configs omit it for multi-head attention
        if raw.get("sliding_window") is None:
            raw.pop("sliding_window", None)
        for key in ARCH_REQUIRED:
            if key not in raw:
                raise ValueError(f"architecture '{name}' is missing '{key}'")
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in raw.items() if k in known}
        arch = cls(**values)
        for key in ("n_layers", "hidden", "n_heads", "n_kv_heads", "vocab"):
            if not (isinstance(getattr(arch, key), (int, float)) and getattr(arch, key) >= 1):
                raise ValueError(f"architecture '{name}': '{key}' must be a positive number, got {getattr(arch, key)!r}")
        if arch.n_heads % arch.n_kv_heads:
            raise ValueError(f"architecture '{name}': n_heads {arch.n_heads} is not a multiple of n_kv_heads {arch.n_kv_heads}")
        if not 0 <= arch.shared_layers <= arch.n_layers:
            raise ValueError(f"architecture '{name}': shared_layers {arch.shared_layers} outside 0..{arch.n_layers}")
        if not 0.0 < arch.lm_head_fraction <= 1.0:
            raise ValueError(f"architecture '{name}': lm_head_fraction {arch.lm_head_fraction} outside (0, 1]")
        return arch

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for key in ("shared_layers", "shared_embeddings"):      # a drafter's fields: written where it borrows
            if not out[key]:
                out.pop(key)
        out.update(params=total_params(self), non_embedding_params=non_embedding_params(self))
        return out

    @property
    def dim_head(self) -> int:
        return self.head_dim or self.hidden // self.n_heads


def as_arch(arch: "Arch | dict[str, Any] | str", name: str = "model") -> Arch:
    """Accept an Arch, an architecture dict, or a registry name."""
    if isinstance(arch, Arch):
        return arch
    if isinstance(arch, str):
        return get_arch(arch)
    return Arch.from_dict(arch, name)


# ---- counts ----------------------------------------------------------------------------------
def attention_params(a: Arch) -> float:
    """q, k, v, o projections of one layer (GQA: k and v have n_kv_heads heads)."""
    q = a.hidden * a.n_heads * a.dim_head
    kv = 2 * a.hidden * a.n_kv_heads * a.dim_head
    o = a.n_heads * a.dim_head * a.hidden
    bias = (a.n_heads + 2 * a.n_kv_heads) * a.dim_head if a.qkv_bias else 0
    return float(q + kv + o + bias)


def mlp_params(a: Arch) -> float:
    return float((3 if a.gated_mlp else 2) * a.hidden * a.intermediate)


def layer_params(a: Arch) -> float:
    """One decoder layer: attention, MLP and its two norms."""
    return attention_params(a) + mlp_params(a) + 2 * a.hidden


def non_embedding_params(a: Arch) -> float:
    """Decoder layers, final norm and extra weights; no embedding table, no LM head."""
    return a.n_layers * layer_params(a) + a.hidden + a.extra_params


def embedding_params(a: Arch) -> float:
    return float(a.vocab * a.hidden)


def lm_head_params(a: Arch) -> float:
    """The LM head matrix (the embedding table itself when tied)."""
    return float(a.vocab * a.hidden)


def total_params(a: Arch) -> float:
    """All stored parameters: the LM head counted once more unless tied to the embeddings."""
    head = 0.0 if a.tie_embeddings else lm_head_params(a)
    return non_embedding_params(a) + embedding_params(a) + head


def own_params(a: Arch) -> float:
    """Parameters stored for this model alone: a drafter's weights without what it borrows from its
    target (`shared_layers`, `shared_embeddings`), which the target's weights already hold."""
    borrowed = a.shared_layers * layer_params(a)
    if a.shared_embeddings:
        borrowed += embedding_params(a) + (0.0 if a.tie_embeddings else lm_head_params(a))
    return total_params(a) - borrowed


def forward_params(a: Arch) -> float:
    """Weights multiplied per token in a forward: non-embedding weights plus the activated LM head."""
    return non_embedding_params(a) + a.lm_head_fraction * lm_head_params(a)


def kv_bytes_per_token(a: Arch, bytes_per_elem: float) -> float:
    """KV-cache bytes one token adds: K and V, n_kv_heads x head_dim, for every layer with a cache."""
    return 2.0 * (a.n_layers + a.extra_kv_layers) * a.n_kv_heads * a.dim_head * bytes_per_elem


def own_kv_bytes_per_token(a: Arch, bytes_per_elem: float) -> float:
    """KV-cache bytes one token adds to this model's own caches: a drafter's shared layers write
    the target's cache, which the target's `kv_bytes_per_token` already counts."""
    return 2.0 * (a.n_layers - a.shared_layers + a.extra_kv_layers) * a.n_kv_heads * a.dim_head * bytes_per_elem


def attention_flops_per_pair(a: Arch) -> float:
    """FLOPs of QK^T and AV for one (query token, attended token) pair over all attention layers."""
    return 4.0 * (a.n_layers + a.extra_kv_layers + a.cross_kv_layers) * a.n_heads * a.dim_head


def cross_kv_bytes_per_token(a: Arch, bytes_per_elem: float) -> float:
    """Bytes of another model's KV cache read per context token by cross-attention layers."""
    return 2.0 * a.cross_kv_layers * a.n_kv_heads * a.dim_head * bytes_per_elem


# ---- registry of real architectures (Hugging Face config.json numbers) -----------------------------
def _llama(n_layers, hidden, intermediate, n_heads, n_kv_heads=None, vocab=32000, **extra) -> dict[str, Any]:
    return dict(n_layers=n_layers, hidden=hidden, intermediate=intermediate, n_heads=n_heads,
                n_kv_heads=n_kv_heads or n_heads, vocab=vocab, **extra)


_LLAMA_7B = _llama(32, 4096, 11008, 32, source="LLaMA-7B config (Touvron et al. 2023); Vicuna-7B is a fine-tune")
_LLAMA_13B = _llama(40, 5120, 13824, 40, source="LLaMA-13B config; Vicuna-13B / Llama-2-13B share it")
_LLAMA_33B = _llama(60, 6656, 17920, 52, source="LLaMA-33B (30B) config; Vicuna-33B is a fine-tune")

ARCHITECTURES: dict[str, dict[str, Any]] = {
    "vicuna-7b": dict(_LLAMA_7B),
    "vicuna-13b": dict(_LLAMA_13B),
    "vicuna-33b": dict(_LLAMA_33B),
    "llama-7b": dict(_LLAMA_7B),
    "llama-13b": dict(_LLAMA_13B),
    "llama-33b": dict(_LLAMA_33B),
    "llama-2-7b": _llama(32, 4096, 11008, 32, source="meta-llama/Llama-2-7b-hf config.json"),
    "llama-2-13b": _llama(40, 5120, 13824, 40, source="meta-llama/Llama-2-13b-hf config.json"),
    "llama-2-70b": _llama(80, 8192, 28672, 64, 8, source="meta-llama/Llama-2-70b-hf config.json (GQA 8)"),
    "llama-68m": _llama(2, 768, 3072, 12, source="JackFram/llama-68m config.json (Miao et al., SpecInfer)"),
    "llama-160m": _llama(12, 768, 3072, 12, source="JackFram/llama-160m config.json (Miao et al., SpecInfer)"),
    "mistral-7b": _llama(32, 4096, 14336, 32, 8, head_dim=128, sliding_window=4096,
                         source="Mistral 7B paper Table 1: dim 4096, 32 layers, head_dim 128, hidden_dim 14336, "
                                "32 heads, 8 kv heads, window 4096, vocab 32000"),
    "llama-3-8b": _llama(32, 4096, 14336, 32, 8, vocab=128256, source="meta-llama/Meta-Llama-3-8B config.json"),
    "llama-3.2-1b": _llama(16, 2048, 8192, 32, 8, vocab=128256, head_dim=64, tie_embeddings=True,
                           source="meta-llama/Llama-3.2-1B config.json (tied embeddings; Llama 3's tokenizer)"),
    "qwen2.5-0.5b": _llama(24, 896, 4864, 14, 2, vocab=151936, qkv_bias=True, tie_embeddings=True,
                           source="Qwen/Qwen2.5-0.5B config.json (qkv bias, tied embeddings; Qwen2.5's tokenizer)"),
    "qwen2.5-7b": _llama(28, 3584, 18944, 28, 4, vocab=152064, qkv_bias=True,
                         source="Qwen/Qwen2.5-7B config.json (qkv bias, untied head)"),
    "qwen2.5-14b": _llama(48, 5120, 13824, 40, 8, vocab=152064, qkv_bias=True,
                          source="Qwen/Qwen2.5-14B config.json (qkv bias, untied head)"),
    "smollm2-135m": _llama(30, 576, 1536, 9, 3, vocab=49152, tie_embeddings=True,
                           source="HuggingFaceTB/SmolLM2-135M-Instruct config.json (tied embeddings)"),
}


def drafter_arch(kind: str, target: "Arch | dict | str", **options: Any) -> dict[str, Any]:
    """Architecture dict of a drafter built from the target's dimensions.

    `kind` is a Profile drafter kind whose costmodel module describes its drafter:
    `costmodel.<kind>.drafter_arch(target: Arch, base: dict, **options)`, `base` holding the
    target's dimensions (each module's docstring says what its drafter is built of).
    """
    t = as_arch(target)
    base = dict(hidden=t.hidden, intermediate=t.intermediate, n_heads=t.n_heads, n_kv_heads=t.n_kv_heads,
                vocab=t.vocab, head_dim=t.dim_head, qkv_bias=t.qkv_bias, tie_embeddings=True)
    return _own_drafter_arch(kind)(t, base, **options)


def _own_drafter_arch(kind: str):
    """`drafter_arch` of the costmodel module named `kind`; ValueError when there is none."""
    name = f"costmodel.{kind}"
    module = None
    if isinstance(kind, str) and kind.isidentifier():
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
    if module is None or not callable(getattr(module, "drafter_arch", None)):
        raise ValueError(f"unknown drafter kind '{kind}' (a drafter kind is a costmodel module with a "
                         f"drafter_arch)")
    return module.drafter_arch


def get_arch(name: str) -> Arch:
    """The registry architecture `name` (case-insensitive); ValueError listing the known names."""
    key = name.lower()
    if key not in ARCHITECTURES:
        raise ValueError(f"unknown architecture '{name}' (known: {', '.join(ARCHITECTURES)})")
    return Arch.from_dict(ARCHITECTURES[key], key)


def arch_dict(name: str) -> dict[str, Any]:
    """Registry entry with derived parameter counts, as stored in a Profile's "models"."""
    return get_arch(name).to_dict()
