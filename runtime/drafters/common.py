"""What the drafters and their decoders share: seeded random initialisation on the target's device
and dtype, and what every decoder with its own drafter does (`resolve_drafter`, the `UNTRAINED`
options of a drafter built without weights, `start_keeping_prefill`).

Their decoders verify with the engine's own path (`Decoder.decide` -> `verification.rules`), so the
output is the target's greedy sequence at temperature 0 and the target's law when sampling, whatever
the drafter's weights. The drafter argument of `make_decoder` may be a drafter module, the path of a
safetensors file (`runtime.drafters.io`), or None for an untrained drafter seeded by `drafter_seed`
(weights N(0, drafter_std)).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from common.errors import InputError
from runtime.drafters.io import load_drafter
from runtime.engine.base import Decoder
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


def resolve_drafter(kind: type, drafter: Any, target: Llama, build) -> Any:
    """A drafter module of class `kind`: given, loaded from a file, or built untrained by `build()`."""
    if drafter is None:
        return build()
    if isinstance(drafter, (str, Path)):
        drafter = load_drafter(drafter, target)
    if not isinstance(drafter, kind):
        raise InputError(f"expected a {kind.kind} drafter, got {type(drafter).__name__}")
    return drafter


def int_option(method: str, name: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise InputError(f"{method}: {name} must be an integer >= {low}, got {value!r}")
    return value


UNTRAINED = {"drafter_seed": 0, "drafter_std": 0.02}   # options of the untrained drafter built without one


def check_untrained(decoder: Decoder) -> None:
    """Check (in place) the `UNTRAINED` options of a decoder with its own drafter."""
    o, method = decoder.options, decoder.method
    o["drafter_seed"] = int_option(method, "drafter_seed", o["drafter_seed"], 0)
    std = o["drafter_std"]
    if isinstance(std, bool) or not isinstance(std, (int, float)) or not std > 0:
        raise InputError(f"{method}: drafter_std must be a positive number, got {std!r}")
    o["drafter_std"] = float(std)


def start_keeping_prefill(decoder: Decoder, prompt: list[int], **forward_options: Any):
    """`Decoder.start`, but with the prefill forward run here so that its output (hidden states,
    features) is kept: the prompt minus its pending last token goes through the target once.
    Returns that ForwardOutput (None for a one-token prompt)."""
    decoder.reset(prompt)
    if len(prompt) == 1:
        return None
    with torch.no_grad():
        return decoder.target(decoder._ids(prompt[:-1]), decoder.target_cache, logits=False, **forward_options)
