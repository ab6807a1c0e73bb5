"""Per-step acceptance draws, the simulator's side of a method (`MethodSpec.sampler`).

Every sampler answers one question for a batch of `n` sequences at once: how many draft
positions were proposed this step, how many query tokens the verify forward carries, and how many
tokens the step commits (bonus token included). All draws are numpy-vectorised over sequences;
samplers with memory (the bursty Markov model, a pool that grows) carry a per-sequence state.
This module holds the protocol (`Sampler`, `StepDraws`, `draw_stream`) and the samplers several
methods share; a method with draws of its own defines its sampler in its module.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from common.errors import InputError


@dataclass
class StepDraws:
    """One step's outcome for each of n sequences."""

    accepted: np.ndarray       # tokens committed, bonus included (>= 1)
    drafted: np.ndarray        # draft positions proposed (sequential draft forwards)
    verify_tokens: np.ndarray  # query tokens in the verify forward, per sequence


def check_prob(value: float, what: str) -> float:
    value = float(value)
    if not (0.0 <= value <= 1.0) or not np.isfinite(value):
        raise InputError(f"{what} must lie in [0, 1], got {value!r}")
    return value


def first_failure(hits: np.ndarray) -> np.ndarray:
    """Per row, the number of leading True values of a (n, g) boolean array."""
    n, g = hits.shape
    if g == 0:
        return np.zeros(n, dtype=np.int64)
    misses = ~hits
    return np.where(misses.any(axis=1), misses.argmax(axis=1), g).astype(np.int64)


class Sampler:
    """The protocol: `draw(rng, n, state)` -> (StepDraws of n sequences, their next state);
    `stream(rng, n_steps, done, state)` -> n_steps consecutive steps of ONE sequence that has
    already taken `done` steps (a stateless sampler's n iid draws; stateful ones override it).
    `fixed_shape`: (draft forwards, verify tokens) when every step has the same, else None."""

    stateful = False
    fixed_shape: tuple[int, int] | None = None

    def initial_state(self, n: int):
        return None

    def draw(self, rng: np.random.Generator, n: int, state=None) -> tuple[StepDraws, Any]:
        raise NotImplementedError

    def stream(self, rng: np.random.Generator, n_steps: int, done: int, state=None) -> tuple[StepDraws, Any]:
        return self.draw(rng, n_steps, state)


class ChainSampler(Sampler):
    """Chain speculation of `gamma` positions, position i accepted independently with beta_i.

    With `alpha_by_position` the i-th draft position uses its own rate; otherwise all use alpha."""

    stateful = False

    def __init__(self, gamma: int, betas: np.ndarray):
        if gamma < 0:
            raise InputError(f"gamma must be >= 0, got {gamma}")
        self.gamma = int(gamma)
        self.betas = np.asarray(betas, dtype=float)[: self.gamma]
        if self.betas.size != self.gamma:
            raise InputError(f"need {self.gamma} per-position acceptance rates, got {self.betas.size}")
        self.iid = bool(self.gamma) and bool(np.all(self.betas == self.betas[0])) and 0 < self.betas[0] < 1
        self.fixed_shape = (self.gamma, self.gamma + 1)

    def draw(self, rng: np.random.Generator, n: int, state=None) -> tuple[StepDraws, None]:
        if self.iid:  # leading accepts of iid positions: a geometric count, capped at gamma
            accepted = np.minimum(rng.geometric(1.0 - self.betas[0], n), self.gamma + 1)
        else:
            accepted = first_failure(rng.random((n, self.gamma)) < self.betas) + 1
        drafted = np.full(n, self.gamma, dtype=np.int64)
        return StepDraws(accepted, drafted, drafted + 1), None


class TreeSampler(Sampler):
    """Multi-candidate tree k1 x ... x kg (MCSD): level i accepted with probability alpha@k_i.

    The verify forward carries every tree node: sum_i prod(k_1..k_i) plus the root token."""

    stateful = False

    def __init__(self, ks: list[int], level_alpha: np.ndarray):
        self.ks = [int(k) for k in ks]
        self.level_alpha = np.asarray(level_alpha, dtype=float)
        self.nodes = int(sum(np.cumprod(self.ks))) if self.ks else 0
        self.fixed_shape = (len(self.ks), self.nodes + 1)

    def draw(self, rng, n, state=None):
        hits = rng.random((n, len(self.ks))) < self.level_alpha
        accepted = first_failure(hits) + 1
        drafted = np.full(n, len(self.ks), dtype=np.int64)
        return StepDraws(accepted, drafted, np.full(n, self.nodes + 1, dtype=np.int64)), None


class MarkovChainSampler(Sampler):
    """Bursty acceptance: a two-state Markov chain over evaluated draft positions.

    p_aa = P(accept | previous evaluated position accepted), p_ra = P(accept | previous rejected).
    The state (last outcome accepted?) carries across steps, per sequence."""

    stateful = True

    def __init__(self, gamma: int, p_aa: float, p_ra: float):
        self.gamma = int(gamma)
        self.p_aa = check_prob(p_aa, "markov p_aa")
        self.p_ra = check_prob(p_ra, "markov p_ra")
        self.fixed_shape = (self.gamma, self.gamma + 1)

    def initial_state(self, n: int) -> np.ndarray:
        return np.ones(n, dtype=bool)

    def draw(self, rng, n, state=None):
        prev = self.initial_state(n) if state is None else np.asarray(state, dtype=bool).copy()
        alive = np.ones(n, dtype=bool)
        n_acc = np.zeros(n, dtype=np.int64)
        u = rng.random((n, self.gamma))
        for i in range(self.gamma):
            hit = u[:, i] < np.where(prev, self.p_aa, self.p_ra)
            prev = np.where(alive, hit, prev)      # only evaluated positions move the chain
            n_acc += alive & hit
            alive &= hit
        drafted = np.full(n, self.gamma, dtype=np.int64)
        return StepDraws(n_acc + 1, drafted, drafted + 1), prev

    def stream(self, rng: np.random.Generator, n_steps: int, done: int = 0, state=None) -> tuple[StepDraws, None]:
        """`n_steps` consecutive steps of one sequence, vectorised through run lengths.

        Accept runs have geometric length (1 - p_aa), reject runs geometric length p_ra; a step
        consumes evaluated positions up to its first reject or `gamma` accepts."""
        g = self.gamma
        if g == 0:
            ones = np.ones(n_steps, dtype=np.int64)
            return StepDraws(ones, ones * 0, ones), None
        m = n_steps + 1  # every (accept run, reject run) pair yields at least one step
        acc_runs = rng.geometric(1 - self.p_aa, m) if self.p_aa < 1 else np.full(m, n_steps * g + 1)
        rej_runs = rng.geometric(self.p_ra, m) if self.p_ra > 0 else np.full(m, n_steps + 1)
        acc_runs = acc_runs.astype(np.int64)
        rej_runs = rej_runs.astype(np.int64)
        if not rng.random() < self.p_aa:  # the chain opens with a reject: an empty accept run
            acc_runs[0] = 0
        # every reject run of length r: first reject closes the step of the preceding accept run,
        # each further reject is a step of its own with 0 accepted
        full = acc_runs // g
        tail = acc_runs % g
        per_run_steps = full + 1 + (rej_runs - 1)
        ends = np.cumsum(per_run_steps)
        cut = int(np.searchsorted(ends, n_steps)) + 1
        full, tail, rej_runs = full[:cut], tail[:cut], rej_runs[:cut]
        counts = np.stack([full, np.ones_like(full), rej_runs - 1], axis=1).ravel()
        values = np.stack(
            [np.full_like(full, g + 1), tail + 1, np.ones_like(full)], axis=1
        ).ravel()
        accepted = np.repeat(values, counts)[:n_steps]
        drafted = np.full(accepted.size, g, dtype=np.int64)
        return StepDraws(accepted.astype(np.int64), drafted, drafted + 1), None


class AutoregressiveSampler(Sampler):
    """Plain decoding: one token per step, no draft."""

    stateful = False
    fixed_shape = (0, 1)

    def draw(self, rng, n, state=None):
        ones = np.ones(n, dtype=np.int64)
        return StepDraws(ones, np.zeros(n, dtype=np.int64), ones), None


def draw_stream(sampler, rng: np.random.Generator, n_tokens: int) -> StepDraws:
    """Steps of one sequence until `n_tokens` are committed; the last step is clipped."""
    if n_tokens < 1:
        raise InputError(f"n_tokens must be >= 1, got {n_tokens}")
    parts: list[StepDraws] = []
    committed, state = 0, None
    while committed < n_tokens:
        m = max(16, int((n_tokens - committed) / 1.5) + 16)
        draws, state = sampler.stream(rng, m, sum(p.accepted.size for p in parts), state)
        parts.append(draws)
        committed += int(draws.accepted.sum())
    accepted = np.concatenate([p.accepted for p in parts])
    ends = np.cumsum(accepted)
    n_steps = int(np.searchsorted(ends, n_tokens)) + 1
    accepted = accepted[:n_steps].copy()
    accepted[-1] -= int(ends[n_steps - 1]) - n_tokens
    return StepDraws(
        accepted,
        np.concatenate([p.drafted for p in parts])[:n_steps],
        np.concatenate([p.verify_tokens for p in parts])[:n_steps],
    )
