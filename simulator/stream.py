"""One request's decode loop: prefill, then speculation steps until the output is complete.

Two engines give the same numbers from the same draws:
  * "simpy": a simpy process yields one timeout per draft forward, per verify forward and per
    overhead, pricing each forward with a scalar latency call; it is the reference.
  * "fast": the same accounting as numpy over all steps at once (contexts by cumulative sum,
    one vectorised latency call per draft position); simpy's per-event cost is the limit of
    the reference, and the test suite checks the two agree.
Acceptance is drawn up front (`methods.draws.draw_stream`) or replayed from a TokenTrace
(`simulator.replay`), so both engines see identical steps.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
import pandas as pd
import simpy

from costmodel import step as step_cost
from costmodel.params import Arch
from methods.spec import plain_shape
from methods.draws import StepDraws, draw_stream
from simulator.costs import Parallelism, StepCosts, latency_for
from simulator.methods import build_step_model, load_profile
from common.errors import InputError
from traces.schema import step_wall_s

ENGINES = ("fast", "simpy")


@dataclass
class StreamResult:
    summary: dict[str, Any]
    steps: pd.DataFrame | None = None


def step_costs_for(profile, step, latencies=None, parallel: Parallelism | None = None) -> StepCosts:
    """StepCosts with the target's shape numbers (hidden size, layers) from the Profile."""
    arch = profile.models[step.target]      # a measured table of unknown architecture: no tensor-parallel terms
    hidden, layers = (arch.hidden, arch.n_layers) if isinstance(arch, Arch) else (4096, 1)
    return StepCosts(step, latency_for(profile, step, latencies), hidden=hidden, parallel=parallel, n_layers=layers)


def step_arrays(costs: StepCosts, draws: StepDraws, prompt_len: int) -> dict[str, np.ndarray]:
    """Per-step timings of one stream, vectorised: the step table's columns as arrays."""
    ctx = prompt_len + np.cumsum(draws.accepted) - draws.accepted
    step = np.arange(ctx.size)
    cost = costs.cost(ctx, draws.drafted, draws.verify_tokens, 1, prompt_len=prompt_len, first=step == 0)
    return {"step": step, "ctx_len": ctx, "draft_forwards": draws.drafted, "draft_s": cost.draft_s,
            "verify_tokens": draws.verify_tokens, "verify_s": cost.verify_s, "overhead_s": cost.overhead_s,
            "accepted": draws.accepted}


def time_steps_fast(costs: StepCosts, draws: StepDraws, prompt_len: int) -> pd.DataFrame:
    """Per-step timings of one stream, vectorised, as a step table."""
    return pd.DataFrame(step_arrays(costs, draws, prompt_len))


def time_steps_simpy(costs: StepCosts, draws: StepDraws, prompt_len: int) -> tuple[pd.DataFrame, float]:
    """The reference: one simpy event per forward. Returns per-step timings and the end time."""
    env = simpy.Environment()
    rows: list[tuple] = []

    def decode():
        ctx = prompt_len
        for i in range(draws.accepted.size):
            t0 = env.now
            drafted = int(draws.drafted[i])
            for seconds in costs.draft_forward_seconds(ctx)[:drafted]:
                yield env.timeout(float(seconds))
            if i == 0 and drafted:
                yield env.timeout(costs.catch_up_seconds(prompt_len))
            if drafted and costs.parallel.draft_transfer_s:
                yield env.timeout(costs.parallel.draft_transfer_s)
            t1 = env.now
            yield env.timeout(float(costs.verify_seconds(ctx, int(draws.verify_tokens[i]), 1)))
            t2 = env.now
            yield env.timeout(costs.step.overhead_s)
            rows.append((i, ctx, drafted, t1 - t0, int(draws.verify_tokens[i]), t2 - t1, env.now - t2,
                         int(draws.accepted[i])))
            ctx += int(draws.accepted[i])

    env.process(decode())
    env.run()
    cols = ["step", "ctx_len", "draft_forwards", "draft_s", "verify_tokens", "verify_s", "overhead_s", "accepted"]
    return pd.DataFrame(rows, columns=cols), env.now


@dataclass(frozen=True)
class PreparedStream:
    """What one request's simulation needs that no seed changes: its step model priced on the
    Profile, and plain decoding's time for the same stream (the speedup's numerator). Built once,
    run with as many seeds as wanted (`run_stream`)."""
    method: str
    step: Any                 # simulator.methods.StepModel
    costs: StepCosts
    prompt_len: int
    n_tokens: int
    prefill_s: float
    ar_decode_s: float


def prepare_stream(profile, method: str, config: Mapping | str | None = None, n_tokens: int = 256, *,
                   prompt_len: int = 128, latencies: Mapping[str, Any] | None = None,
                   parallel: Parallelism | None = None) -> PreparedStream:
    """One request's stream before any draw: prefill `prompt_len` tokens, then decode `n_tokens`
    output tokens (the prefill emits the first). `config`: the method's config and setup options
    (`simulator.methods.build_step_model`); `latencies` maps model names to objects with
    `.predict(n_tokens, ctx_len, batch)` and overrides the Profile's fitted ones."""
    if int(n_tokens) < 2:
        raise InputError(f"n_tokens must be >= 2 (the prefill emits the first), got {n_tokens}")
    if int(prompt_len) < 1:
        raise InputError(f"prompt_len must be >= 1, got {prompt_len}")
    profile = load_profile(profile)
    step = build_step_model(profile, method, config, new_tokens=int(n_tokens) - 1)
    costs = step_costs_for(profile, step, latencies, parallel)
    # the same stream decoded one token per step by the target alone, on the same latency models
    ar_ctx = prompt_len + np.arange(int(n_tokens) - 1)
    ar_decode_s = float(np.sum(step_cost.step_seconds(costs.latency, plain_shape(profile), ar_ctx, 1)))
    return PreparedStream(method, step, costs, int(prompt_len), int(n_tokens),
                          costs.prefill_seconds(prompt_len), ar_decode_s)


def run_stream(stream: PreparedStream, seed: int = 0, *, engine: str = "fast", draws: StepDraws | None = None,
               per_step: bool = False) -> StreamResult:
    """Decode a prepared stream with acceptance drawn from `seed`, or replayed from `draws`.

    Returns a summary (ttft_s, tpot_s, e2e_s, steps, tokens_per_step, speedup against plain
    autoregressive decoding on the same latency models, ...) and, with per_step, the step table."""
    if engine not in ENGINES:
        raise InputError(f"unknown engine '{engine}' (known: {', '.join(ENGINES)})")
    n_tokens = stream.n_tokens
    if draws is None:
        draws = draw_stream(stream.step.sampler, np.random.default_rng(seed), n_tokens - 1)
    elif int(draws.accepted.sum()) != n_tokens - 1:
        raise InputError(f"the given draws commit {int(draws.accepted.sum())} tokens; n_tokens - 1 = {n_tokens - 1}")
    if engine == "fast":
        columns = step_arrays(stream.costs, draws, stream.prompt_len)
        wall = columns["draft_s"] + columns["verify_s"] + columns["overhead_s"]
        decode_s = float(wall.sum())
        table = pd.DataFrame(columns) if per_step else None
    else:
        table, decode_s = time_steps_simpy(stream.costs, draws, stream.prompt_len)
        wall = step_wall_s(table).to_numpy()
    n_steps = len(wall)
    summary = {
        "method": stream.method, **stream.step.describe(), "engine": engine, "seed": seed,
        "prompt_len": stream.prompt_len, "n_tokens": n_tokens, "steps": n_steps,
        "tokens_per_step": int(draws.accepted.sum()) / n_steps,
        "ttft_s": stream.prefill_s, "decode_s": decode_s, "e2e_s": stream.prefill_s + decode_s,
        "tpot_s": decode_s / (n_tokens - 1),
        "step_s_p50": float(np.median(wall)), "step_s_p99": float(np.quantile(wall, 0.99)),
        "ar_decode_s": stream.ar_decode_s, "speedup": stream.ar_decode_s / decode_s,
    }
    return StreamResult(summary, table if per_step else None)


def simulate_stream(profile, method: str, config: Mapping | str | None = None, n_tokens: int = 256,
                    seed: int = 0, *, prompt_len: int = 128, engine: str = "fast",
                    latencies: Mapping[str, Any] | None = None, parallel: Parallelism | None = None,
                    draws: StepDraws | None = None, per_step: bool = False) -> StreamResult:
    """Simulate one request (`prepare_stream`, then `run_stream` with `seed` or `draws`)."""
    stream = prepare_stream(profile, method, config, n_tokens, prompt_len=prompt_len, latencies=latencies,
                            parallel=parallel)
    return run_stream(stream, seed, engine=engine, draws=draws, per_step=per_step)
