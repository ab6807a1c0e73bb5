"""One step-cost model: the seconds of one decode step of any method, from a latency model and the
step's shape. Written once; the closed-form scorers, the simulator and the GPU campaign call it.

A step runs D sequential draft forwards, then one verify forward, then fixed per-step work:

    draft_s  = sum_i reach_i * (sum_parts scale_p * t(model_p, width_i, ctx + i, batch) + draft_per_forward_s)
               [+ catch_up_s = first_draft_s + first_draft_per_token_s * prompt_len in a generation's first step]
    verify_s = verify_scale * t(verify_model, verify_tokens, ctx, batch) + verify_fixed_s
               + verify_per_token_s * verify_tokens
               [verify_tokens >= verify_wide_from: the first term times verify_wide_factor, plus
                verify_wide_extra_s: a verify wide enough to run other kernels (a CPU's few-row
                projections end at 8 rows) relates to its isolated forward differently]
    step_s   = draft_s + verify_s + overhead_s        (`step_cost`: every consumer's one sum)
    overhead_s = fixed + overhead_per_row_s x batch + overhead_per_ctx_token_s x batch x ctx
               (the host's work per sequence in the batch: a serving engine's scheduling and
                bookkeeping, a host-side proposer scanning each sequence's context)

`StepShape` holds these for C configurations at once (arrays with a leading C axis). `reach_i` is
the probability that draft forward i runs (1 for a fixed chain; an early-exit drafter makes it
smaller); the simulator passes the realised 0/1 of each step instead, so both price a step through
the same function. `t` is any callable latency(model, n_tokens, ctx_len, batch) -> seconds over
numpy arrays (a Profile's fitted models, a fixed latency in tests, parallelism wrapped around one).

A method's shape states what its step runs; `StepCalibration` states what the engine pays on top
of the isolated forwards (calibrate.engine fits it from StepTraces): scales of the forward costs,
a fixed cost per draft forward (the engine's work around each: cache views, masks, sampling), a
fixed verify cost (masks, tree building around the forward) and costs per verified token (the
drafter sampling and building the nodes it proposes, logits at every verified position, cache edits),
a fixed cost of a step that drafts beyond plain decoding's (the acceptance test, residual sampling,
cache rollback), and what a generation's first step pays beyond the others (`catch_up_seconds`: the drafter's first
forward runs the whole prompt; the simulator pays it in that step, the closed form spreads it over
the generation's steps).
`StepCalibration.apply(shape)` folds it into the shape, so every consumer prices the same step, and
`step_cost` adds the terms up, so every consumer sums them the same way.

A continuous-batching engine runs rows of their own widths and contexts in one step (`RaggedSteps`:
the verify forward's rows, each draft forward's rows, as `costmodel.latency.RowSums`);
`ragged_step_cost` prices such steps with the same shape and terms, through a latency over rows
(`RowsLatency`: a Profile's roofline or linear model, `predict_rows`).

How an engine batches B rows is a property of the shape (`batching`, set from the Profile's engine
terms). "" (the default) prices the batch's forwards at `batch` and every other term once per step,
bar the host work per row (`overhead_per_row_s`, `overhead_per_ctx_token_s`: times the rows, however
they are batched).
"padded" (`runtime.engine.batch`: one target forward over every row padded to the widest tree, the
shorter rows masked past their own length, and a Python decide/commit per row) prices the verify
forward at the widest of B rows' trees (`padded_widths`: P(widest <= t) = F(t)^B, each row drawn
from the shape's `verify_dist` alone), pays the per-token terms on every padded token (B x width)
and adds per-row host work: `verify_per_row_s`, `draft_per_row_s` (proposing), `draft_per_row_forward_s`
(around each draft forward) and `overhead_per_row_s` (deciding and committing), each times B. The
context it is priced at is the caller's: a padded batch attends over its longest row. Such an engine
prefills each request alone when it joins: `prefill_seconds` prices that from the fitted
`prefill_per_request_s + prefill_per_token_s * L` (a prompt of L tokens:
the target's and a drafter's own prefill and the copy into the batch's caches).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

import numpy as np

from costmodel.latency import RowSums

Latency = Callable[[str, np.ndarray, np.ndarray, int], np.ndarray]
RowsLatency = Callable[[str, RowSums], np.ndarray]       # seconds of forwards of a model over ragged rows


@dataclass(frozen=True)
class DraftPart:
    """One model every draft forward runs, at `scale` of its fitted cost ((C,) or scalar)."""

    model: str
    scale: np.ndarray | float = 1.0


@dataclass(frozen=True)
class StepShape:
    """The forwards one step runs, for C configurations (see the module docstring).

    draft_width[c, i]: sequences (query tokens) draft forward i runs, 0 where it does not exist;
    draft_reach[c, i]: probability that it runs; verify_tokens[c]: query tokens per sequence of the
    verify forward (the pending token included), an expectation where the tree size varies;
    verify_dist: where it varies and the method knows how, (tokens[c, k], probability[c, k]) so the
    verify forward is priced as E[t(tokens)], not t(E[tokens]) (a latency that is not linear in
    tokens, such as a CPU's at a few tokens, makes the two differ).
    """

    verify_model: str
    verify_tokens: np.ndarray
    draft_parts: tuple[DraftPart, ...] = ()
    draft_width: np.ndarray = field(default_factory=lambda: np.zeros((1, 0)))
    draft_reach: np.ndarray | None = None
    verify_scale: np.ndarray | float = 1.0
    overhead_s: np.ndarray | float = 0.0    # fixed seconds per step ((C,) or scalar)
    draft_kv_model: str | None = None      # a drafter with its own KV cache (its prefill is paid too)
    draft_per_forward_s: float = 0.0       # extra seconds of every draft forward that runs
    verify_fixed_s: float = 0.0            # extra seconds around the verify forward
    verify_dist: tuple[np.ndarray, np.ndarray] | None = None   # (tokens (C, K), probability (C, K))
    verify_per_token_s: float = 0.0        # per verified token beyond the forward (logits, masks, sampling)
    first_draft_s: float = 0.0             # a generation's first step: its drafter catching up on the prompt,
    first_draft_per_token_s: float = 0.0   # fixed and per prompt token (`catch_up_seconds`)
    verify_wide_from: float = 0.0          # verifies of this many tokens or more (0: none) are priced
    verify_wide_factor: float = 1.0        # at this factor of the verify scale,
    verify_wide_extra_s: float = 0.0       # plus these seconds
    overhead_per_row_s: float = 0.0        # host work per sequence in the batch, every step
    overhead_per_ctx_token_s: float = 0.0  # and per token of its context (a host-side proposer's scan)
    batching: str = ""                     # "" or PADDED (module docstring): how rows share a batch's forwards
    verify_per_row_s: float = 0.0          # padded batches: host seconds per row around the verify forward,
    draft_per_row_s: float = 0.0           # proposing (every step, forwards or not),
    draft_per_row_forward_s: float = 0.0   # around each draft forward that runs
    prefill_per_request_s: float = 0.0     # a request prefilled alone (`prefill_seconds`; 0: not fitted)
    prefill_per_token_s: float = 0.0

    @property
    def size(self) -> int:
        return int(np.asarray(self.verify_tokens).reshape(-1).shape[0])

    @property
    def max_drafted(self) -> int:
        return int(self.draft_width.shape[-1])

    @property
    def models(self) -> list[str]:
        """Every model whose latency the step needs."""
        return sorted({self.verify_model} | {p.model for p in self.draft_parts})

    @property
    def drafted(self) -> np.ndarray:
        """(C,) expected draft forwards per step."""
        return self.reach.sum(axis=-1)

    @property
    def reach(self) -> np.ndarray:
        ran = (self.draft_width > 0).astype(float)
        return ran if self.draft_reach is None else ran * self.draft_reach

    def row_overhead(self, rows, ctx_tokens) -> np.ndarray | float:
        """Seconds of per-sequence host work of a step over `rows` sequences of `ctx_tokens` context
        in all (0 where the shape has none)."""
        if not (self.overhead_per_row_s or self.overhead_per_ctx_token_s):
            return 0.0
        return (self.overhead_per_row_s * np.asarray(rows, float)
                + self.overhead_per_ctx_token_s * np.asarray(ctx_tokens, float))

    def rows(self, batch) -> float:
        """How many times a batch of `batch` rows pays the per-row and per-token terms: `batch` where
        rows are padded, else 1 (those terms are a step's)."""
        return float(batch) if self.batching == PADDED else 1.0


def wide_terms(priced: "StepShape | StepCalibration", tokens) -> tuple[np.ndarray | float, np.ndarray | float]:
    """(factor on the verify forward's scale, extra seconds) of a shape's or a calibration's verify
    at `tokens` verified tokens: (1, 0) below `verify_wide_from` or where it is 0 (no wide line)."""
    if priced.verify_wide_from <= 0:
        return 1.0, 0.0
    wide = np.asarray(tokens, float) >= priced.verify_wide_from
    return np.where(wide, priced.verify_wide_factor, 1.0), np.where(wide, priced.verify_wide_extra_s, 0.0)


@dataclass(frozen=True)
class StepCalibration:
    """What the engine pays beyond the isolated forwards a shape names (module docstring); the
    identity by default (a Profile without engine calibration, the papers' profiles)."""

    verify_scale: float = 1.0
    verify_fixed_s: float = 0.0
    verify_per_token_s: float = 0.0     # beyond the isolated forward's growth (logits at every position)
    draft_scale: float = 1.0
    draft_per_forward_s: float = 0.0    # around each draft forward (cache views, masks, sampling)
    draft_per_token_s: float = 0.0      # per verified token a drafter proposed (a drafting step's nodes)
    first_draft_s: float = 0.0          # a generation's first step: the drafter catching up on the prompt
    first_draft_per_token_s: float = 0.0
    overhead_s: float = 0.0
    overhead_per_token_s: float = 0.0
    speculation_s: float = 0.0          # a drafting step's own work beside plain decoding's (acceptance, rollback)
    verify_wide_from: float = 0.0       # verifies this wide or wider (0: none) cost verify_wide_factor
    verify_wide_factor: float = 1.0     # times the scaled forward, plus verify_wide_extra_s
    verify_wide_extra_s: float = 0.0
    overhead_per_row_s: float = 0.0     # host work per sequence in the batch, every step (a serving engine's)
    overhead_per_ctx_token_s: float = 0.0   # per token of each sequence's context (a host-side proposer's scan)
    verify_per_row_s: float = 0.0       # a padded batch's host work per row (StepShape): around the verify,
    draft_per_row_s: float = 0.0        # proposing, around each draft forward
    draft_per_row_forward_s: float = 0.0
    prefill_per_request_s: float = 0.0  # a request prefilled alone as it joins a padded batch
    prefill_per_token_s: float = 0.0

    # ratios to an isolated forward's cost: > 0; the rest are seconds the fit adds or takes away
    # (a fit may make one < 0)
    SCALES = ("verify_scale", "draft_scale", "verify_wide_factor")
    ROW_TERMS = ("verify_per_row_s", "draft_per_row_s", "draft_per_row_forward_s", "overhead_per_row_s",
                 "overhead_per_ctx_token_s")
    PREFILL_TERMS = ("prefill_per_request_s", "prefill_per_token_s")

    @classmethod
    def from_dict(cls, raw: dict | None, where: str = "engine calibration") -> "StepCalibration":
        """Checked where it is read: an object of known keys, finite numbers, scales > 0; a one-line
        ValueError naming `where` and the key otherwise."""
        if raw is None:
            return cls()
        if not isinstance(raw, dict):
            raise ValueError(f"{where} must be an object of numbers, got {type(raw).__name__}")
        keys = cls.__dataclass_fields__
        for key, value in raw.items():
            if key not in keys:
                raise ValueError(f"{where} has unknown key '{key}' (known: {', '.join(keys)})")
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
                raise ValueError(f"{where}.{key} must be a finite number, got {value!r}")
            if key in cls.SCALES and value <= 0:
                raise ValueError(f"{where}.{key} is {value!r}; a scale of a forward's cost must be > 0")
        return cls(**{k: float(v) for k, v in raw.items()})

    def to_dict(self) -> dict[str, float]:
        """Every term; the per-row and prefill terms (added for padded batches) only where fitted, so a
        Profile fitted before them reads and writes back unchanged."""
        return {k: float(getattr(self, k)) for k in self.__dataclass_fields__
                if k not in (*self.ROW_TERMS, *self.PREFILL_TERMS) or getattr(self, k)}

    def apply(self, shape: StepShape) -> StepShape:
        """`shape` priced as the engine runs it."""
        if self == StepCalibration():
            return shape
        parts = tuple(DraftPart(p.model, np.asarray(p.scale, float) * self.draft_scale) for p in shape.draft_parts)
        drafts = 1.0 if parts else 0.0       # every step of a drafting method drafts before it verifies
        per_token = self.verify_per_token_s + self.overhead_per_token_s + drafts * self.draft_per_token_s
        return replace(shape, draft_parts=parts,
                       verify_scale=np.asarray(shape.verify_scale, float) * self.verify_scale,
                       overhead_s=shape.overhead_s + self.overhead_s + drafts * self.speculation_s,  # per-token
                       # parts go with each step's tokens
                       verify_per_token_s=shape.verify_per_token_s + per_token,
                       draft_per_forward_s=shape.draft_per_forward_s + drafts * self.draft_per_forward_s,
                       first_draft_s=shape.first_draft_s + drafts * self.first_draft_s,
                       first_draft_per_token_s=shape.first_draft_per_token_s + drafts * self.first_draft_per_token_s,
                       verify_fixed_s=shape.verify_fixed_s + self.verify_fixed_s,
                       verify_wide_from=self.verify_wide_from or shape.verify_wide_from,
                       verify_wide_factor=shape.verify_wide_factor * self.verify_wide_factor,
                       verify_wide_extra_s=shape.verify_wide_extra_s + self.verify_wide_extra_s,
                       **{k: getattr(shape, k) + getattr(self, k) for k in (*self.ROW_TERMS, *self.PREFILL_TERMS)})


PADDED = "padded"           # StepShape.batching of an engine that pads every row to the widest tree
BATCHINGS = (PADDED,)


def padded_widths(tokens, prob, batch: int) -> tuple[np.ndarray, np.ndarray]:
    """(tokens (C, K) ascending, probability (C, K)) of the widest of `batch` rows whose query tokens
    are each drawn alone from (tokens, prob): P(widest <= t) = F(t)^batch."""
    tokens, prob = np.asarray(tokens, float), np.asarray(prob, float)
    order = np.argsort(tokens, axis=-1, kind="stable")
    tokens, prob = np.take_along_axis(tokens, order, -1), np.take_along_axis(prob, order, -1)
    cdf = np.cumsum(prob, axis=-1) / np.maximum(prob.sum(axis=-1, keepdims=True), 1e-300)
    widest = np.clip(cdf, 0.0, 1.0) ** int(batch)
    return tokens, np.diff(widest, axis=-1, prepend=0.0)


def chain_width(gamma: Sequence[int] | np.ndarray, depth: int | None = None) -> np.ndarray:
    """(C, depth) widths of chains of `gamma` single-token draft forwards."""
    gamma = np.atleast_1d(np.asarray(gamma, dtype=np.int64))
    depth = int(gamma.max()) if depth is None else int(depth)
    return (np.arange(depth)[None, :] < gamma[:, None]).astype(np.int64)


def draft_seconds(latency: Latency, shape: StepShape, ctx, batch: int = 1, reach=None) -> np.ndarray:
    """Draft seconds per step. `ctx` (C,) or scalar: context at the step's start; `reach` overrides
    the shape's reach (the simulator's realised 0/1 per forward, shape (..., D))."""
    width = shape.draft_width
    depth = width.shape[-1]
    ctx = np.asarray(ctx, dtype=float)
    if depth == 0:
        return np.zeros(np.broadcast(ctx, np.asarray(shape.verify_tokens)).shape)
    reach = shape.reach if reach is None else np.asarray(reach, float) * (width > 0)
    ctx_i = ctx[..., None] + np.arange(depth)
    per_forward = shape.draft_per_forward_s + shape.draft_per_row_forward_s * shape.rows(batch)
    for part in shape.draft_parts:
        scale = np.asarray(part.scale, dtype=float)
        scale = scale[..., None] if scale.ndim else scale
        per_forward = per_forward + scale * latency(part.model, np.maximum(width, 1), ctx_i, batch)
    return np.sum(reach * per_forward, axis=-1)


def verify_seconds(latency: Latency, shape: StepShape, ctx, batch: int = 1, verify_tokens=None) -> np.ndarray:
    """Seconds of the verify forward: over the shape's token distribution where it has one, at its
    expected query tokens otherwise (`verify_tokens` overrides both: a realised step)."""
    ctx = np.asarray(ctx, float)
    rows = shape.rows(batch)      # a padded batch pays its per-token work on every row's padded tokens
    per_row = shape.verify_per_row_s * rows
    if verify_tokens is None and shape.verify_dist is not None:
        tokens, prob = (np.asarray(a, float) for a in shape.verify_dist)
        if shape.batching == PADDED and batch > 1:            # the forward runs at the widest row's tree
            tokens, prob = padded_widths(tokens, prob, batch)
        mean = np.sum(prob * np.maximum(tokens, 1.0), axis=-1)
        if ctx.ndim == 0 and np.all(tokens == tokens[:1]):      # one token grid: price it once
            tokens = tokens[:1]
        each = latency(shape.verify_model, np.maximum(tokens, 1.0), ctx[..., None], batch)
        factor, extra = wide_terms(shape, np.maximum(tokens, 1.0))
        seconds, extra = np.sum(prob * each * factor, axis=-1), np.sum(prob * extra, axis=-1)
        return (np.asarray(shape.verify_scale, float) * seconds + shape.verify_fixed_s + extra
                + shape.verify_per_token_s * mean * rows + per_row)
    tokens = shape.verify_tokens if verify_tokens is None else verify_tokens
    tokens = np.maximum(np.asarray(tokens, dtype=float), 1.0)
    factor, extra = wide_terms(shape, tokens)
    seconds = latency(shape.verify_model, tokens, ctx, batch) * factor
    return (np.asarray(shape.verify_scale, float) * seconds + shape.verify_fixed_s + extra
            + shape.verify_per_token_s * tokens * rows + per_row)


def prefill_seconds(shape: StepShape, prompt_len) -> np.ndarray | None:
    """Seconds of prefilling requests of `prompt_len` tokens each alone, as a padded engine does when
    they join (the fitted prefill terms); None where none was fitted (price the target's forward)."""
    if not (shape.prefill_per_request_s or shape.prefill_per_token_s):
        return None
    length = np.asarray(prompt_len, dtype=float)
    return shape.prefill_per_request_s + shape.prefill_per_token_s * length


def catch_up_seconds(shape: StepShape, prompt_len) -> np.ndarray:
    """Seconds a generation's first step pays beyond a later one: its drafter's first forward
    catches up on every prompt token."""
    return shape.first_draft_s + shape.first_draft_per_token_s * np.asarray(prompt_len, dtype=float)


@dataclass(frozen=True)
class StepCost:
    """The seconds of steps, term by term (arrays of one shape)."""

    draft_s: np.ndarray
    verify_s: np.ndarray
    overhead_s: np.ndarray

    @property
    def total(self) -> np.ndarray:
        return self.draft_s + self.verify_s + self.overhead_s


def step_cost(latency: Latency, shape: StepShape, ctx, batch: int = 1, *, reach=None, verify_tokens=None,
              prompt_len=0, first_share=0.0) -> StepCost:
    """What steps cost, the one sum every consumer prices a step with: the closed form (expected reach
    and tokens, a generation's first-step catch-up spread over its steps by `first_share` = the share
    of steps that are a first step), the simulator and the campaigns (a step's realised `reach` and
    `verify_tokens`, `first_share` 1 on a generation's first step, 0 elsewhere)."""
    draft = draft_seconds(latency, shape, ctx, batch, reach=reach) + shape.draft_per_row_s * shape.rows(batch)
    share = np.asarray(first_share, dtype=float)
    if np.any(share):
        draft = draft + share * catch_up_seconds(shape, prompt_len)
    verify = verify_seconds(latency, shape, ctx, batch, verify_tokens=verify_tokens)
    fixed = np.asarray(shape.overhead_s, dtype=float) + shape.row_overhead(batch, np.multiply(batch, ctx))
    overhead = np.broadcast_to(fixed, np.broadcast(draft, verify).shape)
    return StepCost(np.asarray(draft, dtype=float), np.asarray(verify, dtype=float), overhead)


@dataclass(frozen=True)
class RaggedSteps:
    """N continuous-batching steps over rows of their own widths and contexts, by sums (one value per
    step): the verify forward's rows (decodes, verifications, prefill chunks), the rows of each draft
    forward (the first over the tokens each row accepted last step and any prefill chunk, as EAGLE's
    drafter runs it; later ones over one token a row), the sequences in the step and their contexts."""

    verify: RowSums
    rows: np.ndarray
    ctx_tokens: np.ndarray
    drafts: tuple[RowSums, ...] = ()


def ragged_step_cost(latency: RowsLatency, shape: StepShape, steps: RaggedSteps) -> StepCost:
    """What ragged steps cost (`RaggedSteps`), the shape's terms summed as `step_cost` sums them: each
    draft forward where it has rows, the verify forward over every row, the fixed and per-row work.
    `shape` is one configuration's, engine calibration folded in (`StepCalibration.apply`)."""
    if shape.verify_wide_from > 0:
        raise ValueError("a wide-verify line prices a CPU's uniform verify batches; ragged steps cannot take it")
    if len(steps.drafts) > shape.max_drafted:
        raise ValueError(f"{len(steps.drafts)} draft forwards for a shape of {shape.max_drafted}")
    rows = np.asarray(steps.rows, float)
    draft = np.zeros(rows.shape)
    for sums in steps.drafts:
        runs = np.asarray(sums.tokens, float) > 0
        seconds = sum(np.asarray(p.scale, float).reshape(-1)[0] * latency(p.model, sums) for p in shape.draft_parts)
        draft = draft + np.where(runs, seconds + shape.draft_per_forward_s, 0.0)
    scale = np.asarray(shape.verify_scale, float).reshape(-1)[0]
    verify = (scale * latency(shape.verify_model, steps.verify) + shape.verify_fixed_s
              + shape.verify_per_token_s * np.asarray(steps.verify.tokens, float))
    fixed = np.asarray(shape.overhead_s, float).reshape(-1)[0] + shape.row_overhead(rows, steps.ctx_tokens)
    return StepCost(draft, np.asarray(verify, float), np.broadcast_to(fixed, rows.shape).astype(float))


def step_seconds(latency: Latency, shape: StepShape, ctx, batch: int = 1) -> np.ndarray:
    """Expected seconds of one steady-state step of each configuration (`step_cost(...).total`)."""
    return step_cost(latency, shape, ctx, batch).total
