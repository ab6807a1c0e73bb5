"""The vanilla drafter: a 1-2 layer Llama that shares the target's embeddings and LM head (frozen).

It owns its decoder layers and final norm only, initialised from the target's first layers and
final norm (so the untrained drafter is `runtime.models.truncated`), and is trained by
next-token distillation on the target's top-k (`training.loop.distill_step`). Saved as a
safetensors file holding only those own weights plus its layer count (`runtime.drafters.vanilla`,
which the engine loads it with).
"""
from __future__ import annotations

from pathlib import Path

import torch

from common.errors import InputError
from runtime.llama import Llama
from runtime.drafters.vanilla import build_vanilla, own_parameters, save_vanilla
from runtime.models import LoadedModel
from training.data import SignalSpec
from training.loop import StepLoss, distill_step

KIND = "vanilla"
WEIGHTS = "vanilla.safetensors"


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
