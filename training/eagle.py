"""Training the EAGLE-style feature drafter: multi-step (HASS) training with CORAL's CSRA loss.

Notation as `runtime.drafters.coral`: at position s the drafter reads token t_s and a feature of
position s-1 and outputs a feature that predicts t_{s+1}; f_s is the target's last hidden state.

Multi-step training (HASS) replays the drafting of inference. Step 1 is EAGLE's teacher forcing:
inputs (t_s, f_{s-1}), causal attention. Step k feeds back step k-1's outputs: inputs
(t_s, out^{k-1}_{s-1}), and a query at s plays the k-th draft after the root r = s-k+1, so it
attends to step 1's keys at positions <= r (the drafter cache built from true features) and to
step i's key at position r+i-1 for i = 2..k (the keys of the earlier drafts of that round). The
steps' keys are concatenated in a fresh KV cache per step and `hass_mask` selects them; a query
with s < k-1 has no root and is left out of step k's losses. `tests/test_train_eagle.py` checks
that step k's outputs equal the engine's k-th draft (`runtime.drafters.coral.Coral`).

Per step (weights of CORAL App. A: w_reg 0.5, w_csra ~0.1-0.2; w_cls, EAGLE's 0.1, is raised here
because the CPU budget is short and greedy acceptance is what the classification term trains):
    L_reg  = SmoothL1(out^k_s, f_s),
    L_cls  = cross-entropy to the target's top-k distribution at s (the loop's `distill_loss`),
    L_csra = InfoNCE over normalised features (temperature 0.07): the views of one position
             (target feature and every step's output) are positives, every other position's
             views in the batch are negatives (CORAL Eq. 2); queries are the drafter outputs.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from runtime.drafters.coral import FeatureDrafter
from runtime.drafters.io import save_drafter
from common.errors import InputError
from runtime.llama import Llama
from runtime.models import LoadedModel
from training.data import feature_spec
from training.loop import StepLoss, distill_step

KIND = "coral"
WEIGHTS = "coral.safetensors"


@dataclass
class EagleLossConfig:
    steps: int = 3             # HASS/CORAL training steps (the paper's default)
    w_reg: float = 0.5
    w_cls: float = 1.0
    w_csra: float = 0.2
    temperature: float = 0.07
    csra_positions: int = 256  # positions per batch entering the InfoNCE (all views of each)

    def __post_init__(self):
        if self.steps < 1:
            raise InputError(f"eagle: training steps must be >= 1, got {self.steps}")
        if not self.temperature > 0:
            raise InputError(f"eagle: InfoNCE temperature must be > 0, got {self.temperature}")
        if self.csra_positions < 2:
            raise InputError(f"eagle: csra_positions must be >= 2, got {self.csra_positions}")


def hass_mask(length: int, step: int, device="cpu") -> torch.Tensor:
    """Boolean [T, step*T]: query s of step `step` over the keys of steps 1..step (blocks of T)."""
    s = torch.arange(length, device=device)[:, None]
    p = torch.arange(length, device=device)[None, :]
    root = s - step + 1
    blocks = [p <= root]                                   # step 1: the cache of true features
    blocks += [p == root + i - 1 for i in range(2, step + 1)]
    return torch.cat(blocks, dim=1)


def multi_step_features(drafter: FeatureDrafter, target: Llama, input_ids: torch.Tensor,
                        features: torch.Tensor, steps: int) -> list[torch.Tensor]:
    """Output features [B, T, H] of each training step 1..steps (see the module docstring)."""
    b, t = input_ids.shape
    zero = torch.zeros_like(features[:, :1])
    prev = torch.cat([zero, features[:, :-1]], dim=1)     # f_{s-1}, f_{-1} = 0 as in the engine
    positions = torch.arange(t, device=input_ids.device)
    keys, values, outputs = [], [], []
    for step in range(1, steps + 1):
        cache = drafter.new_cache(batch=b, capacity=step * t)
        for k, v in zip(keys, values):
            cache.append(0, k, v)
        out = drafter(input_ids, prev, target, cache, positions, hass_mask(t, step, input_ids.device))
        k_all, v_all = cache.layer_kv(0)
        keys.append(k_all[:, :, (step - 1) * t:])
        values.append(v_all[:, :, (step - 1) * t:])
        outputs.append(out)
        prev = torch.cat([zero, out[:, :-1]], dim=1)
    return outputs


def csra_loss(views: torch.Tensor, n_queries: int, temperature: float) -> torch.Tensor:
    """CORAL Eq. 2 on views [V, P, H] of P positions; the first `n_queries` views are the queries.

    Each query's positives are the other V-1 views of its position; the denominator runs over all
    V*P features except the query itself. Mean over queries and positives.
    """
    n_views, n_pos, _ = views.shape
    z = F.normalize(views.float().reshape(n_views * n_pos, -1), dim=-1)
    q = z[: n_queries * n_pos]
    logits = q @ z.T / temperature
    rows = torch.arange(q.shape[0], device=z.device)
    logits[rows, rows] = float("-inf")                     # the query is not its own view
    log_prob = F.log_softmax(logits, dim=-1)
    position = torch.arange(n_views * n_pos, device=z.device) % n_pos
    positive = position[: q.shape[0], None] == position[None, :]
    positive[rows, rows] = False
    return -(log_prob.masked_fill(~positive, 0.0).sum(-1) / positive.sum(-1)).mean()


def target_features(batch: dict[str, torch.Tensor], target: Llama) -> torch.Tensor:
    """The target features f [B, T, H] of a batch (signal `hidden.<N>`), at the target's dtype."""
    return batch[f"hidden.{target.config.num_layers}"].to(target.dtype)


def csra_positions(shape: tuple[int, int], steps: int, limit: int, device="cpu") -> torch.Tensor:
    """Flat indices into [B, T] of at most `limit` positions rooted at every step (s >= steps - 1),
    evenly spaced (deterministic)."""
    b, t = shape
    s = torch.arange(t, device=device)
    idx = (torch.arange(b, device=device)[:, None] * t + s[None, steps - 1:]).reshape(-1)
    if idx.numel() > limit:
        idx = idx[torch.linspace(0, idx.numel() - 1, limit, device=device).long()]
    return idx


class EagleTrainee:
    """`training.loop.Trainee` for the feature drafter; the multi-step CSRA loss.

    A batch is a dict of `training.data` signals for windows [B, T]: `ids`, `hidden.<N>` (the
    target features f, N = the target's depth), `topk_ids`, `topk_logp`. The agreement reported
    is step 1's (the first draft after the root); `parts` holds every step's.
    """

    kind = KIND

    def __init__(self, target: Llama, *, seed: int = 0, std: float = 0.02, topk: int = 8,
                 loss_config: EagleLossConfig | None = None, drafter: FeatureDrafter | None = None):
        for p in target.parameters():
            p.requires_grad_(False)
        self.target = target
        self.config = loss_config or EagleLossConfig()
        self.module = drafter if drafter is not None else FeatureDrafter.for_target(target, seed=seed, std=std)
        self.spec = feature_spec(target, topk=topk)
        self.seed, self.std = seed, std

    def parameters(self) -> list[torch.nn.Parameter]:
        return [p for p in self.module.parameters() if p.requires_grad]

    def loss(self, batch: dict[str, torch.Tensor]) -> StepLoss:
        """w_reg L_reg + w_cls L_cls summed over steps, + w_csra L_csra."""
        c = self.config
        ids = batch["ids"]
        features = target_features(batch, self.target)
        outputs = multi_step_features(self.module, self.target, ids, features, c.steps)
        total = torch.zeros((), dtype=torch.float32, device=ids.device)
        parts: dict[str, float] = {}
        first = None
        for step, out in enumerate(outputs, start=1):
            rooted = slice(step - 1, None)           # step k's queries need a root: s >= k - 1
            reg = F.smooth_l1_loss(out[:, rooted].float(), features[:, rooted].float())
            cls = distill_step(self.module.logits(out[:, rooted], self.target),
                               {k: batch[k][:, rooted] for k in ("topk_ids", "topk_logp")})
            total = total + c.w_reg * reg + c.w_cls * cls.loss
            parts[f"reg{step}"], parts[f"cls{step}"] = float(reg.detach()), float(cls.loss.detach())
            parts[f"top1_step{step}"] = cls.agree / max(1, cls.count)
            if first is None:
                first = cls
        if c.w_csra > 0:
            idx = csra_positions(ids.shape, c.steps, c.csra_positions, ids.device)
            flat = [x.reshape(-1, x.shape[-1])[idx] for x in outputs + [features]]
            csra = csra_loss(torch.stack(flat), n_queries=len(outputs), temperature=c.temperature)
            total = total + c.w_csra * csra
            parts["csra"] = float(csra.detach())
        return StepLoss(total, first.agree, first.count, parts)

    def save(self, out_dir: Path) -> Path:
        return save_drafter(Path(out_dir) / WEIGHTS, self.module)

    def describe(self) -> dict:
        return {"loss_config": asdict(self.config), "own_parameters": sum(p.numel() for p in self.parameters()),
                "init_seed": self.seed, "init_std": self.std,
                "shared_with_target": ["embed_tokens", "final norm", "lm_head", "RoPE"]}


def make_trainee(target: LoadedModel, *, seed: int = 0, std: float = 0.02, topk: int = 8,
                 **loss_options) -> EagleTrainee:
    """The registry hook of `python -m training coral` (`--set steps=3 --set w_csra=0.2`, ...)."""
    return EagleTrainee(target.model, seed=seed, std=float(std), topk=int(topk),
                        loss_config=EagleLossConfig(**loss_options))
