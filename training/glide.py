"""Training the GLIDE drafter (`runtime.drafters.glide.GlideDrafter`) with the block-wise mask.

At inference the drafter's cross-attention reads the target cache as left by the last
verification, so a query never sees the target's keys of its own round. Training reproduces
that delay with `block_cross_mask(L, block)` (GLIDE §4.1, block length 5): query j reads the
target's cached keys of position k iff block(j) > block(k). The target's cached keys/values of
the layers the drafter reads come precomputed from `training.data` (`k.<i>`, `v.<i>`).

Initialisation (so that "GLIDE vs a vanilla drafter of the same size" compares like with like):
embeddings, final norm and LM head are the target's (frozen, shared while training; the saved
file holds copies because `runtime.drafters.io` stores the whole drafter); each drafter layer's
self-attention and MLP start as a copy of the target's layer m (GQA keys/values expanded to the
drafter's heads); the cross-attention's output projection starts at zero, so the untrained GLIDE
drafter computes exactly what the untrained 1-layer vanilla drafter computes.
"""
from __future__ import annotations

from pathlib import Path

import torch

from runtime.drafters.glide import GlideDrafter, block_cross_mask
from runtime.drafters.io import save_drafter
from common.errors import InputError
from runtime.llama import Llama
from runtime.models import LoadedModel
from training.data import SignalSpec
from training.loop import StepLoss, distill_step

KIND = "glide"
WEIGHTS = "glide.safetensors"


def _expand_kv(weight: torch.Tensor, kv_heads: int, heads: int) -> torch.Tensor:
    """[kv_heads * d, in] -> [heads * d, in]: each query head gets the rows of its GQA kv head."""
    d = weight.shape[0] // kv_heads
    return weight.view(kv_heads, d, -1).repeat_interleave(heads // kv_heads, dim=0).reshape(heads * d, -1)


def build_glide(target: Llama, num_layers: int = 1, seed: int = 0) -> GlideDrafter:
    """A GLIDE drafter at the target's width, initialised from the target as the module docstring says."""
    drafter = GlideDrafter.for_target(target, seed=seed, num_layers=num_layers)
    base, c = drafter.base, target.config
    if (base.config.hidden_size, base.config.intermediate_size, base.config.head_dim) != (
            c.hidden_size, c.intermediate_size, c.head_dim):
        raise InputError("GLIDE training initialises from the target and needs the target's width")
    base.embed_tokens, base.lm_head = target.embed_tokens, target.lm_head
    with torch.no_grad():
        base.norm.weight.copy_(target.norm.weight)
        for m, layer in enumerate(base.layers):
            source = target.layers[m].state_dict()
            for name in ("self_attn.k_proj.weight", "self_attn.v_proj.weight"):
                source[name] = _expand_kv(source[name], c.num_kv_heads, base.config.num_kv_heads)
            for name in ("self_attn.k_proj.bias", "self_attn.v_proj.bias"):
                if name in source:
                    source[name] = _expand_kv(source[name][:, None], c.num_kv_heads, base.config.num_kv_heads)[:, 0]
            layer.load_state_dict(source)
        for cross in drafter.cross_attn:
            cross.o_proj.weight.zero_()
    for p in drafter.parameters():
        p.requires_grad_(True)
    target.embed_tokens.weight.requires_grad_(False)
    target.lm_head.weight.requires_grad_(False)
    return drafter


class GlideTrainee:
    """`training.loop.Trainee` for GLIDE: distillation with the block-wise cross mask."""

    kind = KIND

    def __init__(self, target: Llama, num_layers: int = 1, block: int = 5, seed: int = 0):
        if block < 1:
            raise InputError(f"GLIDE block length must be >= 1, got {block}")
        self.target, self.block = target, block
        self.drafter = build_glide(target, num_layers, seed)
        self.read_layers = [self.drafter.config.target_layer(m) for m in range(num_layers)]
        self.spec = SignalSpec(topk=8, kv_layers=tuple(self.read_layers))

    def parameters(self) -> list[torch.nn.Parameter]:
        return [p for p in self.drafter.parameters() if p.requires_grad]

    def logits(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        ids = batch["ids"]
        dtype = self.target.dtype
        kv = [(batch[f"k.{i}"].to(dtype), batch[f"v.{i}"].to(dtype)) for i in self.read_layers]
        cross = block_cross_mask(ids.shape[1], self.block, ids.device)
        return self.drafter(ids, kv, self.target.rope, cross_mask=cross).logits

    def loss(self, batch: dict[str, torch.Tensor]) -> StepLoss:
        return distill_step(self.logits(batch), batch)

    def save(self, out_dir: Path) -> Path:
        return save_drafter(Path(out_dir) / WEIGHTS, self.drafter)

    def describe(self) -> dict:
        own = sum(p.numel() for p in self.parameters())
        return {"num_layers": self.drafter.config.num_layers, "block": self.block, "reads_target_layers": self.read_layers,
                "trained_parameters": own, "shared_with_target": ["embed_tokens", "lm_head"],
                "init": "target's layer m (kv expanded), target's final norm; cross-attention o_proj = 0"}


def make_trainee(target: LoadedModel, *, seed: int = 0, num_layers: int = 1, block: int = 5) -> GlideTrainee:
    """The registry hook of `python -m training glide`."""
    return GlideTrainee(target.model, int(num_layers), int(block), seed)
