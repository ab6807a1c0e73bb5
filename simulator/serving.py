"""Serving: arrivals routed to replicas, each running iteration-level continuous batching.

Each replica is a simpy process (pp of them per replica with pipeline parallelism: one per batch
in flight, sharing the replica's queue and memory). An iteration is either a prefill of newly
admitted requests (their first output token; preempted ones recompute prompt + generated) or one
speculation step for the whole running batch: draft forwards at the batch's mean context and
largest draft length, a verify forward of the batch's largest query-token count, then overhead,
all priced by the fitted latency models with `batch` = running sequences. Memory is counted in KV
tokens (`simulator.memory`): admission needs the prompt plus a step's reservation; a step reserves
its query tokens and keeps only the accepted ones; when a step does not fit, the most recently
admitted request is preempted (its cache dropped, re-queued at the front); a request that cannot
fit alone fails as out-of-memory.

An engine whose Profile says it pads its rows (`costmodel.step.PADDED`, `runtime.engine.batch`) is served
as it runs: a step attends over its longest row (the context it is priced at), each admitted request is
prefilled alone (the engine calibration's fitted prefill) in the step that then decodes every row (no other
admission between the two), its first token comes from that decode step, and every running row reserves
its widest tree's slots before a step (vLLM's lookahead slots). `Cluster.kv_tokens` sets a replica's KV
budget in tokens directly (a serving loop's own budget) instead of deriving it from the GPU's memory.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np
import pandas as pd
import simpy

from simulator.costs import Parallelism
from simulator.leaning import draw_leaning, leanings
from simulator.memory import replica_memory
from simulator.methods import build_step_model, load_profile
from simulator.stream import step_costs_for
from simulator.workload import Workload, make_requests
from common.errors import InputError
from costmodel.step import PADDED

ROUTING = ("round_robin", "least_loaded")


@dataclass
class Cluster:
    """Replicas of one deployment: batch limit, parallelism, memory per GPU (default: the
    Profile's hardware), reserve fraction for activations, routing of arrivals."""

    replicas: int = 1
    max_batch: int = 32
    parallel: Parallelism = field(default_factory=Parallelism)
    gpu_mem_gb: float | None = None
    reserve_fraction: float = 0.1
    routing: str = "least_loaded"
    kv_tokens: int | None = None        # a replica's KV budget in tokens (None: from its GPUs' memory)

    def __post_init__(self):
        if self.kv_tokens is not None and (isinstance(self.kv_tokens, bool) or int(self.kv_tokens) < 1):
            raise InputError(f"kv_tokens must be an integer >= 1, got {self.kv_tokens!r}")
        if int(self.replicas) < 1:
            raise InputError(f"replicas must be >= 1, got {self.replicas}")
        if int(self.max_batch) < 1:
            raise InputError(f"batch limit must be >= 1, got {self.max_batch}")
        if self.routing not in ROUTING:
            raise InputError(f"unknown routing '{self.routing}' (known: {', '.join(ROUTING)})")


@dataclass
class ServingResult:
    requests: pd.DataFrame
    summary: dict[str, Any]
    iterations: pd.DataFrame | None = None


class _Replica:
    """Shared state of one replica: its queue, memory and the requests in its batches."""

    def __init__(self, env, index: int, capacity: int):
        self.env, self.index, self.capacity = env, index, capacity
        self.waiting: deque[int] = deque()
        self.used = 0             # KV tokens held by running requests
        self.wake = env.event()
        self.outstanding = 0

    def notify(self):
        if not self.wake.triggered:
            self.wake.succeed()


class _Sim:
    def __init__(self, profile, method, config, requests, cluster, seed, latencies, per_step, workload):
        self.env = simpy.Environment()
        self.step = build_step_model(profile, method, config)
        cluster.parallel.check_heads(profile.arch(), profile.target)
        self.costs = step_costs_for(profile, self.step, latencies, cluster.parallel)
        self.memory = replica_memory(profile, self.step, cluster.parallel, cluster.gpu_mem_gb,
                                     cluster.reserve_fraction)
        if cluster.kv_tokens is not None:
            self.memory.capacity_tokens = int(cluster.kv_tokens)
        self.padded = self.step.shape.batching == PADDED
        self.cluster, self.per_step = cluster, per_step
        self.rng = np.random.default_rng(seed)
        n = len(requests)
        self.arrival = requests["arrival_s"].to_numpy(float)
        self.prompt = requests["prompt_len"].to_numpy(np.int64)
        self.output = requests["output_len"].to_numpy(np.int64)
        self.generated = np.zeros(n, np.int64)
        self.ctx = np.zeros(n, np.int64)         # KV tokens held now (0 when not resident)
        self.admitted = np.full(n, np.nan)       # first admission: the end of the request's wait in the queue
        self.first_token = np.full(n, np.nan)
        self.last_chunk = np.full(n, np.nan)     # when the request's latest output chunk came out
        self.chunks = np.zeros(n, np.int64)      # output chunks: the first token, then one per step that emits
        self.gaps: list[tuple[np.ndarray, np.ndarray]] = []   # (requests, seconds since their previous chunk)
        self.finish = np.full(n, np.nan)
        self.status = np.array(["pending"] * n, dtype=object)
        self.preemptions = np.zeros(n, np.int64)
        self.replica_of = np.zeros(n, np.int64)
        self.state = (self.step.sampler.initial_state(n) if getattr(self.step.sampler, "stateful", False) else None)
        self.reserve = self.step.reserve_tokens
        self.fixed_shape = getattr(self.step.sampler, "fixed_shape", None)
        self.lean = leanings(self.step.sampler, workload.acceptance_spread, n, np.random.default_rng([seed, 1]),
                             workload.spread_tokens)                                   # None: every request alike
        self.replicas = [_Replica(self.env, i, self.memory.capacity_tokens) for i in range(cluster.replicas)]
        self.in_system, self.area, self.last_change = 0, 0.0, 0.0
        self.iter_rows: list[tuple] = []
        self.busy = np.zeros(cluster.replicas)
        self.peak_batch = 0

    # ---- bookkeeping for Little's law: time-integral of requests in the system ---------------
    def _count(self, delta: int):
        now = self.env.now
        self.area += self.in_system * (now - self.last_change)
        self.in_system += delta
        self.last_change = now

    def _done(self, r: int, status: str, rep: _Replica):
        self.finish[r] = self.env.now
        self.status[r] = status
        rep.outstanding -= 1
        self._count(-1)
        rep.notify()

    # ---- processes ------------------------------------------------------------------------
    def arrivals(self):
        rr = 0
        for r in range(self.arrival.size):
            delay = self.arrival[r] - self.env.now
            if delay > 0:
                yield self.env.timeout(delay)
            if self.cluster.routing == "round_robin":
                rep = self.replicas[rr % len(self.replicas)]
                rr += 1
            else:
                rep = min(self.replicas, key=lambda x: x.outstanding)
            self.replica_of[r] = rep.index
            rep.outstanding += 1
            self._count(+1)
            rep.waiting.append(r)
            rep.notify()

    def batch_loop(self, rep: _Replica):
        env, costs, cap = self.env, self.costs, self.cluster.max_batch
        running: list[int] = []
        while True:
            admit = self._admit(rep, running, cap) if rep.waiting else []
            if not running and not admit:  # idle, or waiting for a sibling batch to free memory
                if rep.wake.triggered:
                    rep.wake = env.event()
                yield rep.wake
                continue
            if admit:
                lengths = self.prompt[admit] + self.generated[admit]
                seconds = (costs.prefill_seconds(lengths, 1) if self.padded       # padded: each prefilled alone
                           else costs.prefill_seconds(int(round(lengths.mean())), len(admit)))
                seconds += costs.catch_up_seconds(self.prompt[admit])    # each drafter's first forward, paid here
                yield env.timeout(seconds)
                self.busy[rep.index] += seconds
                self._log(rep, "prefill", len(admit), int(lengths.mean()), 0, int(lengths.sum()), seconds, len(admit))
                for r in admit:
                    if np.isnan(self.first_token[r]) and not self.padded:   # padded: from its first decode step
                        self.first_token[r] = self.last_chunk[r] = env.now
                        self.chunks[r] += 1
                        self.generated[r] += 1
                        self.ctx[r] += 1
                        rep.used += 1
                    if self.generated[r] >= self.output[r]:
                        rep.used -= self.ctx[r]
                        self.ctx[r] = 0
                        self._done(r, "done", rep)
                    else:
                        running.append(r)
                if not (self.padded and running):   # padded: the step that prefilled them decodes right after
                    continue
            yield from self._decode(rep, running)

    def _admit(self, rep: _Replica, running: list[int], cap: int) -> list[int]:
        admit: list[int] = []
        while rep.waiting and len(running) + len(admit) < cap:
            r = rep.waiting[0]
            need = int(self.prompt[r] + self.generated[r]) + self.reserve
            if rep.used + need > rep.capacity:
                if rep.used == 0 and not admit:  # cannot fit even alone
                    rep.waiting.popleft()
                    self._done(r, "oom", rep)
                    continue
                break
            rep.waiting.popleft()
            if np.isnan(self.admitted[r]):
                self.admitted[r] = self.env.now
            self.ctx[r] = self.prompt[r] + self.generated[r]
            rep.used += int(self.ctx[r])
            admit.append(r)
        return admit

    def _decode(self, rep: _Replica, running: list[int]):
        env = self.env
        ids = np.fromiter(running, np.int64, len(running))
        state = None if self.state is None else self.state[ids]
        draws, new_state = (self.step.sampler.draw(self.rng, ids.size, state) if self.lean is None
                            else (draw_leaning(self.step.sampler, self.rng, self.lean[ids]), None))
        accepted, drafted, verify = draws.accepted, draws.drafted, draws.verify_tokens
        shape = self.fixed_shape   # (drafted, verify tokens) when every sequence has the same
        # reserve the step's query tokens; preempt the newest requests while they do not fit
        reserve = ids.size * shape[1] if shape else ids.size * self.reserve if self.padded else int(verify.sum())
        while rep.used + reserve > rep.capacity and ids.size > 1:
            r = running.pop()
            rep.used -= int(self.ctx[r])
            self.ctx[r] = 0
            self.preemptions[r] += 1
            rep.waiting.appendleft(r)
            reserve -= shape[1] if shape else self.reserve if self.padded else int(verify[-1])
            ids, accepted, drafted, verify = ids[:-1], accepted[:-1], drafted[:-1], verify[:-1]
            if new_state is not None:
                new_state = new_state[:-1]
        if rep.used + reserve > rep.capacity:
            r = running.pop()
            rep.used -= int(self.ctx[r])
            self.ctx[r] = 0
            self._done(r, "oom", rep)
            return
        batch = ids.size
        self.peak_batch = max(self.peak_batch, batch)
        ctx = self.ctx[ids]
        mean_ctx = int(ctx.max()) if self.padded else int(ctx.sum()) / batch   # padded: its longest row
        max_drafted, max_verify = shape if shape else (int(drafted.max()), int(verify.max()))
        draft, verify_s, overhead = self.costs.step_seconds(mean_ctx, max_drafted, max_verify, batch)
        seconds = draft + verify_s + overhead
        yield env.timeout(seconds)
        self.busy[rep.index] += seconds
        left = self.output[ids] - self.generated[ids]
        accepted = np.minimum(accepted, left)
        first = ids[np.isnan(self.first_token[ids]) & (accepted > 0)]
        self.first_token[first] = env.now
        emitted = ids[accepted > 0]
        later = emitted[~np.isnan(self.last_chunk[emitted])]
        self.gaps.append((later, env.now - self.last_chunk[later]))
        self.last_chunk[emitted] = env.now
        self.chunks[emitted] += 1
        self.generated[ids] += accepted
        self.ctx[ids] = ctx + accepted
        gained = int(accepted.sum())
        rep.used += gained
        if new_state is not None:
            self.state[ids] = new_state
        if self.per_step:
            self._log(rep, "decode", batch, int(mean_ctx), max_verify, gained, seconds, max_drafted)
        finished = ids[accepted >= left]
        if finished.size:
            done = set(finished.tolist())
            running[:] = [r for r in running if r not in done]
            for r in done:
                rep.used -= int(self.ctx[r])
                self.ctx[r] = 0
                self._done(r, "done", rep)

    def _log(self, rep, kind, batch, ctx, verify_tokens, tokens, seconds, extra):
        if self.per_step:
            self.iter_rows.append((rep.index, self.env.now - seconds, kind, batch, ctx, verify_tokens, tokens, seconds, extra))

    def run(self):
        self.env.process(self.arrivals())
        for rep in self.replicas:
            for _ in range(self.cluster.parallel.pp):
                self.env.process(self.batch_loop(rep))
        self.env.run(until=self._drained())

    def _drained(self):
        """An event that fires once every request has finished or failed."""
        done = self.env.event()

        def watch():
            while (self.status == "pending").any():
                yield self.env.timeout(max(1.0, 0.01 * self.env.now))
            done.succeed()

        self.env.process(watch())
        return done


def _quantiles(values: np.ndarray, name: str) -> dict[str, float]:
    values = values[np.isfinite(values)]
    if values.size == 0:
        return {f"{name}_{k}": float("nan") for k in ("mean", "p50", "p90", "p99")}
    return {f"{name}_mean": float(values.mean()), f"{name}_p50": float(np.quantile(values, 0.5)),
            f"{name}_p90": float(np.quantile(values, 0.9)), f"{name}_p99": float(np.quantile(values, 0.99))}


def simulate_serving(profile, method: str, config: Mapping | str | None = None,
                     workload: Workload | None = None, cluster: Cluster | None = None, seed: int = 0, *,
                     latencies: Mapping[str, Any] | None = None, per_step: bool = False) -> ServingResult:
    """Serve `workload` with `method`/`config` on `cluster`; run until every request is done.

    Returns per-request rows (arrival_s, admitted_s, first_token_s, finish_s, ttft_s, tpot_s, e2e_s,
    queue_s: arrival to first admission, service_s: admission to last token, status, preemptions,
    replica), a summary (throughput, latency means and tails, OOM count, preemptions, Little's law
    terms) and, with per_step, one row per iteration. TTFT and end-to-end latency include the wait
    in the queue; service_s is a request's own latency once running (with its batch, without the wait).
    Output comes in chunks, as a stream would deliver it: the first token, then whatever each step
    accepts at once. ITL (`itl_s_*`, as `vllm bench serve` counts it) is the gap between successive
    chunks over every completed request's gaps, a step that emits several tokens counting once;
    TPOT is per token, (finish - first token) / (generated - 1) per request; `chunks` per request.
    """
    profile = load_profile(profile)
    workload = workload or Workload()
    cluster = cluster or Cluster()
    requests = make_requests(workload, seed)
    sim = _Sim(profile, method, config, requests, cluster, seed, latencies, per_step, workload)
    sim.run()
    out = requests.assign(
        admitted_s=sim.admitted, first_token_s=sim.first_token, finish_s=sim.finish, status=sim.status.astype(str),
        preemptions=sim.preemptions, replica=sim.replica_of, generated=sim.generated, chunks=sim.chunks,
    )
    out["ttft_s"] = out["first_token_s"] - out["arrival_s"]
    out["e2e_s"] = out["finish_s"] - out["arrival_s"]
    out["queue_s"] = out["admitted_s"] - out["arrival_s"]
    out["service_s"] = out["finish_s"] - out["admitted_s"]
    out["tpot_s"] = (out["finish_s"] - out["first_token_s"]) / (out["generated"] - 1).clip(lower=1)
    done = out[out["status"] == "done"]
    span = float(np.nanmax(sim.finish) - requests["arrival_s"].min())
    horizon = float(np.nanmax(sim.finish))
    whose = np.concatenate([ids for ids, _ in sim.gaps] or [np.zeros(0, np.int64)])
    gaps = np.concatenate([g for _, g in sim.gaps] or [np.zeros(0)])
    itl = gaps[out["status"].to_numpy()[whose] == "done"]
    summary = {
        "method": method, **sim.step.describe(), "seed": seed, "replicas": cluster.replicas,
        "max_batch": cluster.max_batch, "tp": cluster.parallel.tp, "pp": cluster.parallel.pp,
        "lp": cluster.parallel.lp, "kv_capacity_tokens": sim.memory.capacity_tokens,
        "requests": len(out), "completed": len(done), "oom": int((out["status"] == "oom").sum()),
        "preemptions": int(out["preemptions"].sum()), "offered_rate": workload.rate,
        "duration_s": span, "throughput_tok_s": float(done["generated"].sum()) / span,
        "throughput_req_s": len(done) / span,
        "utilisation": float(sim.busy.sum() / (horizon * cluster.replicas * cluster.parallel.pp)),
        **_quantiles(done["ttft_s"].to_numpy(), "ttft_s"), **_quantiles(done["tpot_s"].to_numpy(), "tpot_s"),
        **_quantiles(itl, "itl_s"), "peak_batch": sim.peak_batch,
        **_quantiles(done["e2e_s"].to_numpy(), "e2e_s"), **_quantiles(done["queue_s"].to_numpy(), "queue_s"),
        **_quantiles(done["service_s"].to_numpy(), "service_s"),
        # Little's law: time-average number in system (integrated by the simulator) vs lambda * W
        "little_L": sim.area / horizon,
        "little_lambda_W": float(out["e2e_s"].sum()) / horizon,
    }
    iterations = None
    if per_step:
        iterations = pd.DataFrame(sim.iter_rows, columns=["replica", "start_s", "kind", "batch", "mean_ctx",
                                                          "verify_tokens", "tokens", "seconds", "draft_forwards"])
        if len(iterations):
            summary["mean_batch"] = float(iterations.loc[iterations["kind"] == "decode", "batch"].mean())
    return ServingResult(out, summary, iterations)
