"""Second training stage of CORAL (§3.3): the LM-head router over a trained, frozen feature drafter.

The vocabulary is split into N contiguous groups (`runtime.drafters.router.group_bounds`). The
router's target at a position is the target model's probability mass per group,
q_router(n) = sum_{x in group n} p_target(x), here from the target's top-k tokens renormalised
(the tail beyond k is a small mass), and its loss the cross-entropy of CORAL Eq. 9,
    L_router = -sum_n q_router(n) log p_router(n).
Only the router's W1, W2 learn. Its inputs are what it reads at inference: the normed output
features of the drafter at every drafting step, so the frozen drafter runs the same multi-step
replay as its own training (`training.eagle.multi_step_features`). The agreement reported is
the routed drafter's first draft's (top-n groups only, as the engine drafts); `parts` adds how
often the target's top-1 token lies in the chosen groups (`coverage`).
"""
from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from runtime.drafters.coral import FeatureDrafter
from runtime.drafters.io import load_drafter, save_drafter
from common.errors import InputError
from runtime.llama import Llama
from runtime.models import LoadedModel
from training.eagle import WEIGHTS as DRAFTER_WEIGHTS
from training.eagle import multi_step_features, target_features
from training.data import feature_spec
from training.loop import StepLoss, top1_agreement

KIND = "router"
WEIGHTS = "coral_router.safetensors"
DEFAULT_DRAFTER = Path("artifacts/drafters/coral") / DRAFTER_WEIGHTS


def group_ids(bounds: list[int], device="cpu") -> torch.Tensor:
    """The group index of every vocabulary id [V] for contiguous group `bounds` (N + 1 ints)."""
    sizes = torch.tensor([b - a for a, b in zip(bounds[:-1], bounds[1:])], device=device)
    return torch.repeat_interleave(torch.arange(len(sizes), device=device), sizes)


def group_mass(probs: torch.Tensor, groups: torch.Tensor, n_groups: int) -> torch.Tensor:
    """Probability mass per group [..., N] of tokens with probabilities probs [..., k] in `groups` [..., k]."""
    out = torch.zeros(*probs.shape[:-1], n_groups, dtype=probs.dtype, device=probs.device)
    return out.scatter_add_(-1, groups, probs)


class RouterTrainee:
    """`training.loop.Trainee` for `drafter.with_router(N, top_n)`'s router; the drafter stays frozen.

    A batch is the feature drafter's (`ids`, `hidden.<N>`, `topk_ids`, `topk_logp`).
    """

    kind = KIND

    def __init__(self, target: Llama, drafter: FeatureDrafter, n_groups: int = 16, top_n: int = 2, *,
                 steps: int = 3, seed: int = 0, std: float = 0.02, topk: int = 8, source: str = "given"):
        if steps < 1:
            raise InputError(f"router: drafting steps must be >= 1, got {steps}")
        if not 1 <= n_groups <= target.config.vocab_size:
            raise InputError(f"router: groups must lie in 1..{target.config.vocab_size}, got {n_groups}")
        if not 1 <= top_n <= n_groups:
            raise InputError(f"router: top_n must lie in 1..{n_groups}, got {top_n}")
        for p in list(target.parameters()) + list(drafter.parameters()):
            p.requires_grad_(False)
        self.target, self.steps, self.source = target, steps, source
        self.module = drafter.with_router(n_groups, top_n, seed=seed, std=std)
        for p in self.module.router.parameters():
            p.requires_grad_(True)
        self.groups = group_ids(self.module.router.bounds, target.device)
        self.spec = feature_spec(target, topk=topk)

    def parameters(self) -> list[torch.nn.Parameter]:
        return list(self.module.router.parameters())

    def loss(self, batch: dict[str, torch.Tensor]) -> StepLoss:
        """CORAL Eq. 9 averaged over the drafting steps; the routed first draft's agreement."""
        router, ids = self.module.router, batch["ids"]
        probs = batch["topk_logp"].float().exp()
        mass = group_mass(probs / probs.sum(-1, keepdim=True), self.groups[batch["topk_ids"]], router.n_groups)
        target_group = self.groups[batch["topk_ids"][..., 0]]
        with torch.no_grad():
            outputs = multi_step_features(self.module, self.target, ids, target_features(batch, self.target),
                                          self.steps)
            agree, count = top1_agreement(self.module.logits(outputs[0], self.target), batch["topk_ids"])
        total, hits, seen = torch.zeros((), device=ids.device), 0.0, 0
        for step, out in enumerate(outputs, start=1):
            rooted = slice(step - 1, None)
            log_p = F.log_softmax(router.group_logits(self.target.norm(out[:, rooted])).float(), dim=-1)
            total = total + (-(mass[:, rooted] * log_p).sum(-1)).mean() / len(outputs)
            chosen = torch.topk(log_p.detach(), router.top_n, dim=-1).indices
            hits += float((chosen == target_group[:, rooted, None]).any(-1).sum())
            seen += chosen.shape[0] * chosen.shape[1]
        return StepLoss(total, agree, count, {"coverage": hits / max(1, seen)})

    def save(self, out_dir: Path) -> Path:
        return save_drafter(Path(out_dir) / WEIGHTS, self.module)

    def describe(self) -> dict:
        r = self.module.router
        return {"n_groups": r.n_groups, "top_n": r.top_n, "steps": self.steps, "drafter": self.source,
                "own_parameters": sum(p.numel() for p in self.parameters()),
                "loss": "CORAL Eq. 9 against the target's top-k mass per group"}


def make_trainee(target: LoadedModel, *, seed: int = 0, drafter: str = str(DEFAULT_DRAFTER), n_groups: int = 16,
                 top_n: int = 2, steps: int = 3, std: float = 0.02, topk: int = 8) -> RouterTrainee:
    """The registry hook of `python -m training router` (`--set drafter=PATH --set n_groups=16 --set top_n=2`);
    the feature drafter comes from `python -m training coral` first."""
    feature_drafter = load_drafter(drafter, target.model)
    if not isinstance(feature_drafter, FeatureDrafter):
        raise InputError(f"router: {drafter} holds a {feature_drafter.kind} drafter, not a coral feature drafter")
    return RouterTrainee(target.model, feature_drafter, int(n_groups), int(top_n), steps=int(steps), seed=seed,
                         std=float(std), topk=int(topk), source=str(drafter))
