"""Training the Kangaroo adapter (Kangaroo §3.1): the target is frozen, only the adapter learns.

The self-draft model is A o M_b[:l]: the target's layers 0..l-1 give the early features (the
input of layer l, signal `hidden.<l>` of `training.data`), the adapter maps them to draft
logits through the target's LM head. The loss is the paper's Eq. 3, the cross-entropy of the
draft distribution against the target's at every position,
    A* = argmin_A sum_t sum_n -M^b_n(x_t) log M^s_n(x_t),
with the target distribution taken over its top-k tokens (renormalised), which is the loop's
shared `distill_loss`. Early features and top-k come precomputed, so training never reruns the
target. The exit layer l is an option (`--set exit_layer=2`).
"""
from __future__ import annotations

from pathlib import Path

import torch

from runtime.drafters.io import save_drafter
from runtime.drafters.kangaroo import KangarooAdapter
from common.errors import InputError
from runtime.llama import Llama
from runtime.models import LoadedModel
from training.data import EARLY_LAYER, feature_spec
from training.loop import StepLoss, distill_step

KIND = "kangaroo"
WEIGHTS = "kangaroo.safetensors"
DEFAULT_EXIT_LAYER = EARLY_LAYER


class KangarooTrainee:
    """`training.loop.Trainee` for the adapter; a batch holds `hidden.<l>`, `topk_ids`, `topk_logp`."""

    kind = KIND

    def __init__(self, target: Llama, exit_layer: int = DEFAULT_EXIT_LAYER, *, seed: int = 0, std: float = 0.02, topk: int = 8,
                 adapter: KangarooAdapter | None = None):
        for p in target.parameters():
            p.requires_grad_(False)
        self.target = target
        self.module = adapter if adapter is not None else KangarooAdapter.for_target(target, exit_layer, seed=seed,
                                                                                      std=std)
        if self.module.exit_layer != exit_layer:
            raise InputError(f"kangaroo adapter exits at layer {self.module.exit_layer}, asked for {exit_layer}")
        self.spec = feature_spec(target, exit_layer, topk)
        self.seed, self.std = seed, std

    def parameters(self) -> list[torch.nn.Parameter]:
        return list(self.module.parameters())

    def logits(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Draft logits [B, T, V] from the batch's early features (causal adapter attention)."""
        features = batch[f"hidden.{self.module.exit_layer}"].to(self.target.dtype)
        return self.module(features, self.target, None)

    def loss(self, batch: dict[str, torch.Tensor]) -> StepLoss:
        """Eq. 3 on the batch and the top-1 agreements with the target."""
        return distill_step(self.logits(batch), batch)

    def save(self, out_dir: Path) -> Path:
        return save_drafter(Path(out_dir) / WEIGHTS, self.module)

    def describe(self) -> dict:
        return {"exit_layer": self.module.exit_layer, "loss": "Kangaroo Eq. 3 over the target's top-k",
                "own_parameters": sum(p.numel() for p in self.parameters()), "init_seed": self.seed,
                "init_std": self.std, "shared_with_target": ["layers 0..l-1", "lm_head"]}


def make_trainee(target: LoadedModel, *, seed: int = 0, exit_layer: int = DEFAULT_EXIT_LAYER, std: float = 0.02,
                 topk: int = 8) -> KangarooTrainee:
    """The registry hook of `python -m training kangaroo` (`--set exit_layer=L`)."""
    return KangarooTrainee(target.model, int(exit_layer), seed=seed, std=float(std), topk=int(topk))
