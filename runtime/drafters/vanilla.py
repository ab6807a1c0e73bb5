"""The vanilla drafter as a model: a 1-2 layer Llama that owns its decoder layers and final norm and
shares the target's embeddings and LM head. `training.vanilla` trains it; the engine's draft-model
methods take the `runtime.llama.Llama` that `load_vanilla(path, target)` rebuilds as is.

With a draft vocabulary (EAGLE-3's and FR-Spec's reduced head) its head multiplies only the rows of
those target tokens (`SubsetHead`) and gives every other token -inf, so the drafter never proposes
one: a greedy draft is the best of the subset, a sampled one is drawn from the softmax over it, and
the verification rules stay lossless (the target's residual covers the tokens q gives no mass).
The head's cost falls with the share of the vocabulary kept.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path

import torch

from common import atomic
from common.errors import InputError
from runtime.linear import linear
from runtime.llama import Llama
from runtime.models import truncated

META_KEY = "specsim_vanilla"


class SubsetHead(torch.nn.Module):
    """An LM head over the draft vocabulary `ids` only: the target head's rows of those tokens (a
    frozen copy), full-vocabulary logits with -inf elsewhere; `reduced` gives the subset's logits."""

    def __init__(self, target_head: torch.Tensor, ids: torch.Tensor):
        super().__init__()
        ids = torch.as_tensor(ids, dtype=torch.long, device=target_head.device)
        if ids.ndim != 1 or ids.numel() < 1 or int(ids.min()) < 0 or int(ids.max()) >= target_head.shape[0] \
                or torch.unique(ids).numel() != ids.numel():
            raise InputError(f"draft vocabulary must be distinct token ids in 0..{target_head.shape[0] - 1}")
        self.vocab = int(target_head.shape[0])
        self.register_buffer("ids", ids)
        self.register_buffer("weight", target_head.detach()[ids].clone())

    def reduced(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = x.new_full((*x.shape[:-1], self.vocab), float("-inf"))
        out[..., self.ids] = self.reduced(x)
        return out


def build_vanilla(target: Llama, num_layers: int = 1, draft_vocab: torch.Tensor | None = None) -> Llama:
    """Copies of the target's first `num_layers` layers and final norm; embeddings and LM head shared,
    frozen; the head restricted to `draft_vocab` (token ids) when given."""
    small = truncated(target, num_layers)
    small.layers = torch.nn.ModuleList(copy.deepcopy(layer) for layer in small.layers)
    small.norm = copy.deepcopy(target.norm)
    small.embed_tokens.weight.requires_grad_(False)
    small.lm_head.weight.requires_grad_(False)
    if draft_vocab is not None:
        small.lm_head = SubsetHead(target.lm_head.weight, draft_vocab)
    for p in own_parameters(small):
        p.requires_grad_(True)
    return small


def draft_vocab_of(drafter: Llama) -> torch.Tensor | None:
    """The token ids a drafter may propose (None: the whole vocabulary)."""
    return drafter.lm_head.ids if isinstance(drafter.lm_head, SubsetHead) else None


def own_parameters(drafter: Llama) -> list[torch.nn.Parameter]:
    return [*drafter.layers.parameters(), *drafter.norm.parameters()]


def own_state(drafter: Llama) -> dict[str, torch.Tensor]:
    """The weights the drafter owns (layers.*, norm.weight), contiguous copies, and its draft
    vocabulary where it has one (the head's rows are the target's, rebuilt at load)."""
    state = {k: v.detach().contiguous().clone() for k, v in drafter.state_dict().items()
             if k.startswith(("layers.", "norm."))}
    vocab = draft_vocab_of(drafter)
    if vocab is not None:
        state["draft_vocab"] = vocab.detach().cpu().contiguous().clone()
    return state


def save_vanilla(path: str | Path, drafter: Llama) -> Path:
    from safetensors.torch import save_file

    vocab = draft_vocab_of(drafter)
    meta = {META_KEY: json.dumps({"num_layers": drafter.config.num_layers,
                                  "hidden_size": drafter.config.hidden_size, "vocab_size": drafter.config.vocab_size,
                                  "draft_vocab": 0 if vocab is None else int(vocab.numel())})}
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
    state = load_file(str(p))
    vocab = state.pop("draft_vocab", None)
    if (0 if vocab is None else vocab.numel()) != int(info.get("draft_vocab", 0)):
        raise InputError(f"{p}: its metadata says a draft vocabulary of {info.get('draft_vocab', 0)} tokens, "
                         f"the file holds {0 if vocab is None else vocab.numel()}")
    drafter = build_vanilla(target, int(info["num_layers"]), vocab)
    missing = set(k for k in own_state(drafter) if k != "draft_vocab") ^ set(state)
    if missing:
        raise InputError(f"{p}: weights do not match a {info['num_layers']}-layer drafter ({sorted(missing)[0]})")
    drafter.load_state_dict(state, strict=False)
    return drafter.to(device=target.device, dtype=target.dtype).eval()
