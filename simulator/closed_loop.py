"""A closed loop of B requests in flight over a replayed request stream, served as vLLM's V1 scheduler
serves it, scheduled first and priced after.

Protocol: every request is waiting at time 0, in the stream's order; the engine keeps at most
`max_num_seqs` (B) of them running. Each step (vLLM's `Scheduler.schedule`) gives every running
request its tokens first (a decode or verification: 1 + its proposed tokens; a prompt still
prefilling: the rest of it, chunked to the step's token budget `max_batched_tokens`), then admits
waiting requests in order into free places while the budget and the KV cache allow, their prompts
chunked to what is left of the budget; one target forward runs every row. A request whose prompt is
complete samples its first token in that step; a decode row produces its replayed step's tokens. A
request leaves after its last step, and its place is taken in the next step. KV memory is counted in
blocks of `block_tokens`: a row holds its context, the step's query tokens and `lookahead` slots for
the next proposal (vLLM's `num_lookahead_tokens`); a waiting request is admitted only when its prompt
chunk fits, and when running rows outgrow the cache the most recently admitted one is preempted
(its cache dropped; it queues first and recomputes its prompt and output so far, as V1 does).

The loop keeps B requests in flight until the last one is admitted; the loaded phase up to then is
what its throughput measures (`LoopResult`), the drain after it (the longest requests alone at the
end) is reported apart. Nothing in a step's composition depends on how long a step takes (all requests wait from time 0), so
the loop is scheduled once (`schedule`) and priced after (`price`: by the engine's terms on a Profile's
latency, `engine_pricer` on `costmodel.step.ragged_step_cost`, or any other step-time model), each step
from sums over its rows. Between two changes of the
running set every row decodes one replayed step per engine step, so those stretches are gathered as
arrays (one row per request, one column per step) rather than stepped one by one. The drafter's
forwards (EAGLE) run in the step that sampled the tokens they extend: the first over each row's new
tokens (a decode row's accepted tokens, a prefill row's chunk), the k - 1 others over one token of
every row that sampled. Timed arrivals and replicas are `simulator.serving`'s.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from common.errors import InputError
from costmodel.latency import RowSums
from costmodel.step import RaggedSteps, RowsLatency, StepShape, ragged_step_cost
from traces.stream_steps import StreamSteps


@dataclass(frozen=True)
class EngineLimits:
    """The scheduler's limits: concurrency (`max_num_seqs`), tokens per step, KV blocks, the slots a
    row keeps for its next proposal, the CUDA-graph sizes a step's tokens are padded to (vLLM pads a
    step of at most the largest size up to the next one: the padding rows run the matmuls)."""

    max_num_seqs: int
    max_batched_tokens: int = 8192
    kv_capacity_tokens: int = 10 ** 9
    block_tokens: int = 16
    lookahead: int = 0
    graph_sizes: tuple[int, ...] = ()

    def __post_init__(self):
        for key in ("max_num_seqs", "max_batched_tokens", "block_tokens"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise InputError(f"{key} must be a whole number >= 1, got {value!r}")
        if self.kv_capacity_tokens < self.block_tokens:
            raise InputError(f"the KV cache holds {self.kv_capacity_tokens} tokens: not one block")


ROW_FIELDS = ("step", "width", "ctx", "logits", "new", "sampled", "produced")


@dataclass
class Schedule:
    """Every engine step of one closed loop, one entry per row of each step (`ROW_FIELDS`: the step,
    its query tokens, context, positions with logits, tokens its drafter's first forward runs, whether it
    sampled, the tokens it generated), and when each request got its first token and its last (steps)."""

    rows: dict[str, list[np.ndarray]] = field(default_factory=lambda: {f: [] for f in ROW_FIELDS})
    depth: int = 0                    # the drafter's forwards a step
    window: int = 0
    first_step: np.ndarray | None = None
    last_step: np.ndarray | None = None
    preemptions: int = 0
    peak_kv_tokens: int = 0           # the most KV tokens held at once (0: the cache could not fill, unchecked)
    steps: int = 0
    full_until: int = 0               # steps before the last request's admission ends the loaded phase
    _joined: dict = field(default_factory=dict, repr=False)

    def row_arrays(self) -> dict[str, np.ndarray]:
        """Every row of every step, as one array per field (joined once the loop is scheduled)."""
        if not self._joined:
            self._joined.update({f: np.concatenate([np.ravel(a) for a in self.rows[f]]) for f in ROW_FIELDS})
        return self._joined

    def produced(self) -> np.ndarray:
        """Tokens each step generates."""
        rows = self.row_arrays()
        return np.bincount(rows["step"], weights=rows["produced"], minlength=self.steps)

    def ragged(self) -> RaggedSteps:
        """Every step as one `costmodel.step.RaggedSteps`: its verify forward over every row, the
        drafter's first forward over each row's new tokens, the later ones over one token of each row
        that sampled."""
        r = self.row_arrays()
        group = dict(forward=r["step"], forwards=self.steps, sliding_window=self.window)
        verify = RowSums.of(r["width"], r["ctx"], logits=r["logits"], **group)
        sampled = r["sampled"].astype(float)
        drafts = ()
        if self.depth:
            first = RowSums.of(np.where(r["sampled"], r["new"], r["width"]), r["ctx"], logits=sampled, **group)
            later = RowSums.of(sampled, r["ctx"] + r["new"], logits=sampled, **group)
            drafts = (first,) + (later,) * (self.depth - 1)
        rows = np.bincount(r["step"], minlength=self.steps).astype(float)
        return RaggedSteps(verify, rows, np.asarray(verify.ctx_tokens, float), drafts)


class _Loop:
    """The scheduler's state while it schedules one closed loop (module docstring)."""

    def __init__(self, steps: StreamSteps, limits: EngineLimits, draft_forwards: int, window: int):
        self.s, self.limits, self.depth, self.window = steps, limits, draft_forwards, window
        n = steps.requests
        self.steps_of = steps.steps_of
        self.next = np.zeros(n, np.int64)        # index of each request's next step (0: its first token is not out)
        self.done_prompt = np.zeros(n, np.int64) # prefill tokens computed
        self.prefill_len = steps.prompt.copy()   # tokens its prefill computes (after a preemption: prompt and output)
        self.generated = np.zeros(n, np.int64)
        self.out = Schedule(depth=draft_forwards, window=window, first_step=np.full(n, -1), last_step=np.full(n, -1))
        self.waiting: deque[int] = deque(range(n))
        self.running: list[int] = []
        largest = np.sort(steps.prompt + steps.output + 2 * limits.lookahead + 2 + limits.block_tokens)[::-1]
        self.kv_binds = bool(largest[:limits.max_num_seqs].sum() > limits.kv_capacity_tokens)   # else never checked

    # ---- per-row state, vectorised over request ids ----------------------------------------------------
    def blocks(self, tokens) -> np.ndarray:
        b = self.limits.block_tokens
        return -(-np.asarray(tokens, np.int64) // b) * b

    def prefilling(self, rows: np.ndarray) -> np.ndarray:
        return self.done_prompt[rows] < self.prefill_len[rows]

    def widths(self, rows: np.ndarray) -> np.ndarray:
        """Query tokens each request runs in its next step: its prompt's rest, or 1 + its proposals."""
        s = self.s
        step = s.offsets[rows] + np.minimum(self.next[rows], self.steps_of[rows] - 1)
        return np.where(self.prefilling(rows), self.prefill_len[rows] - self.done_prompt[rows], 1 + s.drafted[step])

    def held(self, rows: np.ndarray, width: np.ndarray) -> np.ndarray:
        """KV tokens (whole blocks) each running request holds through its next step."""
        decode = self.s.prompt[rows] + self.generated[rows] - 1 + width + self.limits.lookahead
        return np.where(self.prefilling(rows), self.blocks(self.done_prompt[rows]), self.blocks(decode))

    # ---- one explicit step: prefill chunks and admissions ---------------------------------------------
    def mixed_step(self) -> None:
        s, budget = self.s, self.limits.max_batched_tokens
        running = np.array(self.running, np.int64)
        width = self.widths(running)
        used = int(self.held(running, width).sum()) if self.kv_binds else 0
        admitted = self._admit(budget - int(width.sum()), used)
        rows = np.concatenate([running, admitted])
        width = np.concatenate([width, self.widths(admitted)])
        take = np.clip(budget - (np.cumsum(width) - width), 0, width)       # the budget, in order
        rows, take = rows[take > 0], take[take > 0]
        if not rows.size:
            raise InputError("the scheduler made no progress: a step's token budget below one row's tokens")
        pre = self.prefilling(rows)
        complete = pre & (self.done_prompt[rows] + take == self.prefill_len[rows])
        size = np.where(pre, 0, s.size[s.offsets[rows] + np.minimum(self.next[rows], self.steps_of[rows] - 1)])
        ctx = np.where(pre, self.done_prompt[rows], s.prompt[rows] + self.generated[rows] - 1)
        step = self.out.steps
        first = complete & (self.next[rows] == 0)               # a resumed prefill samples nothing new
        produced = np.where(pre, np.where(first, s.size[s.offsets[rows]], 0), size)
        self._record(take[:, None], ctx[:, None], np.where(pre, 1, take)[:, None],
                     np.where(pre, take, size)[:, None], (~pre | complete)[:, None], produced[:, None])
        if admitted.size and not self.waiting:
            self.out.full_until = step + 1
        self.done_prompt[rows[pre]] += take[pre]
        first = rows[first]
        self.out.first_step[first] = step
        self.generated[first] = s.size[s.offsets[first]]
        self.next[first] = 1
        decode = rows[~pre]
        self.generated[decode] += size[~pre]
        self.next[decode] += 1
        self._finish(rows, step)

    def _admit(self, budget: int, used: int) -> np.ndarray:
        """Waiting requests admitted this step, in order, while places, the step's budget and the KV cache allow."""
        admitted, capacity = [], self.limits.kv_capacity_tokens
        while self.waiting and len(self.running) < self.limits.max_num_seqs and budget > 0:
            r = self.waiting[0]
            chunk = int(min(self.prefill_len[r] - self.done_prompt[r], budget))
            need = int(self.blocks(self.done_prompt[r] + chunk + self.limits.lookahead)) if self.kv_binds else 0
            if used + need > capacity:
                if not self.running:
                    raise InputError(f"request {r} does not fit the KV cache alone ({need} > {capacity} tokens)")
                break
            self.waiting.popleft()
            self.running.append(r)
            admitted.append(r)
            used, budget = used + need, budget - chunk
        self.out.peak_kv_tokens = max(self.out.peak_kv_tokens, used)
        return np.array(admitted, np.int64)

    def _finish(self, rows: np.ndarray, step: int) -> None:
        done = rows[(self.next[rows] >= self.steps_of[rows]) & ~self.prefilling(rows)]
        if done.size:
            self.out.last_step[done] = step
            gone = set(done.tolist())
            self.running = [r for r in self.running if r not in gone]

    # ---- a stretch of pure decode steps -----------------------------------------------------------
    def decode_stretch(self) -> None:
        s, rows = self.s, np.array(self.running)
        left = self.steps_of[rows] - self.next[rows]
        length = int(left.min())
        index = (s.offsets[rows] + self.next[rows])[:, None] + np.arange(length)[None, :]
        size, width = s.size[index], 1 + s.drafted[index]
        before = np.cumsum(size, axis=1) - size                       # tokens generated in the stretch before each step
        ctx = (s.prompt[rows] + self.generated[rows] - 1)[:, None] + before
        if self.kv_binds:
            held = self.blocks(ctx + width + self.limits.lookahead).sum(axis=0)
            over = np.nonzero(held > self.limits.kv_capacity_tokens)[0]
            if over.size:                                           # stop before the cache overflows, preempt
                length = int(over[0])
                if length == 0:
                    return self._preempt()
                size, width, ctx, held = size[:, :length], width[:, :length], ctx[:, :length], held[:length]
            self.out.peak_kv_tokens = max(self.out.peak_kv_tokens, int(held.max()))
        self._record(width, ctx, width, size, np.ones(width.shape, bool), size)
        self.next[rows] += length
        self.generated[rows] += size.sum(axis=1)
        self._finish(rows, self.out.steps - 1)

    def _preempt(self) -> None:
        r = self.running.pop()
        self.out.preemptions += 1
        self.done_prompt[r] = 0
        self.prefill_len[r] = self.s.prompt[r] + self.generated[r]   # recompute prompt and output so far
        self.waiting.appendleft(r)

    # ---- recording ----------------------------------------------------------------------------------
    def _record(self, width, ctx, logits, new_tokens, sampled, produced) -> None:
        """Steps over rows (axis 0) and steps (axis 1), kept row by row (`Schedule`)."""
        step = self.out.steps + np.broadcast_to(np.arange(width.shape[1]), width.shape)
        for name, value in zip(ROW_FIELDS, (step, width, ctx, logits, new_tokens, sampled, produced)):
            self.out.rows[name].append(value)
        self.out.steps += width.shape[1]

    def run(self) -> Schedule:
        while self.waiting or self.running:
            prefilling = self.prefilling(np.array(self.running, np.int64)).any()
            if prefilling or (self.waiting and len(self.running) < self.limits.max_num_seqs):
                self.mixed_step()
            else:
                self.decode_stretch()
        return self.out


def schedule(steps: StreamSteps, limits: EngineLimits, draft_forwards: int = 0, sliding_window: int = 0) -> Schedule:
    """The engine steps of serving `steps` in a closed loop under `limits` (module docstring);
    `draft_forwards`: the drafter's forwards per step (EAGLE's k, 0 for proposers without a model)."""
    return _Loop(steps, limits, int(draft_forwards), int(sliding_window)).run()


def padded(sums: RowSums, graph_sizes: tuple[int, ...]) -> RowSums:
    """`sums` with each step's tokens padded up to the next CUDA-graph size (steps past the largest
    run without a graph, unpadded)."""
    if not graph_sizes:
        return sums
    sizes = np.asarray(sorted(graph_sizes), float)
    tokens = np.asarray(sums.tokens, float)
    index = np.minimum(np.searchsorted(sizes, tokens), sizes.size - 1)
    up = np.where(tokens <= sizes[-1], sizes[index], tokens)
    return RowSums(up, sums.kv_tokens, sums.pairs, sums.ctx_tokens,
                   sums.tokens if sums.logit_tokens is None else sums.logit_tokens)


@dataclass(frozen=True)
class LoopResult:
    """A priced closed loop: per-step seconds, each request's first-token and finish times. Its
    throughput is the loaded phase's, while B requests are in flight and others still wait (from the
    first step to the last request's admission: the loop keeps B in flight only that long), and the
    whole run's beside it, whose drain (fewer than B left, the longest requests last) the loaded phase
    leaves out."""

    seconds: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    output: np.ndarray
    schedule: Schedule

    @property
    def makespan_s(self) -> float:
        return float(self.finish_s.max())

    @property
    def loaded_s(self) -> float:
        """Seconds of the loaded phase (the whole run where every request was admitted at once)."""
        until = self.schedule.full_until or self.seconds.size
        return float(self.seconds[:until].sum())

    @property
    def throughput_tok_s(self) -> float:
        """Tokens generated per second in the loaded phase."""
        until = self.schedule.full_until or self.seconds.size
        return float(self.schedule.produced()[:until].sum()) / self.loaded_s

    @property
    def run_throughput_tok_s(self) -> float:
        """Generated tokens per second over the whole run (first step to last finish, the drain included)."""
        return float(self.output.sum()) / self.makespan_s

    def tpot_s(self) -> np.ndarray:
        """Each request's time per output token after its first (requests of one token left out)."""
        many = self.output > 1
        return (self.finish_s[many] - self.first_token_s[many]) / (self.output[many] - 1)

    def loaded(self) -> np.ndarray:
        """Requests that finished in the loaded phase."""
        return self.finish_s <= self.loaded_s

    def sustained_rate(self) -> float:
        """Requests per second the loop completes in its loaded phase (0 when none finishes then)."""
        return float(self.loaded().sum()) / self.loaded_s


StepSeconds = Callable[[RaggedSteps], np.ndarray]


def engine_pricer(shape: StepShape, latency: RowsLatency, graph_sizes: tuple[int, ...] = ()) -> StepSeconds:
    """Seconds of ragged steps under `shape`'s terms (`costmodel.step.ragged_step_cost`), each step's
    tokens padded to the CUDA-graph sizes first (`padded`)."""
    def seconds(steps: RaggedSteps) -> np.ndarray:
        steps = RaggedSteps(padded(steps.verify, graph_sizes), steps.rows, steps.ctx_tokens, steps.drafts)
        return ragged_step_cost(latency, shape, steps).total
    return seconds


def price(plan: Schedule, steps: StreamSteps, step_seconds: StepSeconds) -> LoopResult:
    """Every step of `plan` priced by `step_seconds` and what that makes of each request's latency."""
    seconds = np.asarray(step_seconds(plan.ragged()), float)
    ends = np.cumsum(seconds)
    return LoopResult(seconds, ends[plan.first_step], ends[plan.last_step], steps.output, plan)
