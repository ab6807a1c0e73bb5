"""ONE training loop for every drafter kind (`training.kinds()`).

The protocol a drafter kind implements (`Trainee`), and nothing else:

    class MyTrainee:
        kind: str                       # "vanilla", "glide", ...
        spec: SignalSpec                # target signals its loss reads (training.data)
        def parameters(self) -> list[torch.nn.Parameter]   # what the optimiser updates
        def loss(self, batch: dict[str, torch.Tensor]) -> StepLoss
        def save(self, out_dir: Path) -> Path               # the weights, written atomically
        def describe(self) -> dict                          # its configuration, for the JSON

`batch` is a slice of the signal dict of `training.data` (leading axis = windows), already
on the trainee's device. `StepLoss.agree`/`count` are the top-1 agreements with the target and
the positions counted (`top1_agreement`); `parts` may carry named loss components to log.
`distill_loss` (cross-entropy to the target's renormalised top-k distribution) is the shared
next-token objective.

The loop (`train`): AdamW (no weight decay on norms and biases), linear warm-up then cosine decay
to `min_lr_ratio`, gradient clipping, seeded batch order (torch.Generator(seed)), eval loss and
top-1 agreement on the held-out windows before training, every `eval_every` steps and at the end.
Budget: `steps` fixes the step count (bit-for-bit reproducible); otherwise the count is set from
the `minutes` budget after timing the warm-up steps (whose learning rates do not depend on the
count) and the first eval; a run past 1.15 x the budget stops early and says so. The JSON's
`reproduce` command repeats a run exactly: every option that shaped the weights spelled out (a
default changed later must not change them; a corpus default did once), and `--planned-steps`
where the budget stopped it before the end of its schedule. The final numbers and the curve go to
`training.json` next to the weights (atomic writes throughout).
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

import torch

from common import atomic
from common.errors import InputError
from training.data import SignalSpec, TrainingData


@dataclass
class StepLoss:
    loss: torch.Tensor            # scalar, differentiable
    agree: float                  # top-1 agreements with the target
    count: int                    # positions counted
    parts: dict[str, float] = field(default_factory=dict)


class Trainee(Protocol):
    kind: str
    spec: SignalSpec

    def parameters(self) -> list[torch.nn.Parameter]: ...

    def loss(self, batch: dict[str, torch.Tensor]) -> StepLoss: ...

    def save(self, out_dir: Path) -> Path: ...

    def describe(self) -> dict: ...


@dataclass(frozen=True)
class LoopConfig:
    minutes: float = 30.0
    steps: int | None = None      # fixed step count (overrides the time budget)
    planned_steps: int | None = None  # the schedule's length where it is not `steps` (a run the budget cut short)
    batch_size: int = 8
    lr: float = 1e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 10
    weight_decay: float = 0.01
    clip: float = 1.0
    eval_every: int = 50
    seed: int = 0

    def __post_init__(self):
        if self.steps is None and not self.minutes > 0:
            raise InputError(f"--minutes must be > 0, got {self.minutes}")
        if self.steps is not None and self.steps < 1:
            raise InputError(f"--steps must be >= 1, got {self.steps}")
        if self.planned_steps is not None and (self.steps is None or self.planned_steps < self.steps):
            raise InputError(f"--planned-steps needs --steps and must be >= it, got {self.planned_steps} "
                             f"with --steps {self.steps}")
        for option, value in (("--batch-size", self.batch_size), ("--eval-every", self.eval_every)):
            if value < 1:
                raise InputError(f"{option} must be >= 1, got {value}")
        if not self.lr > 0:
            raise InputError(f"--lr must be > 0, got {self.lr}")
        if self.warmup_steps < 0 or not 0 <= self.min_lr_ratio <= 1:   # not options of the CLI
            raise InputError(f"LoopConfig: warmup_steps must be >= 0 and min_lr_ratio in [0, 1], "
                             f"got {self.warmup_steps}, {self.min_lr_ratio}")


# ------------------------------------------------------------------------------ shared objective

def top1_agreement(logits: torch.Tensor, topk_ids: torch.Tensor) -> tuple[float, int]:
    """How many positions' argmax equal the target's top-1 token, and how many positions."""
    agree = (logits.argmax(-1) == topk_ids[..., 0]).sum()
    return float(agree), int(topk_ids[..., 0].numel())


def distill_loss(logits: torch.Tensor, topk_ids: torch.Tensor, topk_logp: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of the drafter's full softmax to the target's top-k distribution (renormalised).

    Up to a constant this is KL(p_target,topk || q_drafter); with k = 1 it is the cross-entropy to the
    target's greedy token.
    """
    p = torch.softmax(topk_logp.float(), dim=-1)
    logq = torch.log_softmax(logits.float(), dim=-1).gather(-1, topk_ids)
    return -(p * logq).sum(-1).mean()


def distill_step(logits: torch.Tensor, batch: dict[str, torch.Tensor]) -> StepLoss:
    """`StepLoss` of next-token distillation for logits aligned with the batch's positions."""
    agree, count = top1_agreement(logits.detach(), batch["topk_ids"])
    return StepLoss(distill_loss(logits, batch["topk_ids"], batch["topk_logp"]), agree, count)


# ------------------------------------------------------------------------------ the loop

def lr_at(step: int, total: int, config: LoopConfig) -> float:
    """Linear warm-up over `warmup_steps`, then cosine from lr to lr * min_lr_ratio at `total`."""
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    span = max(1, total - config.warmup_steps)
    progress = min(1.0, (step - config.warmup_steps) / span)
    low = config.lr * config.min_lr_ratio
    return low + 0.5 * (config.lr - low) * (1 + math.cos(math.pi * progress))


def _take(data: dict[str, torch.Tensor], index: torch.Tensor, device) -> dict[str, torch.Tensor]:
    return {k: v[index].to(device) for k, v in data.items()}


def evaluate(trainee: Trainee, data: dict[str, torch.Tensor], batch_size: int, device) -> dict[str, float]:
    """Token-weighted loss and top-1 agreement over all held-out windows."""
    n = data["ids"].shape[0]
    loss_sum = agree = count = 0.0
    with torch.no_grad():
        for lo in range(0, n, batch_size):
            out = trainee.loss(_take(data, torch.arange(lo, min(n, lo + batch_size)), device))
            loss_sum += float(out.loss) * out.count
            agree += out.agree
            count += out.count
    return {"eval_loss": loss_sum / count, "eval_top1": agree / count}


def _optimizer(params: list[torch.nn.Parameter], config: LoopConfig) -> torch.optim.Optimizer:
    decay = [p for p in params if p.dim() >= 2]
    plain = [p for p in params if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": config.weight_decay},
                              {"params": plain, "weight_decay": 0.0}], lr=config.lr)


def reproduce_options(config: LoopConfig, steps: int, planned: int) -> list[str]:
    """The loop's options that rerun a finished run step for step, all explicit (a default that
    changes later must not change the weights): its steps and, where the time budget stopped it
    early, the schedule it planned."""
    out = ["--steps", str(steps)] + (["--planned-steps", str(planned)] if planned != steps else [])
    return out + ["--batch-size", str(config.batch_size), "--lr", f"{config.lr:g}", "--seed", str(config.seed)]


def train(trainee: Trainee, data: TrainingData, config: LoopConfig, out_dir: str | Path | None = None,
          *, device=None, log=print, clock: Callable[[], float] = time.perf_counter,
          command: Sequence[str] = ()) -> dict[str, Any]:
    """Train `trainee` on `data`; write weights and training.json to `out_dir` (if given); return the summary.
    `clock` (seconds) drives the time budget; tests pass a simulated one. `command`: the caller's
    options that shaped `data` and `trainee`, appended to the summary's reproduce command."""
    params = [p for p in trainee.parameters() if p.requires_grad]
    if not params:
        raise InputError(f"{trainee.kind}: no trainable parameters")
    device = device or params[0].device
    torch.manual_seed(config.seed)
    gen = torch.Generator().manual_seed(config.seed)
    opt = _optimizer(params, config)
    n_train = data.train["ids"].shape[0]
    started = clock()
    initial = evaluate(trainee, data.eval, config.batch_size, device)
    eval_s = clock() - started
    log(f"{trainee.kind}: untrained eval loss {initial['eval_loss']:.3f} top-1 {initial['eval_top1']:.3f}")
    total = config.planned_steps or config.steps or max(config.warmup_steps + 1, 10 ** 9)   # the schedule's length
    stop = config.steps or total
    budget_s = config.minutes * 60.0
    step_times: list[float] = []
    history, window = [], []
    step = 0
    while step < stop:
        t0 = clock()
        index = torch.randint(0, n_train, (config.batch_size,), generator=gen)
        for group in opt.param_groups:
            group["lr"] = lr_at(step, total, config)
        out = trainee.loss(_take(data.train, index, device))
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, config.clip))
        opt.step()
        window.append((float(out.loss.detach()), out.agree / max(1, out.count), grad_norm))
        step += 1
        step_times.append(clock() - t0)
        if config.steps is None and step == max(1, config.warmup_steps) and total >= 10 ** 9:
            per_step = statistics.median(step_times) + eval_s / config.eval_every
            total = stop = max(step + 1, int((budget_s - (clock() - started)) / per_step) + step)
            log(f"{trainee.kind}: {statistics.median(step_times):.2f} s/step -> {total} steps in {config.minutes} min")
        if step % config.eval_every == 0 or step == stop:
            row = {"step": step, "seconds": round(clock() - started, 1),
                   "lr": lr_at(step - 1, total, config),
                   "train_loss": statistics.fmean(w[0] for w in window),
                   "train_top1": statistics.fmean(w[1] for w in window),
                   "grad_norm": statistics.fmean(w[2] for w in window), **out.parts,
                   **evaluate(trainee, data.eval, config.batch_size, device)}
            history.append(row)
            window = []
            log(f"{trainee.kind}: step {step}/{total} train {row['train_loss']:.3f} eval {row['eval_loss']:.3f} "
                f"top-1 {row['eval_top1']:.3f} ({row['seconds']:.0f} s)")
        if config.steps is None and clock() - started > 1.15 * budget_s and step < total:
            log(f"{trainee.kind}: wall-clock limit reached at step {step} of {total}")
            break
    if not history or history[-1]["step"] != step:
        history.append({"step": step, "seconds": round(clock() - started, 1),
                        "lr": lr_at(step - 1, total, config),
                        "train_loss": statistics.fmean(w[0] for w in window) if window else float("nan"),
                        "train_top1": statistics.fmean(w[1] for w in window) if window else float("nan"),
                        **evaluate(trainee, data.eval, config.batch_size, device)})
    final = history[-1]
    summary = {"kind": trainee.kind, "drafter": trainee.describe(), "loop": asdict(config),
               "steps": step, "planned_steps": total, "seconds": round(clock() - started, 1),
               "median_step_s": round(statistics.median(step_times), 4),
               "untrained": initial, "final": {k: final[k] for k in ("train_loss", "train_top1", "eval_loss", "eval_top1")},
               "data": data.meta, "history": history,
               "reproduce": " ".join([f"python -m training {trainee.kind}", *reproduce_options(config, step, total),
                                      *command])}
    if out_dir is not None:
        out = Path(out_dir)
        summary["weights"] = str(trainee.save(out))
        atomic.write_json(out / "training.json", summary)
    return summary
