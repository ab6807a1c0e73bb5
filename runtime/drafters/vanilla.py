"""The vanilla drafter as a model: a 1-2 layer Llama that owns its decoder layers and final norm and
shares the target's embeddings and LM head. `training.vanilla` trains it; the engine's draft-model
methods take the `runtime.llama.Llama` that `load_vanilla(path, target)` rebuilds as is.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path

import torch

from common import atomic
from common.errors import InputError
from runtime.llama import Llama
from runtime.models import truncated

META_KEY = "specsim_vanilla"


def build_vanilla(target: Llama, num_layers: int = 1) -> Llama:
    """Copies of the target's first `num_layers` layers and final norm; embeddings and LM head shared, frozen."""
    small = truncated(target, num_layers)
    small.layers = torch.nn.ModuleList(copy.deepcopy(layer) for layer in small.layers)
    small.norm = copy.deepcopy(target.norm)
    small.embed_tokens.weight.requires_grad_(False)
    small.lm_head.weight.requires_grad_(False)
    for p in own_parameters(small):
        p.requires_grad_(True)
    return small


def own_parameters(drafter: Llama) -> list[torch.nn.Parameter]:
    return [*drafter.layers.parameters(), *drafter.norm.parameters()]


def own_state(drafter: Llama) -> dict[str, torch.Tensor]:
    """The weights the drafter owns (layers.*, norm.weight), contiguous copies."""
    return {k: v.detach().contiguous().clone() for k, v in drafter.state_dict().items()
            if k.startswith(("layers.", "norm."))}


def save_vanilla(path: str | Path, drafter: Llama) -> Path:
    from safetensors.torch import save_file

    meta = {META_KEY: json.dumps({"num_layers": drafter.config.num_layers,
                                  "hidden_size": drafter.config.hidden_size, "vocab_size": drafter.config.vocab_size})}
    with atomic.atomic_path(path) as tmp:
        save_file(own_state(drafter), str(tmp), metadata=meta)
    return Path(path)


def load_vanilla(path: str | Path, target: Llama) -> Llama:
    """The drafter saved by `save_vanilla`, on `target`'s embeddings and LM head, in eval mode."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    p = Path(path)
    if not p.is_file():
        raise InputError(f"vanilla drafter file not found: {p}")
    with safe_open(str(p), framework="pt") as fh:
        raw = (fh.metadata() or {}).get(META_KEY)
    if raw is None:
        raise InputError(f"{p}: not a vanilla drafter file (no {META_KEY} metadata)")
    info = json.loads(raw)
    if (info["hidden_size"], info["vocab_size"]) != (target.config.hidden_size, target.config.vocab_size):
        raise InputError(f"{p}: drafter built for width {info['hidden_size']} / vocabulary {info['vocab_size']}, "
                         f"the target has {target.config.hidden_size} / {target.config.vocab_size}")
    drafter = build_vanilla(target, int(info["num_layers"]))
    state = load_file(str(p))
    missing = set(own_state(drafter)) ^ set(state)
    if missing:
        raise InputError(f"{p}: weights do not match a {info['num_layers']}-layer drafter ({sorted(missing)[0]})")
    drafter.load_state_dict(state, strict=False)
    return drafter.to(device=target.device, dtype=target.dtype).eval()
