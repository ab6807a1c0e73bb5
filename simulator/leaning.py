"""Requests that draft better or worse than the average: each request's own acceptance level.

A sampler (`methods.draws`) draws every row from the dataset's one acceptance law, so every request
gains the same tokens per step on average. Prompts differ: the Profile's `prompt_spread` (per method
and dataset, `profiles.parts.Workload`) is the standard deviation over prompts of a prompt's tokens
per step T_p, relative to the gain T - 1. Where requests start together and none waits to take a
finished row's place, the batch lasts as long as its slowest request, so how far requests differ, and
not only the mean, sets the throughput. Part of the measured spread is the steps' own noise: a prompt
of L tokens takes about L / T steps, and its mean over them strays by sd(a) / sqrt(L / T) even where
every prompt drafts alike, which the sampler's per-step draws already give each request. Only the
rest, spread^2 (T - 1)^2 - var(a) T / L, is a request's own level (none where the noise covers it).

Without knowing the method's law, a request leans: with `lean` w in [-1, 1] it takes, each step,
the better of two draws (the worse where w < 0) with probability |w|, and the first draw otherwise.
Its mean tokens per step is then T + w * g, g = E|a - b| / 2 over two draws (the same g either way),
so leanings of standard deviation (that level's standard deviation) / g give it, the mean kept where
the leanings average 0. A stateful sampler (the bursty Markov chain, prompt lookup's and Lookahead's
match state) is left as it is: its per-sequence state already carries how long a sequence keeps
drafting well or badly, and leaning it too would count that spread twice.
"""
from __future__ import annotations

import numpy as np

from methods.draws import StepDraws

PAIRS = 4096        # draws that estimate T and g once per run


def leanings(sampler, spread: float, n: int, rng: np.random.Generator,
             spread_tokens: float | None = None) -> np.ndarray | None:
    """Per request its lean in [-1, 1] (normal around 0, clipped), so that its own level of tokens per
    step spreads over requests as a `spread` measured on prompts of `spread_tokens` tokens says, the
    steps' own noise in it taken out (module docstring; None: none is); None where nothing leans
    (spread 0, a stateful sampler, a step that never gains, noise that covers the spread)."""
    if spread <= 0 or sampler.stateful:
        return None
    first, _ = sampler.draw(rng, PAIRS)
    second, _ = sampler.draw(rng, PAIRS)
    tokens = np.r_[first.accepted, second.accepted].astype(float)
    half_gap = float(np.abs(first.accepted - second.accepted).mean()) / 2.0
    if half_gap == 0 or tokens.mean() <= 1.0:
        return None
    noise = tokens.var() * tokens.mean() / spread_tokens if spread_tokens else 0.0
    level = (spread * (tokens.mean() - 1.0)) ** 2 - noise
    if level <= 0:
        return None
    return np.clip(rng.normal(0.0, np.sqrt(level) / half_gap, n), -1.0, 1.0)


def draw_leaning(sampler, rng: np.random.Generator, lean: np.ndarray) -> StepDraws:
    """One step of len(lean) rows of a stateless sampler, each row's draw chosen by its lean."""
    n = lean.size
    draws, _ = sampler.draw(rng, 2 * n)
    a, b = np.arange(n), np.arange(n, 2 * n)
    better = np.where(draws.accepted[b] > draws.accepted[a], b, a)
    worse = np.where(draws.accepted[b] < draws.accepted[a], b, a)
    leans = rng.random(n) < np.abs(lean)
    pick = np.where(leans, np.where(lean > 0, better, worse), a)
    return StepDraws(draws.accepted[pick], draws.drafted[pick], draws.verify_tokens[pick])


def profile_spread(profile, dataset: str | None, method: str) -> dict:
    """The `Workload` fields (`acceptance_spread`, `spread_tokens`) of a Profile's prompt spread of
    `method` on `dataset` and the new tokens its prompts decoded; no spread where it recorded none."""
    found = profile.prompt_spread(dataset, method)
    if found is None:
        return {"acceptance_spread": 0.0, "spread_tokens": None}
    return {"acceptance_spread": found[0], "spread_tokens": profile.workload_new_tokens(dataset)}
