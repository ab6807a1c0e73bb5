"""Synthetic traces drawn from known parameters, so that every fit can be checked against the truth.

Each generator returns a frame in its trace contract (traces.schema) and the RunMetadata to write
it with; noise is multiplicative log-normal (latency) or the sampling noise of the process itself
(acceptance), always from `numpy.random.default_rng(seed)`.
"""
from __future__ import annotations

import itertools
import json

import numpy as np
import pandas as pd

import methods
from traces.schema import RunMetadata, validate
from profiles.acceptance import MarkovAcceptance

DEFAULT_GRID = {
    "n_tokens": [1, 2, 4, 8, 16, 32, 64, 128, 256, 512],
    "ctx_len": [0, 128, 256, 512, 1024, 2048],
    "batch": [1, 2, 4, 8, 16],
}


def synthetic_latency_trace(model, grid: dict[str, list[int]] | None = None, noise: float = 0.0, seed: int = 0,
                            model_name: str = "model", hardware: str = "unknown", dtype: str = "fp16",
                            role: str = "target", repeats: int = 5) -> tuple[pd.DataFrame, RunMetadata]:
    """LatencyTrace rows of `model.predict` on the full grid, times exp(N(0, noise)) per row."""
    axes = grid or DEFAULT_GRID
    rows = pd.DataFrame(list(itertools.product(axes["n_tokens"], axes["ctx_len"], axes["batch"])),
                        columns=["n_tokens", "ctx_len", "batch"])
    rng = np.random.default_rng(seed)
    seconds = model.predict(rows["n_tokens"], rows["ctx_len"], rows["batch"]) * np.exp(rng.normal(0.0, noise, len(rows)))
    frame = rows.assign(model=model_name, hardware=hardware, dtype=dtype, role=role, seconds=seconds, repeats=repeats)
    meta = RunMetadata(kind="latency", models={role: model_name}, hardware=hardware, dtype=dtype, seed=seed,
                       extra={"synthetic": True, "noise": noise})
    return validate(frame, "latency", source="synthetic latency trace"), meta


def synthetic_token_trace(p_aa: float, p_ra: float, rank_ratio: float, n_prompts: int = 20, length: int = 200,
                          hit_conf: tuple[float, float] = (5.0, 1.5), miss_conf: tuple[float, float] = (1.5, 3.0),
                          seed: int = 0, temperature: float = 0.0) -> tuple[pd.DataFrame, RunMetadata]:
    """A greedy TokenTrace whose top-1 hits follow a two-state Markov chain (p_aa, p_ra).

    A miss puts the target token at draft rank 1 + Geometric(1 - rank_ratio) - 1, so that
    P(rank < k) = 1 - (1 - alpha) rank_ratio^(k - 1); the drafter's top-1 confidence is
    Beta(*hit_conf) on a hit and Beta(*miss_conf) on a miss. `alpha` holds the 0/1 hit.
    """
    rng = np.random.default_rng(seed)
    chain = MarkovAcceptance(p_aa, p_ra)
    frames = []
    for prompt in range(n_prompts):
        hit = chain.sample(length, rng)
        extra = rng.geometric(1.0 - rank_ratio, length) if rank_ratio > 0 else np.ones(length, int)
        rank = np.where(hit, 0, extra)
        conf = np.where(hit, rng.beta(*hit_conf, length), rng.beta(*miss_conf, length))
        frames.append(pd.DataFrame({
            "run_id": "synthetic", "prompt_id": f"p{prompt:03d}", "pos": np.arange(length),
            "token": rng.integers(0, 32000, length), "draft_rank": rank, "draft_conf": conf,
            "draft_q_token": np.where(hit, conf, conf * rng.random(length)), "alpha": hit.astype(float),
            "target_entropy": rng.exponential(1.0, length)}))
    meta = RunMetadata(kind="token", temperature=temperature, seed=seed,
                       extra={"synthetic": True, "p_aa": p_aa, "p_ra": p_ra, "rank_ratio": rank_ratio})
    return validate(pd.concat(frames, ignore_index=True), "token", source="synthetic token trace"), meta


def _config_json(method: str, **fields) -> str:
    """A StepTrace's config column: the method's full configuration, as the recorder writes it."""
    return json.dumps(methods.get(method).config(**fields).to_dict(), sort_keys=True)


def synthetic_chain_steps(betas: list[float], n_steps: int = 5000, seed: int = 0) -> tuple[pd.DataFrame, RunMetadata]:
    """StepTrace rows of chain SD with gamma = len(betas): position i accepted with beta_i given
    1..i-1 were; positions after the first rejection are drafted but not accepted."""
    rng = np.random.default_rng(seed)
    gamma = len(betas)
    draws = rng.random((n_steps, gamma)) < np.asarray(betas)[None, :]
    leading = np.where(draws.all(axis=1), gamma, np.argmin(draws, axis=1))
    masks = np.arange(gamma)[None, :] < leading[:, None]
    confidences = np.where(masks, rng.beta(5, 1.5, masks.shape), rng.beta(1.5, 3, masks.shape))
    frame = pd.DataFrame({
        "run_id": "synthetic", "method": methods.CHAIN, "config": _config_json(methods.CHAIN, gamma=gamma),
        "prompt_id": "p0", "step": np.arange(n_steps), "ctx_len": 128 + np.arange(n_steps), "draft_forwards": gamma,
        "draft_s": 1e-3 * gamma, "verify_tokens": gamma + 1, "verify_s": 2e-2, "overhead_s": 1e-4,
        "accepted": leading + 1, "accept_mask": list(masks), "confidences": list(confidences)})
    meta = RunMetadata(kind="step", seed=seed, extra={"synthetic": True, "betas": list(betas)})
    return validate(frame, "step", source="synthetic step trace"), meta


def synthetic_ngram_steps(model: dict, configs: list, prompts: int = 60, steps: int = 40,
                          seed: int = 0) -> tuple[pd.DataFrame, RunMetadata]:
    """StepTrace rows of an n-gram verifying method (fields N, W, G) under the pool's growth
    (costmodel.lookahead), written out as the process itself: at step t of a prompt the window has
    collected W max(0, t - N + 2) n-grams; with probability hit (1 - exp(-collected / fill)) the
    step finds min(G, 1 + Poisson(pool)) candidates of N - 1 tokens, and commits 1 + the longest
    accepted prefix among them: a candidate's first token accepted with alpha, each later one with
    alpha_next. `model["spread"]` 1: the
    candidates are independent; 0: they are copies of one. Its forward carries the pending token,
    the window (one level of W on a prompt's first step, growing to N - 1 levels) and the candidates."""
    if model["spread"] not in (0, 1):
        raise ValueError("the synthetic n-gram process takes spread 0 (copies) or 1 (independent candidates)")
    rng = np.random.default_rng(seed)
    frames = []
    for config in configs:
        n, w, g = config.N, config.W, config.G
        t = np.tile(np.arange(steps), prompts)
        collected = w * np.maximum(0, t - n + 2)
        found = rng.random(t.size) < model["hit"] * -np.expm1(-collected / model["fill"])
        cands = np.where(found, np.minimum(g, 1 + rng.poisson(model["pool"], t.size)), 0)
        hits = rng.random((t.size, g, n - 1)) < np.r_[model["alpha"], np.full(n - 2, model["alpha_next"])]
        if model["spread"] == 0:
            hits[:] = hits[:, :1]
        prefix = np.where(hits.all(axis=2), n - 1, np.argmin(hits, axis=2))
        longest = np.where(np.arange(g)[None, :] < cands[:, None], prefix, 0).max(axis=1)
        frames.append(pd.DataFrame({
            "run_id": "synthetic", "method": config.method, "config": json.dumps(config.to_dict()),
            "prompt_id": np.repeat([f"p{i}" for i in range(prompts)], steps), "ctx_len": 128,
            "draft_forwards": 0, "draft_s": 0.0, "step": t, "verify_s": 2e-2, "overhead_s": 1e-4,
            "accepted": 1 + longest, "verify_tokens": 1 + w * np.minimum(t + 1, n - 1) + cands * (n - 1),
            "accept_mask": [[]] * t.size, "confidences": [[]] * t.size}))
    meta = RunMetadata(kind="step", seed=seed, extra={"synthetic": True, **model})
    return validate(pd.concat(frames, ignore_index=True), "step", source="synthetic n-gram steps"), meta
