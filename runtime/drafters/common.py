"""What the drafters share: seeded random initialisation on the target's device and dtype."""
from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from runtime.llama import Llama, RMSNorm


def materialise(build: Callable[[], nn.Module], target: Llama, seed: int, std: float) -> nn.Module:
    """Build a drafter on the meta device, materialise it like the target, seeded-initialise it.

    Matrices and embeddings get N(0, std), norm weights one, biases zero (as models.build_random).
    Parameters that are the target's own (shared LM head, embeddings) are left untouched.
    """
    with torch.device("meta"):
        module = build()
    shared = {id(p) for p in target.parameters()}
    module = module.to_empty(device=target.device).to(target.dtype)
    gen = torch.Generator(device=target.device).manual_seed(seed)
    with torch.no_grad():
        for sub in module.modules():
            for name, param in sub.named_parameters(recurse=False):
                if id(param) in shared:
                    continue
                if isinstance(sub, RMSNorm):
                    param.fill_(1.0)
                elif name == "bias":
                    param.zero_()
                else:
                    param.normal_(0.0, std, generator=gen)
    return module.eval()


def positions(position_ids: torch.Tensor | None, past: int, batch: int, q: int, device) -> torch.Tensor:
    """Position ids [batch, q]: given ones broadcast over the batch, else past + arange(q) (as Llama.forward)."""
    if position_ids is None:
        return torch.arange(past, past + q, device=device)[None].expand(batch, q)
    return position_ids[None].expand(batch, q) if position_ids.dim() == 1 else position_ids
