"""Seconds per step: the Profile's fitted latency models applied to a StepModel's forwards.

`StepCosts` holds one predictor per model (`.predict(n_tokens, ctx_len, batch)`, from
`Profile.latency_model`, or given directly for fixed-latency checks) and prices draft, verify
and prefill forwards for arrays of steps at once. Parallelism (tensor parallel, lookahead
parallel, a draft model on its own GPU) changes which forward runs where and adds the transfer
between GPUs; the compute itself always comes from the fitted model.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from simulator.methods import StepModel
from common.errors import InputError


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


@dataclass
class Parallelism:
    """How one replica spreads a forward: tp-way tensor parallel, pp pipeline stages, lp-way
    lookahead parallel, and the draft model on the target's GPU or on its own."""

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


class StepCosts:
    """Prices the forwards of a StepModel on one replica."""

    def __init__(self, step: StepModel, predictors: Mapping[str, Any], hidden: int,
                 parallel: Parallelism | None = None, n_layers: int = 1, act_bytes: int = 2):
        self.step = step
        self.parallel = parallel or Parallelism()
        missing = [m for m in step.models if m not in predictors]
        if missing:
            raise InputError(f"no latency model for '{missing[0]}', which method {step.method} needs")
        self.raw = dict(predictors)
        self.fn = {m: _vectorised(p) for m, p in predictors.items()}
        self.hidden, self.n_layers, self.act_bytes = int(hidden), int(n_layers), int(act_bytes)
        self._cache: dict[tuple, tuple[float, float]] = {}
        if self.parallel.lp > 1 and step.method != "lookahead":
            raise InputError("lookahead parallelism (lp > 1) applies only to method lookahead")

    # ---- one forward ----------------------------------------------------------------------
    def forward(self, model: str, n_tokens, ctx, batch) -> np.ndarray:
        """Seconds of one forward of `model` on this replica (tensor parallel included)."""
        par = self.parallel
        seconds = self.fn[model](n_tokens, ctx, batch)
        if model == self.step.target and par.tp > 1:
            # compute splits tp-way; two all-reduces of the activations per layer
            msg = np.asarray(n_tokens) * np.asarray(batch) * self.hidden * self.act_bytes
            ring = 2.0 * (par.tp - 1) / par.tp * msg / (par.link_gbps * 1e9) + par.link_latency_s
            seconds = seconds / par.tp + 2 * self.n_layers * ring
        if model == self.step.target and par.pp > 1:
            msg = np.asarray(n_tokens) * np.asarray(batch) * self.hidden * self.act_bytes
            seconds = seconds + (par.pp - 1) * (msg / (par.link_gbps * 1e9) + par.link_latency_s)
        return seconds

    # ---- a step -----------------------------------------------------------------------------
    def draft_seconds(self, ctx, drafted, batch=1) -> np.ndarray:
        """Sequential draft forwards: forward i is paid where drafted > i."""
        ctx = np.asarray(ctx)
        drafted = np.asarray(drafted)
        total = np.zeros(np.broadcast(ctx, drafted).shape)
        for i, parts in enumerate(self.step.draft_parts):
            cost = sum(scale * self.forward(m, n, ctx + i, batch) for m, n, scale in parts)
            total = total + np.where(drafted > i, cost, 0.0)
        if self.parallel.draft_on_own_gpu and self.step.draft_parts:
            total = total + 2 * self.parallel.link_latency_s  # drafts out, verified tokens back
        return total

    def verify_seconds(self, ctx, verify_tokens, batch=1) -> np.ndarray:
        tokens = np.asarray(verify_tokens)
        lp = self.parallel.lp
        if lp > 1:
            # branches spread over lp GPUs; only the final tokens travel
            tokens = 1 + np.ceil((tokens - 1) / lp).astype(np.int64)
        seconds = self.step.verify_scale * self.forward(self.step.verify_model, tokens, ctx, batch)
        if lp > 1:
            seconds = seconds + self.parallel.link_latency_s
        return seconds

    # ---- memoised scalar pricing for the serving loop ------------------------------------------
    def step_seconds(self, ctx: float, drafted: int, verify_tokens: int, batch: int, quantum: int = 16) -> tuple[float, float]:
        """(draft, verify) seconds of one batched step, contexts rounded to `quantum` tokens so
        that repeated shapes hit a cache instead of the latency model."""
        c = int(round(ctx / quantum)) * quantum
        key = (c, drafted, verify_tokens, batch)
        hit = self._cache.get(key)
        if hit is None:
            hit = (float(self.draft_seconds(c, drafted, batch)), float(self.verify_seconds(c, verify_tokens, batch)))
            self._cache[key] = hit
        return hit

    def prefill_seconds(self, prompt_len, batch=1) -> float:
        """Prompt forward of the target, plus the drafter's own when it keeps a cache."""
        seconds = float(np.sum(self.forward(self.step.target, np.asarray(prompt_len), 0, batch)))
        if self.step.draft_kv_model:
            seconds += float(np.sum(self.fn[self.step.draft_kv_model](np.asarray(prompt_len), 0, batch)))
        return seconds


def predictors_for(profile, step: StepModel, latencies: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The latency model of every model the step runs: given ones first, else the Profile's."""
    given = dict(latencies or {})
    out = {}
    for model in step.models:
        out[model] = given[model] if model in given else profile.latency_model(model)
    return out
