"""Continuous batching: up to B requests decoded at once, each row at its own length, one target
forward per step.

Deployed engines (vLLM, SGLang) serve batches, and speculation's value falls with the batch: a wider
verify costs more once the batch fills the hardware. This engine measures that on real forwards.

A row is one request's own decoder (the method's `Decoder`, as it decodes alone: its tokens, random
source, drafter state and rules) whose caches are rows of the batch's caches
(`runtime.ragged.BatchKVCache`, one for the target and one for the drafter). A step:
  1. draft: every row's `propose()` runs; the drafter forwards they ask for (`Feed`s) are gathered
     round by round, each round one forward over every row (sd's chain: one per draft, MCSD's tree:
     one per level; prompt lookup and plain decoding propose on the host, without a forward);
  2. verify: ONE target forward over every row's pending token and tree, padded to the widest tree;
     each row sees its own prefix and its tree's ancestors, at its own positions;
  3. each row decides by the rules it uses alone (`Decoder.decide`); the target cache keeps every
     row's accepted path at once (`BatchKVCache.keep`), then each row takes its tokens and rolls its
     drafter back (`Decoder.accept`).
Requests join and leave at step boundaries: `add` queues one; a step first admits queued requests
into free rows, each prefilled alone (its target and drafter caches, its own forwards, timed as the
step's `prefill_s`) and copied into its row; a row leaves once it has its tokens (`finished`).
A row's greedy output is its batch-1 output token for token, and its sampled output has the
target's law: the rows share forwards, never decisions or random draws.

Batched methods: the decoders marked `batchable` (ar, sd, prompt_lookup, mcsd, cape, glide). Of the
feature drafters GLIDE batches naturally: its state is a `DrafterState` like a draft model's (a chain
or CAPE's sets over its own KV cache), so its forwards are the same feeds, its cross-attention only
kept to each row's own target entries; CORAL overrides verify and commit to carry the target's
hidden features per row, which the shared verify does not return.
Eager mode only (`runtime.ragged`); time regions as `StepTimer` (draft, verify, prefill; overhead
is the rest of the step).
"""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Sequence

import psutil
import torch

import methods
from common.errors import InputError
from common.seeds import derive_seed
from runtime.engine import make_decoder
from runtime.engine.base import Decoder, Feed, Proposal, StepTimer, accept_mask, run_alone
from runtime.engine.tree import ancestor_mask, depths
from runtime.engine.verify import Sampling
from runtime.llama import Llama
from runtime.ragged import BatchKVCache, RowInput

DEFAULT_CONTEXT = 4096     # tokens a row may hold (prompt + new), unless the engine is given another
FIRST_CAPACITY = 256       # entries the batch caches start with; they double as rows grow


def batched_methods() -> list[str]:
    """The methods `BatchEngine` decodes (their decoders are `batchable`)."""
    return [s.name for s in methods.specs() if s.decoder_class().batchable]


@dataclass
class Request:
    request_id: Any
    prompt: list[int]
    max_new_tokens: int
    seed: int


@dataclass
class Row:
    request: Request
    decoder: Decoder          # the request's own decoder; its caches are rows of the batch's

    @property
    def output(self) -> list[int]:
        return self.decoder.tokens[len(self.request.prompt):]


@dataclass
class RowStep:
    """One row's part of a step (a BatchStepTrace row, `traces.schema`)."""

    request_id: Any
    ctx_len: int              # committed tokens (prompt + generated) before the step
    draft_forwards: int
    verify_tokens: int        # the row's tree size: pending token + drafts
    accepted: int             # tokens the step added to the row's output (cut at its end, like alone)
    accept_mask: list[bool]
    confidences: list[float]
    joined: bool              # the request was admitted (prefilled) at this step


@dataclass
class Finished:
    request_id: Any
    prompt_len: int
    tokens: list[int]         # generated tokens only


@dataclass
class BatchStepRecord:
    step: int
    rows: list[RowStep]
    draft_s: float
    verify_s: float
    overhead_s: float
    prefill_s: float          # the prefills of the requests that joined at this step
    finished: list[Finished]

    @property
    def width(self) -> int:
        """Query tokens per row of the verify forward: the widest tree."""
        return max(r.verify_tokens for r in self.rows)


@dataclass
class BatchGeneration:
    tokens: list[list[int]]   # per prompt, its generated tokens
    steps: list[BatchStepRecord]
    seconds: float


def memory_available(device: torch.device) -> int:
    """Bytes free for a KV cache: the GPU's free memory, or what the system can still give."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    return int(psutil.virtual_memory().available)


def kv_bytes_per_token(module) -> int:
    """Bytes one token takes in `module`'s KV cache (every layer's key and value)."""
    cache = module.new_cache(capacity=1)
    return sum(t.numel() * t.element_size() for t in (*cache.keys, *cache.values))


def check_cache_budget(batch: int, context: int, modules, budget: int | None = None) -> int:
    """The bytes the batch's KV caches take at `batch` rows of `context` tokens in every module of
    `modules` (the target, the drafter); InputError in one line past `budget` (default: the memory
    available)."""
    needed = batch * context * sum(kv_bytes_per_token(m) for m in modules)
    budget = memory_available(next(iter(modules)).device) if budget is None else budget
    if needed > budget:
        raise InputError(f"batch {batch} at a context of {context} tokens needs {needed / 2**20:,.1f} MiB of "
                         f"KV cache, over the cache budget of {budget / 2**20:,.1f} MiB")
    return needed


class BatchEngine:
    """Decodes up to `batch` requests of one method at once, requests joining and leaving between steps.

    `method`, `target`, `drafter`, `sampling`, `seed` and `**config` are `make_decoder`'s (each row
    gets its own decoder; its seed is `add`'s, by default derived from `seed` and the request id).
    `context`: the most tokens a row holds (prompt + new; a step's tree may pass it while verified);
    `cache_budget`: bytes the batch's KV caches may take at `batch` rows of `context` tokens
    (default: the memory available); `eos_token_id` ends a request early.
    """

    def __init__(self, method: str, target: Llama, drafter: Any = None, *, batch: int,
                 sampling: Sampling | None = None, seed: int = 0, context: int = DEFAULT_CONTEXT,
                 cache_budget: int | None = None, eos_token_id: int | None = None, **config: Any):
        for name, value in (("batch", batch), ("context", context)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"{name} must be an integer >= 1, got {value!r}")
        if config.get("mode", "eager") != "eager":
            raise InputError(f"the batch engine runs in eager mode only (runtime.ragged), got mode {config['mode']!r}")
        self.template = make_decoder(method, target, drafter, sampling=sampling, seed=seed, **config)
        if not self.template.batchable:
            raise InputError(f"batched decoding takes {', '.join(batched_methods())}; got '{method}'")
        self.method, self.target, self.sampling, self.seed, self.config = method, target, sampling, seed, config
        self.batch, self.context, self.eos = batch, context, eos_token_id
        modules = [target] + ([self.template.drafter] if self.template.drafter is not None else [])
        check_cache_budget(batch, context, modules, cache_budget)
        self.target_cache = BatchKVCache(target.config, batch, FIRST_CAPACITY, target.dtype, target.device)
        self.draft_cache: BatchKVCache | None = None      # shaped like the first row's drafter cache
        self.queue: deque[Request] = deque()
        self.rows: list[Row] = []                         # in the caches' row order
        self.steps = 0

    @property
    def idle(self) -> bool:
        return not self.queue and not self.rows

    def add(self, request_id: Any, prompt_ids: Sequence[int], max_new_tokens: int, seed: int | None = None) -> None:
        """Queue a request; it joins at the next step with a free row."""
        prompt = [int(t) for t in prompt_ids]
        if not prompt:
            raise InputError(f"request {request_id!r}: the prompt is empty")
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise InputError(f"request {request_id!r}: max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")
        if len(prompt) + max_new_tokens > self.context:
            raise InputError(f"request {request_id!r}: a prompt of {len(prompt)} tokens and {max_new_tokens} new "
                             f"tokens exceed the context of {self.context} tokens")
        if any(r.request_id == request_id for r in (*self.queue, *(row.request for row in self.rows))):
            raise InputError(f"request id {request_id!r} is already queued or decoding")
        seed = derive_seed(self.seed, request_id) if seed is None else seed
        self.queue.append(Request(request_id, prompt, max_new_tokens, seed))

    # -- one step ----------------------------------------------------------------------------------
    def step(self) -> BatchStepRecord:
        """Admit queued requests, then one speculation step of every row; requests done leave."""
        if self.idle:
            raise InputError("no request to decode: add one first")
        timer = StepTimer(self.target.device)
        begin = time.perf_counter()
        joined = []
        if self.queue and len(self.rows) < self.batch:
            with timer.region("prefill"):
                joined = self._admit()
        with timer.region("draft"):
            proposals = self._propose()
        with timer.region("verify"):
            logits, roots = self._verify(proposals)
        verdicts = [row.decoder.decide(p.tree, logits[i, : p.tree.size], p)
                    for i, (row, p) in enumerate(zip(self.rows, proposals))]
        self.target_cache.keep([root + 1 for root in roots],
                               [[root + node for node in v.path] for root, v in zip(roots, verdicts)])
        records = []
        for row, proposal, verdict in zip(self.rows, proposals, verdicts):
            ctx_len = len(row.decoder.tokens)
            row.decoder.accept(proposal, verdict)
            records.append(RowStep(row.request.request_id, ctx_len, proposal.draft_forwards, proposal.tree.size,
                                   len(verdict.tokens), accept_mask(proposal, verdict),
                                   [float(c) for c in proposal.confidences], row.request.request_id in joined))
        finished = self._finish(records)
        seconds = {name: timer.totals.get(name, 0.0) for name in ("prefill", "draft", "verify")}
        overhead = max(time.perf_counter() - begin - sum(seconds.values()), 0.0)
        self.steps += 1
        return BatchStepRecord(self.steps - 1, records, seconds["draft"], seconds["verify"], overhead,
                               seconds["prefill"], finished)

    def preempt(self, request_id: Any) -> list[int]:
        """Take a request out (vLLM's preemption by recompute): its row, or its place in the queue, is
        freed and the tokens it generated so far are returned; `add` it again with its prompt and those
        tokens to resume it (greedy, it continues as it would have)."""
        for i, row in enumerate(self.rows):
            if row.request.request_id == request_id:
                generated = list(row.output)
                self._remove(i)
                return generated
        for request in self.queue:
            if request.request_id == request_id:
                self.queue.remove(request)
                return []
        raise InputError(f"request id {request_id!r} is neither queued nor decoding")

    def cache_bytes(self) -> int:
        """Bytes the batch's KV caches hold allocated now (every row at the caches' capacity: padded)."""
        caches = [c for c in (self.target_cache, self.draft_cache) if c is not None]
        return sum(t.numel() * t.element_size() for c in caches for t in (*c.keys, *c.values))

    def _admit(self) -> list[Any]:
        """Queued requests into free rows: each prefilled alone, then copied into its row."""
        joined = []
        while self.queue and len(self.rows) < self.batch:
            request = self.queue.popleft()
            decoder = make_decoder(self.method, self.target, self.template.drafter, sampling=self.sampling,
                                   seed=request.seed, **self.config)
            decoder.start(request.prompt)
            draft = decoder.draft
            if draft is not None and len(request.prompt) > 1:   # the drafter's prefill: all but the pending token
                run_alone(draft.catch_up(request.prompt[:-1]))
            decoder.target_cache = self.target_cache.add_row(decoder.target_cache)
            if draft is not None:
                if self.draft_cache is None:
                    self.draft_cache = BatchKVCache.like(draft.cache, self.batch, FIRST_CAPACITY)
                draft.cache = self.draft_cache.add_row(draft.cache)
            self.rows.append(Row(request, decoder))
            joined.append(request.request_id)
        return joined

    def _propose(self) -> list[Proposal]:
        """Every row's proposal; the drafter forwards they ask for run round by round, one forward a round."""
        proposing = [row.decoder.propose() for row in self.rows]
        results = [p if isinstance(p, Proposal) else _resume(p, None) for p in proposing]
        while any(isinstance(r, Feed) for r in results):
            feeds = {i: r for i, r in enumerate(results) if isinstance(r, Feed)}
            logits = self._draft_forward(feeds)
            for i in feeds:
                results[i] = _resume(proposing[i], logits[i])
        return results

    def _draft_forward(self, feeds: dict[int, Feed]) -> dict[int, torch.Tensor]:
        """One drafter forward over every row (rows without a feed take part as padding)."""
        rows = [feeds.get(i, RowInput([])) for i in range(len(self.rows))]
        ids, positions, mask = self.draft_cache.inputs(rows)
        state = next(iter(feeds.values())).state          # every row's state runs the same model
        with torch.no_grad():
            logits = state.forward(ids, self.draft_cache, positions, mask, self.target_cache)
        self.draft_cache.advance([len(r.tokens) for r in rows])
        return {i: logits[i, : len(feed.tokens)] for i, feed in feeds.items()}

    def _verify(self, proposals: list[Proposal]) -> tuple[torch.Tensor, list[int]]:
        """The target's logits [rows, widest tree, vocab] over every row's pending token and tree, and
        each row's root (the cache index of its pending token)."""
        roots = list(self.target_cache.row_lengths)
        rows = [RowInput([row.decoder.tokens[-1], *p.tree.tokens[1:]],
                         torch.tensor([root + d for d in depths(p.tree.parents)]), ancestor_mask(p.tree.parents))
                for row, p, root in zip(self.rows, proposals, roots)]
        ids, positions, mask = self.target_cache.inputs(rows)
        with torch.no_grad():
            logits = self.target(ids, self.target_cache, position_ids=positions, mask=mask).logits
        self.target_cache.advance([p.tree.size for p in proposals])
        return logits, roots

    def _finish(self, records: list[RowStep]) -> list[Finished]:
        """Rows whose request has its tokens leave (their last step cut to what the output keeps)."""
        done = []
        for i in reversed(range(len(self.rows))):
            row = self.rows[i]
            out, limit = row.output, row.request.max_new_tokens
            if len(out) < limit and (self.eos is None or self.eos not in out):
                continue
            kept = out[:limit]
            if self.eos is not None and self.eos in kept:
                kept = kept[: kept.index(self.eos) + 1]
            records[i].accepted -= len(out) - len(kept)
            done.append(Finished(row.request.request_id, len(row.request.prompt), kept))
            self._remove(i)
        return done[::-1]

    def _remove(self, index: int) -> None:
        """Free a row: the last row moves into it, in every cache and in `rows` alike."""
        self.target_cache.remove_row(index)
        if self.draft_cache is not None:
            self.draft_cache.remove_row(index)
        self.rows[index] = self.rows[-1]
        self.rows.pop()

    # -- a whole run -------------------------------------------------------------------------------
    def generate(self, prompts: Sequence[Sequence[int]], max_new_tokens: int | Sequence[int]) -> BatchGeneration:
        """Decode every prompt (request ids 0..n-1), keeping up to `batch` rows busy, on an idle engine."""
        if not self.idle:
            raise InputError("generate needs an idle engine (requests are queued or decoding)")
        limits = [max_new_tokens] * len(prompts) if isinstance(max_new_tokens, int) else list(max_new_tokens)
        if len(limits) != len(prompts):
            raise InputError(f"{len(limits)} max_new_tokens for {len(prompts)} prompts")
        for i, (prompt, limit) in enumerate(zip(prompts, limits)):
            self.add(i, prompt, limit)
        begin = time.perf_counter()
        steps, outputs = [], {}
        while not self.idle:
            steps.append(self.step())
            outputs.update({f.request_id: f.tokens for f in steps[-1].finished})
        return BatchGeneration([outputs[i] for i in range(len(prompts))], steps, time.perf_counter() - begin)


def _resume(proposing, logits: torch.Tensor | None) -> Feed | Proposal:
    """A proposing row's next feed, or its proposal once it is done."""
    try:
        return proposing.send(logits)
    except StopIteration as done:
        return done.value


def generate_batch(method: str, target: Llama, prompts: Sequence[Sequence[int]],
                   max_new_tokens: int | Sequence[int], *, batch: int, drafter: Any = None,
                   **options: Any) -> BatchGeneration:
    """`BatchEngine(method, target, drafter, batch=batch, **options).generate(prompts, max_new_tokens)`."""
    return BatchEngine(method, target, drafter, batch=batch, **options).generate(prompts, max_new_tokens)
