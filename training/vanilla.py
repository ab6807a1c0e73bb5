"""The vanilla drafter: a 1-2 layer Llama that shares the target's embeddings and LM head (frozen).

It owns its decoder layers and final norm only, initialised from the target's first layers and
final norm (so the untrained drafter is `runtime.models.truncated`), and is trained by
next-token distillation on the target's top-k (`training.loop.distill_step`). With `--set
draft_vocab=N` its head keeps the N tokens the target most often predicts on the training corpus
(its greedy next token, counted over the train windows) and it is distilled on the target's top-k
renormalised over them (`subset_distill_step`). Saved as a safetensors file holding only those own
weights, the draft vocabulary and the layer count (`runtime.drafters.vanilla`, which the engine
loads it with).
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


def draft_vocabulary(topk_ids: torch.Tensor, size: int, vocab: int) -> torch.Tensor:
    """The `size` tokens most often the target's top-1 in `topk_ids` [..., k] (ties to the lower id),
    sorted by id."""
    counts = torch.bincount(topk_ids[..., 0].reshape(-1), minlength=vocab).double()
    order = sorted(range(vocab), key=lambda t: (-counts[t].item(), t))[:size]
    return torch.tensor(sorted(order), dtype=torch.long)


def subset_distill_step(reduced: torch.Tensor, batch: dict[str, torch.Tensor], position: torch.Tensor,
                        ids: torch.Tensor) -> StepLoss:
    """Distillation over the draft vocabulary: cross-entropy of the subset softmax `reduced` [..., N]
    to the target's top-k renormalised over the tokens it keeps (`position`: vocabulary id -> index
    in the subset, -1 outside); positions whose top-k holds none of them are left out. Agreement is
    with the target's top-1 over the whole vocabulary."""
    where = position[batch["topk_ids"]]                                   # [..., k]
    kept = where >= 0
    logp = torch.where(kept, batch["topk_logp"].float(), torch.full_like(batch["topk_logp"].float(), -1e30))
    p = torch.softmax(logp, dim=-1) * kept
    logq = torch.log_softmax(reduced.float(), dim=-1).gather(-1, where.clamp(min=0))
    rows = kept.any(-1)
    loss = -((p * logq).sum(-1) * rows).sum() / rows.sum().clamp(min=1)
    agree = (ids[reduced.detach().argmax(-1)] == batch["topk_ids"][..., 0]).sum()
    return StepLoss(loss, float(agree), int(batch["topk_ids"][..., 0].numel()))



KIND = "vanilla"
WEIGHTS = "vanilla.safetensors"


class VanillaTrainee:
    """`training.loop.Trainee` for the vanilla drafter."""

    kind = KIND
    spec = SignalSpec(topk=8)

    def __init__(self, target: Llama, num_layers: int = 1, draft_vocab: int = 0):
        self.target, self.num_layers, self.draft_vocab = target, num_layers, draft_vocab
        self.drafter = build_vanilla(target, num_layers)

    def prepare(self, data) -> None:
        """Choose the draft vocabulary from the train windows (`training.data.TrainingData`)."""
        if self.draft_vocab:
            vocab = self.target.config.vocab_size
            ids = draft_vocabulary(data.train["topk_ids"], self.draft_vocab, vocab)
            self.drafter = build_vanilla(self.target, self.num_layers, ids)
            self.position = torch.full((vocab,), -1, dtype=torch.long)
            self.position[ids] = torch.arange(ids.numel())
            top1 = data.train["topk_ids"][..., 0]
            self.coverage = float(torch.isin(top1, ids).double().mean())

    def parameters(self) -> list[torch.nn.Parameter]:
        return own_parameters(self.drafter)

    def loss(self, batch: dict[str, torch.Tensor]) -> StepLoss:
        if not self.draft_vocab:
            return distill_step(self.drafter(batch["ids"]).logits, batch)
        hidden = self.drafter(batch["ids"], logits=False).hidden
        head = self.drafter.lm_head
        return subset_distill_step(head.reduced(self.drafter.norm(hidden)), batch, self.position.to(hidden.device),
                                   head.ids)

    def save(self, out_dir: Path) -> Path:
        return save_vanilla(Path(out_dir) / WEIGHTS, self.drafter)

    def describe(self) -> dict:
        out = {"num_layers": self.drafter.config.num_layers, "own_parameters": sum(p.numel() for p in self.parameters()),
               "shared_with_target": ["embed_tokens", "lm_head"], "init": "target's first layers and final norm"}
        if self.draft_vocab:
            out["draft_vocab"] = {"size": self.draft_vocab, "chosen": "the target's most frequent top-1 tokens on the "
                                  "train windows", "train_top1_coverage": round(self.coverage, 4)}
        return out


def make_trainee(target: LoadedModel, *, seed: int = 0, num_layers: int = 1, draft_vocab: int = 0) -> VanillaTrainee:
    """The registry hook of `python -m training vanilla` (initialisation is a copy: `seed` unused);
    `draft_vocab` 0 keeps the whole vocabulary."""
    if not 1 <= int(num_layers) <= 2:
        raise InputError(f"vanilla drafter has 1 or 2 layers, got {num_layers}")
    vocab = target.model.config.vocab_size
    if isinstance(draft_vocab, bool) or not isinstance(draft_vocab, int) or not 0 <= draft_vocab <= vocab:
        raise InputError(f"draft_vocab must be an integer in 0..{vocab} (0: the whole vocabulary), got {draft_vocab!r}")
    return VanillaTrainee(target.model, int(num_layers), draft_vocab)
