"""Seconds per step: a StepModel's shape priced by the one step-cost model (`costmodel.step`).

The closed-form scorers price a step with the shape's expected reach and verify tokens; the
simulator prices each simulated step with what it realised (which draft forwards ran, how many
query tokens the verify forward carried) through the same `costmodel.step` functions. The latency
is a `costmodel.step` callable latency(model, n_tokens, ctx, batch): the Profile's fitted models,
or given predictors (`.predict(n_tokens, ctx_len, batch)`, e.g. FixedLatency for closed-form
checks). Parallelism (tensor / pipeline parallel, branch parallel, a draft model on its own
GPU) wraps that callable and the verify tokens and adds the transfers between GPUs; the compute
always comes from the latency models.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from common.errors import InputError
from costmodel import step as step_cost
from costmodel.step import Latency, RowsLatency
from simulator.methods import StepModel


class FixedLatency:
    """A latency model that ignores its inputs: `seconds` per forward (for closed-form checks)."""

    def __init__(self, seconds: float):
        if not seconds > 0:
            raise InputError(f"fixed latency must be > 0 seconds, got {seconds!r}")
        self.seconds = float(seconds)

    def predict(self, n_tokens, ctx_len, batch=1):
        return np.zeros(np.broadcast(np.asarray(n_tokens), np.asarray(ctx_len), np.asarray(batch)).shape) + self.seconds


def _vectorised(predictor) -> Callable:
    """predict(n_tokens, ctx_len, batch) over numpy arrays, whether or not the model broadcasts."""
    probe = np.array([1, 2])
    try:
        out = np.asarray(predictor.predict(probe, probe * 0 + 8, 1), dtype=float)
        if out.shape == (2,):
            return lambda n, c, b: np.asarray(predictor.predict(n, c, b), dtype=float)
    except Exception:  # a scalar-only model raises on arrays; fall back to a loop
        pass
    scalar = np.frompyfunc(lambda n, c, b: float(predictor.predict(int(n), int(c), int(b))), 3, 1)
    return lambda n, c, b: np.asarray(scalar(n, c, b), dtype=float)


def latency_for(profile, step: StepModel, latencies: Mapping[str, Any] | None = None) -> Latency:
    """The step-cost latency callable over every model the step runs: a given predictor first,
    else the Profile's fitted model (InputError naming a model the Profile lacks)."""
    given = dict(latencies or {})
    fn = {m: _vectorised(given[m] if m in given else profile.latency_model(m))
          for m in step.priced_models}

    def seconds(model, n_tokens, ctx, batch=1):
        return fn[model](n_tokens, ctx, batch)
    return seconds


def rows_latency_for(profile) -> "RowsLatency":
    """Seconds of a forward of a Profile model over ragged rows (`costmodel.step.RowsLatency`): its
    latency model's `predict_rows` (a roofline or linear model; a table cannot)."""
    def seconds(model, sums):
        return np.asarray(profile.latency_model(model).predict_rows(sums), dtype=float)
    return seconds


@dataclass
class Parallelism:
    """How one replica spreads a forward: tp-way tensor parallel, pp pipeline stages, lp-way
    branch parallel (the branches of a draft-free verify forward on lp GPUs, each a full copy), and
    the draft model on the target's GPU or on its own."""

    tp: int = 1
    pp: int = 1
    lp: int = 1
    draft_on_own_gpu: bool = False
    link_gbps: float = 300.0      # GPU-to-GPU bandwidth, GB/s (NVLink-class)
    link_latency_s: float = 5e-6  # per message

    def __post_init__(self):
        for name in ("tp", "pp", "lp"):
            if int(getattr(self, name)) < 1:
                raise InputError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not self.link_gbps > 0 or self.link_latency_s < 0:
            raise InputError("link_gbps must be > 0 and link_latency_s >= 0")

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.lp

    def check_heads(self, arch, model: str, what: str = "tensor parallelism") -> None:
        """InputError unless tp divides the model's query and KV heads: each GPU holds whole heads
        (the latency split tp-way and the KV cache spread over tp GPUs assume it)."""
        if arch.n_heads % self.tp or arch.n_kv_heads % self.tp:
            raise InputError(f"{what} {self.tp} does not divide the attention heads of {model} "
                             f"({arch.n_heads} query heads, {arch.n_kv_heads} KV heads)")

    def wrap(self, latency: Latency, target: str, hidden: int, n_layers: int, act_bytes: int = 2) -> Latency:
        """`latency` with the target's forward split tp-way (two all-reduces of the activations per
        layer) and handed through pp stages; other models run on one GPU as they are."""
        if self.tp == 1 and self.pp == 1:
            return latency
        tp, pp, bw, hop = self.tp, self.pp, self.link_gbps * 1e9, self.link_latency_s

        def seconds(model, n_tokens, ctx, batch=1):
            out = latency(model, n_tokens, ctx, batch)
            if model != target:
                return out
            msg = np.asarray(n_tokens, float) * np.asarray(batch) * hidden * act_bytes
            if tp > 1:
                out = out / tp + 2 * n_layers * (2.0 * (tp - 1) / tp * msg / bw + hop)
            if pp > 1:
                out = out + (pp - 1) * (msg / bw + hop)
            return out
        return seconds

    def branch_tokens(self, verify_tokens) -> np.ndarray:
        """Query tokens of the verify forward on one of lp GPUs: its branches spread, the pending token on each."""
        tokens = np.asarray(verify_tokens)
        return tokens if self.lp == 1 else 1 + np.ceil((tokens - 1) / self.lp).astype(np.int64)

    @property
    def verify_transfer_s(self) -> float:
        """Only the final tokens travel between branch-parallel GPUs."""
        return self.link_latency_s if self.lp > 1 else 0.0

    @property
    def draft_transfer_s(self) -> float:
        """Drafts out to the target's GPU and verified tokens back, when the drafter has its own."""
        return 2 * self.link_latency_s if self.draft_on_own_gpu else 0.0


class StepCosts:
    """Prices the forwards of a StepModel on one replica (`costmodel.step` on its shape)."""

    def __init__(self, step: StepModel, latency: Latency, hidden: int, parallel: Parallelism | None = None,
                 n_layers: int = 1, act_bytes: int = 2):
        self.step, self.shape = step, step.shape
        self.parallel = parallel or Parallelism()
        if self.parallel.lp > 1 and (self.shape.max_drafted or np.all(np.asarray(self.shape.verify_tokens) <= 1)):
            raise InputError(f"branch parallelism (lp > 1) spreads the branches of a verify forward without "
                             f"draft forwards; {step.method}'s step has none to spread")
        self.latency = self.parallel.wrap(latency, step.target, int(hidden), int(n_layers), int(act_bytes))
        self._cache: dict[tuple, tuple[float, float]] = {}

    def forward(self, model: str, n_tokens, ctx, batch=1) -> np.ndarray:
        """Seconds of one forward of `model` on this replica (tensor / pipeline parallel included)."""
        return self.latency(model, n_tokens, ctx, batch)

    # ---- a step: the realised reach and verify tokens through costmodel.step ------------------------
    def cost(self, ctx, drafted, verify_tokens, batch=1, *, prompt_len=0, first=False) -> step_cost.StepCost:
        """Steps priced by `costmodel.step.step_cost` on this replica: draft forward i is paid where
        drafted > i, the verify forward at its realised tokens (branches spread over lp GPUs), the
        catch-up on the prompt where `first` (a request's first decode step), and the transfers
        between GPUs that parallelism adds."""
        drafted = np.asarray(drafted)
        reach = np.arange(self.shape.max_drafted) < drafted[..., None]
        first = np.asarray(first) & (drafted > 0)
        priced = step_cost.step_cost(self.latency, self.shape, ctx, batch, reach=reach,
                                     verify_tokens=self.parallel.branch_tokens(verify_tokens),
                                     prompt_len=prompt_len, first_share=first.astype(float))
        draft = priced.draft_s + np.where(drafted > 0, self.parallel.draft_transfer_s, 0.0)
        verify = priced.verify_s + self.parallel.verify_transfer_s
        draft, verify, overhead = np.broadcast_arrays(draft, verify, priced.overhead_s)
        return step_cost.StepCost(draft.astype(float), verify.astype(float), overhead.astype(float))

    def draft_forward_seconds(self, ctx: float, batch=1) -> np.ndarray:
        """(D,) seconds of each draft forward alone (the event-by-event engine's forwards): row i of
        an identity reach is forward i."""
        reach = np.eye(self.shape.max_drafted, dtype=bool)
        return step_cost.draft_seconds(self.latency, self.shape, float(ctx), batch, reach=reach).reshape(-1)

    def verify_seconds(self, ctx, verify_tokens, batch=1) -> np.ndarray:
        tokens = self.parallel.branch_tokens(verify_tokens)
        seconds = step_cost.verify_seconds(self.latency, self.shape, ctx, batch, verify_tokens=tokens)
        seconds = seconds + self.parallel.verify_transfer_s
        return np.reshape(seconds, np.broadcast(np.asarray(ctx), tokens).shape)

    # ---- memoised scalar pricing for the serving loop ------------------------------------------
    def step_seconds(self, ctx: float, drafted: int, verify_tokens: int, batch: int,
                     quantum: int = 16) -> tuple[float, float, float]:
        """(draft, verify, overhead) seconds of one batched step, contexts rounded to `quantum` tokens
        so that repeated shapes hit a cache instead of the latency model."""
        c = int(round(ctx / quantum)) * quantum
        key = (c, drafted, verify_tokens, batch)
        hit = self._cache.get(key)
        if hit is None:
            priced = self.cost(c, drafted, verify_tokens, batch)
            hit = tuple(float(part.reshape(-1)[0]) for part in (priced.draft_s, priced.verify_s, priced.overhead_s))
            self._cache[key] = hit
        return hit

    def prefill_seconds(self, prompt_len, batch=1) -> float:
        """Prompt forward of the target, plus the drafter's own when it keeps a cache and the engine
        calibration did not measure it in the first decode step instead (`catch_up_seconds`); for an
        engine whose prefills were fitted (a padded batch prefills each request alone), `batch` of
        them (`costmodel.step.prefill_seconds`)."""
        fitted = step_cost.prefill_seconds(self.shape, prompt_len)
        if fitted is not None:
            return float(np.sum(fitted)) * (batch if np.ndim(prompt_len) == 0 else 1)
        seconds = float(np.sum(self.forward(self.step.target, np.asarray(prompt_len), 0, batch)))
        if self.step.draft_kv_model and not self.catches_up:
            seconds += float(np.sum(self.forward(self.step.draft_kv_model, np.asarray(prompt_len), 0, batch)))
        return seconds

    @property
    def catches_up(self) -> bool:
        return bool(self.shape.first_draft_s or self.shape.first_draft_per_token_s)

    def catch_up_seconds(self, prompt_len) -> float:
        """What a request's first decode step pays beyond a later one (costmodel.step)."""
        return float(np.sum(step_cost.catch_up_seconds(self.shape, prompt_len)))
