"""The vanilla drafter: a 1-2 layer Llama that shares the target's embeddings and LM head (frozen).

It owns its decoder layers and final norm only, initialised from the target's first layers and
final norm (so the untrained drafter is `runtime.models.truncated`), and is trained by
next-token distillation on the target's top-k (`training.loop.distill_step`). Saved as a
safetensors file holding only those own weights plus its layer count; `load_vanilla(path, target)`
rebuilds a `runtime.llama.Llama` that the engine's draft-model methods (sd, mcsd, cape) take as is.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path

import torch

from common import atomic
from common.errors import InputError
from runtime.llama import Llama
from runtime.models import LoadedModel, truncated
from training.data import SignalSpec
from training.loop import StepLoss, distill_step

META_KEY = "specsim_vanilla"
KIND = "vanilla"
WEIGHTS = "vanilla.safetensors"


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


class VanillaTrainee:
    """`training.loop.Trainee` for the vanilla drafter."""

    kind = KIND
    spec = SignalSpec(topk=8)

    def __init__(self, target: Llama, num_layers: int = 1):
        self.target = target
        self.drafter = build_vanilla(target, num_layers)

    def parameters(self) -> list[torch.nn.Parameter]:
        return own_parameters(self.drafter)

    def loss(self, batch: dict[str, torch.Tensor]) -> StepLoss:
        return distill_step(self.drafter(batch["ids"]).logits, batch)

    def save(self, out_dir: Path) -> Path:
        return save_vanilla(Path(out_dir) / WEIGHTS, self.drafter)

    def describe(self) -> dict:
        return {"num_layers": self.drafter.config.num_layers, "own_parameters": sum(p.numel() for p in self.parameters()),
                "shared_with_target": ["embed_tokens", "lm_head"], "init": "target's first layers and final norm"}


def make_trainee(target: LoadedModel, *, seed: int = 0, num_layers: int = 1) -> VanillaTrainee:
    """The registry hook of `python -m training vanilla` (initialisation is a copy: `seed` unused)."""
    if not 1 <= int(num_layers) <= 2:
        raise InputError(f"vanilla drafter has 1 or 2 layers, got {num_layers}")
    return VanillaTrainee(target.model, int(num_layers))
