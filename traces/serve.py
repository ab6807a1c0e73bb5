"""A serving loop around the continuous-batching engine: requests arrive on the clock, wait in a FCFS
queue, and are decoded with up to a max batch of rows within a KV budget, as a vLLM-style server does.

The engine (`runtime.engine.batch.BatchEngine`, its `batch` the max batch) runs one step at a time;
between steps the loop moves the requests whose arrival time has passed into the queue and admits
from its head while a row is free and the KV budget holds the request (`Limits.kv_tokens`: its
prompt, and what it generated before a preemption, plus the step's reserved slots); a request that
could not fit even alone fails ("oom"). Before each step every running row reserves `Limits.reserve`
slots (the widest tree it may verify: the pending token and its drafts, as vLLM reserves lookahead
slots for speculative tokens); while those do not fit, the newest request is preempted by recompute
(`BatchEngine.preempt`: it re-joins the front of the queue with its prompt and generated tokens). The
same rules as the simulator's (`simulator.serving`), so the two can be compared request by request.

Times are seconds since the loop started, read from `clock` (the wall clock; a test passes its own).
Per request: arrival, admission, first token (the end of its first step that produced a token: this
engine's prefill leaves the prompt's last token pending, the first output comes from the step's
verify), finish, tokens, preemptions; TTFT = first token - arrival, TPOT = (finish - first token) /
(tokens - 1), end-to-end = finish - arrival. Per step: its seconds and parts, rows, widest tree, tokens,
and the KV memory it holds: `held_tokens` (vLLM's accounting: every running row's context plus its
reserved slots) and `allocated_bytes` (what this engine's padded caches allocate: every row at the
longest row's capacity).
"""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from common.errors import InputError


@dataclass(frozen=True)
class Arrival:
    """One request of a load: when it arrives (seconds from the start), its prompt and its new tokens."""

    request_id: str
    arrival_s: float
    prompt: tuple[int, ...]
    max_new_tokens: int


@dataclass(frozen=True)
class Limits:
    """A KV budget in tokens and the slots each running row reserves for a step (its widest tree)."""

    kv_tokens: int
    reserve: int

    def __post_init__(self):
        for name in ("kv_tokens", "reserve"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise InputError(f"{name} must be an integer >= 1, got {value!r}")


@dataclass
class Served:
    requests: pd.DataFrame
    steps: pd.DataFrame
    outputs: dict[str, list[int]]       # request id -> its generated tokens (across preemptions)


def check_arrivals(arrivals: Sequence[Arrival], context: int) -> None:
    """Arrival times >= 0 that never go backwards, and every prompt with its new tokens within `context`."""
    times = [a.arrival_s for a in arrivals]
    if not arrivals:
        raise InputError("no request to serve")
    if not all(np.isfinite(t) and t >= 0 for t in times):
        raise InputError("arrival times must be finite numbers >= 0")
    back = next((i for i in range(1, len(times)) if times[i] < times[i - 1]), None)
    if back is not None:
        raise InputError(f"arrival times go backwards at request {arrivals[back].request_id!r} "
                         f"({times[back]:g} s after {times[back - 1]:g} s)")
    for a in arrivals:
        if len(a.prompt) + a.max_new_tokens > context:
            raise InputError(f"request {a.request_id!r}: a prompt of {len(a.prompt)} tokens and {a.max_new_tokens} new "
                             f"tokens exceed the context of {context} tokens")


class _Loop:
    def __init__(self, engine, arrivals: Sequence[Arrival], limits: Limits, clock: Callable[[], float]):
        self.engine, self.arrivals, self.limits, self.clock = engine, list(arrivals), limits, clock
        n = len(self.arrivals)
        self.index = {a.request_id: i for i, a in enumerate(self.arrivals)}
        self.prompt = [list(a.prompt) for a in self.arrivals]          # grows by what a preempted request generated
        self.left = [a.max_new_tokens for a in self.arrivals]
        self.admitted, self.first, self.finish = (np.full(n, np.nan) for _ in range(3))
        self.generated, self.preemptions = np.zeros(n, np.int64), np.zeros(n, np.int64)
        self.status = ["pending"] * n
        self.outputs: dict[str, list[int]] = {a.request_id: [] for a in self.arrivals}
        self.waiting: deque[int] = deque()
        self.running: list[int] = []                                    # in admission order
        self.used = 0                                                   # KV tokens held by running requests
        self.steps: list[dict] = []

    def now(self) -> float:
        return self.clock() - self.start

    def run(self, sleep: Callable[[float], None]) -> Served:
        self.start, upcoming = self.clock(), 0
        while upcoming < len(self.arrivals) or self.waiting or self.running:
            while upcoming < len(self.arrivals) and self.arrivals[upcoming].arrival_s <= self.now():
                self.waiting.append(upcoming)
                upcoming += 1
            self._admit()
            if not self.running:
                if upcoming < len(self.arrivals):
                    sleep(max(0.0, self.arrivals[upcoming].arrival_s - self.now()))
                continue
            self._reserve()
            if self.running:
                self._step()
        return Served(self._requests(), pd.DataFrame(self.steps), self.outputs)

    def _admit(self) -> None:
        """FCFS from the queue's head while a row is free and the budget holds the request."""
        while self.waiting and len(self.running) < self.engine.batch:
            r = self.waiting[0]
            need = len(self.prompt[r]) + self.limits.reserve
            if self.used + need > self.limits.kv_tokens:
                if not self.running:                  # cannot fit even alone
                    self.waiting.popleft()
                    self.status[r], self.finish[r] = "oom", self.now()
                    continue
                return
            self.waiting.popleft()
            self.engine.add(self.arrivals[r].request_id, self.prompt[r], self.left[r])
            if np.isnan(self.admitted[r]):
                self.admitted[r] = self.now()
            self.used += len(self.prompt[r])
            self.running.append(r)

    def _reserve(self) -> None:
        """Every running row's reserved slots must fit: preempt the newest while they do not."""
        while self.running and self.used + len(self.running) * self.limits.reserve > self.limits.kv_tokens:
            r = self.running.pop()
            tokens = self.engine.preempt(self.arrivals[r].request_id)
            self.outputs[self.arrivals[r].request_id] += tokens
            self.used -= len(self.prompt[r]) + len(tokens)
            self.prompt[r] += tokens
            self.left[r] -= len(tokens)
            if not self.running:                      # alone and still too large
                self.status[r], self.finish[r] = "oom", self.now()
                return
            self.preemptions[r] += 1
            self.waiting.appendleft(r)

    def _step(self) -> None:
        held = self.used + len(self.running) * self.limits.reserve
        begin = self.now()
        record = self.engine.step()
        end = self.now()
        for row in record.rows:
            r = self.index[row.request_id]
            self.generated[r] += row.accepted
            self.used += row.accepted
            if np.isnan(self.first[r]) and row.accepted > 0:
                self.first[r] = end
        for done in record.finished:
            r = self.index[done.request_id]
            self.outputs[done.request_id] += done.tokens
            self.used -= len(self.prompt[r]) + len(done.tokens)
            self.running.remove(r)
            self.status[r], self.finish[r] = "done", end
        self.steps.append({"start_s": begin, "seconds": end - begin, "rows": len(record.rows), "width": record.width,
                           "tokens": sum(row.accepted for row in record.rows), "draft_s": record.draft_s,
                           "verify_s": record.verify_s, "overhead_s": record.overhead_s,
                           "prefill_s": record.prefill_s, "joined": sum(row.joined for row in record.rows),
                           "held_tokens": held, "allocated_bytes": self.engine.cache_bytes()})

    def _requests(self) -> pd.DataFrame:
        out = pd.DataFrame({"request_id": [a.request_id for a in self.arrivals],
                            "arrival_s": [a.arrival_s for a in self.arrivals],
                            "prompt_len": [len(a.prompt) for a in self.arrivals],
                            "output_len": [a.max_new_tokens for a in self.arrivals],
                            "admitted_s": self.admitted, "first_token_s": self.first, "finish_s": self.finish,
                            "generated": self.generated, "preemptions": self.preemptions, "status": self.status})
        out["ttft_s"] = out["first_token_s"] - out["arrival_s"]
        out["tpot_s"] = (out["finish_s"] - out["first_token_s"]) / (out["generated"] - 1).clip(lower=1)
        out["e2e_s"] = out["finish_s"] - out["arrival_s"]
        out["queue_s"] = out["admitted_s"] - out["arrival_s"]
        return out


def serve(engine, arrivals: Sequence[Arrival], limits: Limits, *, clock: Callable[[], float] = time.perf_counter,
          sleep: Callable[[float], None] = time.sleep) -> Served:
    """Serve `arrivals` (sorted by arrival time) on an idle `engine` within `limits` (module docstring)."""
    if not engine.idle:
        raise InputError("serve needs an idle engine (requests are queued or decoding)")
    check_arrivals(arrivals, engine.context)
    return _Loop(engine, arrivals, limits, clock).run(sleep)
