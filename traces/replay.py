"""Replaying recorded greedy output: every method whose steps a TokenTrace decides, by name.

A method says how its steps replay (`MethodSpec.replay_rules`, on the primitives of
`methods.replay`); this module runs any of them over a `TokenTable`: `accept_lengths` scores one
configuration at every position, `walk` follows the steps of many configurations together from
every prompt's start (the next step starts at p + accepted), `replay_steps` lists one
configuration's steps and `replay_summary` gives tokens per step.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np
import pandas as pd

import methods
from common.errors import InputError
from methods.replay import TokenTable


def accept_lengths(table: TokenTable, method: str, config: Any) -> np.ndarray:
    """(N,) accepted length of a step of `method`/`config` (a config, mapping or label) that starts
    at each position; the method module says how its steps replay (`MethodSpec.replay_rules`)."""
    spec = methods.get(method)
    lengths = spec.replay_lengths(table, spec.parse(config))
    if lengths is None:
        raise InputError(f"method {method} cannot be replayed from a TokenTrace (replayable: {', '.join(replayable())})")
    return lengths


def replayable() -> list[str]:
    """Methods whose greedy steps a TokenTrace decides."""
    return [s.name for s in methods.specs() if s.replayable]


# ----------------------------------------------------------------------------- step walks

@dataclass(frozen=True)
class Walk:
    """The steps of one or more configurations over every prompt of a TokenTable."""

    steps: np.ndarray        # (C,) total steps per configuration
    tokens: int              # tokens in the table (every configuration commits them all)
    histogram: np.ndarray    # (C, max_len + 1) steps by accepted length

    @property
    def mean_accepted(self) -> np.ndarray:
        return self.tokens / self.steps


def walk(table: TokenTable, lengths: np.ndarray) -> Walk:
    """Follow the step chains p -> p + lengths[p] from every prompt start, for each row of
    `lengths` ((N,) or (C, N) from `accept_lengths`) at once."""
    lens = np.atleast_2d(np.asarray(lengths, dtype=np.int64))
    if lens.shape[1] != table.size or np.any(lens < 1):
        raise InputError("step lengths must be >= 1 and one per token-table position")
    n_configs = lens.shape[0]
    max_len = int(lens.max())
    starts = np.broadcast_to(table.offsets[:-1], (n_configs, len(table.prompt_ids))).copy()
    ends = np.broadcast_to(table.offsets[1:], starts.shape)
    rows = np.broadcast_to(np.arange(n_configs)[:, None], starts.shape)
    histogram = np.zeros((n_configs, max_len + 1), dtype=np.int64)
    active = starts < ends
    width = max_len + 1
    while active.any():
        r, c = rows[active], starts[active]
        taken = lens[r, c]
        histogram += np.bincount(r * width + taken, minlength=n_configs * width).reshape(n_configs, width)
        starts[active] = c + taken
        active = starts < ends
    steps = histogram.sum(axis=1)
    return Walk(steps=steps, tokens=table.size, histogram=histogram)


def replay_steps(table: TokenTable, method: str, config: Any) -> pd.DataFrame:
    """Every replayed step of one configuration: prompt_id, step, pos (committed output tokens
    before the step) and accepted, in StepTrace order."""
    return steps_of(table, accept_lengths(table, method, config))


def steps_of(table: TokenTable, lengths: np.ndarray) -> pd.DataFrame:
    """The steps that (N,) accepted lengths take from every prompt's start (`replay_steps`' rows)."""
    records: list[tuple[str, int, int, int]] = []
    for index, prompt_id in enumerate(table.prompt_ids):
        pos, end, base, step = int(table.offsets[index]), int(table.offsets[index + 1]), int(table.offsets[index]), 0
        while pos < end:
            records.append((prompt_id, step, pos - base, int(lengths[pos])))
            pos += int(lengths[pos])
            step += 1
    return pd.DataFrame.from_records(records, columns=["prompt_id", "step", "pos", "accepted"])


def replay_summary(table: TokenTable, method: str, configs: Iterable[Any]) -> pd.DataFrame:
    """Mean accepted length (tokens per step) of many configurations of one method."""
    spec = methods.get(method)
    parsed = [spec.parse(c) for c in configs]
    if not parsed:
        raise InputError("replay_summary needs at least one configuration")
    lengths = np.stack([accept_lengths(table, method, c) for c in parsed])
    result = walk(table, lengths)
    return pd.DataFrame({
        "method": method,
        "config": [c.label for c in parsed],
        "steps": result.steps,
        "tokens": result.tokens,
        "mean_accepted": result.mean_accepted,
    })
