"""A method's whole search space on one Profile, scored by the closed forms in one executor task.

`score_space(SpaceTask)` builds each setup's space (`spec.space`), scores it CHUNK_ROWS at a time
and ranks the lot (`sweep.ranking`) in the worker: building and ranking are a third of the scoring
work, and done in the parent they left the workers idle. A task also answers at the sweep's other
batch sizes (`--batch-sizes`): tokens per step and a step's forwards do not depend on the batch
(`scoring.predicted`), only the step's price does (`scoring.at_batch`), so each other batch costs a
pricing, and of it the worker keeps only what serving reads, the best configuration per candidate
group (`deployments.CANDIDATE_KEYS`). Scored again from the start at each batch and sent back whole,
the default sweep's tables took 5 s a batch.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

import methods
from methods.spec import MethodSpec, Setup
from profiles.latency import PastMeasuredBatch
from profiles.profile import Profile
from sweep import deployments, ranking, scoring
from sweep.estimate import CHUNK_ROWS


@dataclass
class SpaceTask:
    """One executor task: every configuration of one method on one profile."""

    profile: Profile
    method: str
    bases: list[dict[str, Any]]      # its setups (`Setup.base`)
    setting: scoring.Setting
    space: dict[str, Any]            # the sweep options the method's space takes (`space_options`)
    replayed: bool = False           # --token-trace: the part of the space replay scores
    other_batches: tuple[int, ...] = ()    # batch sizes answered with the best per candidate group only


@dataclass
class Unpriced:
    """A task whose Profile measured no latency at a batch (`profiles.latency.PastMeasuredBatch`)."""

    profile: str
    reason: str


@dataclass
class Scored:
    """What a SpaceTask gives back: its configurations scored and ranked at the task's batch, and at
    each of its other batches the best per candidate group (`best_per_group`); Unpriced where a
    latency table of the Profile stops short of that batch."""

    table: pd.DataFrame | Unpriced
    best_at: dict[int, pd.DataFrame | Unpriced] = field(default_factory=dict)


def built_space(spec: MethodSpec, setup: Setup, options: dict[str, Any], replayed: bool) -> pd.DataFrame:
    space = spec.space(setup, **options)
    return spec.replayed_space(space) if replayed else space


def best_per_group(frame: pd.DataFrame) -> pd.DataFrame:
    """The best configuration of each candidate group (`deployments.CANDIDATE_KEYS`) of `frame`, in
    the sweep's one order: the rows serving starts from at a batch."""
    return ranking.best_of(frame, deployments.CANDIDATE_KEYS)


def score_space(task: SpaceTask) -> Scored:
    """Executor entry point: the task's configurations scored and ranked (one profile's rows, so no
    profile key to sort by), in the order `rank_tables` keeps, and its other batches' best rows.
    The best of each chunk's best is the best of the whole: `ranking` sorts stably, chunks in order."""
    spec = methods.get(task.method)
    batches = [task.setting.batch, *(b for b in task.other_batches if b != task.setting.batch)]
    parts: dict[int, list[pd.DataFrame]] = {b: [] for b in batches}
    unpriced: dict[int, Unpriced] = {}
    for base in task.bases:
        setup = scoring.setup_of(task.profile, base)
        for chunk in _chunks(built_space(spec, setup, task.space, task.replayed), CHUNK_ROWS):
            priced = [b for b in batches if b not in unpriced]
            if not priced:
                break
            part = scoring.predicted(setup, task.method, chunk, task.setting)
            for batch in priced:
                try:
                    scored = scoring.at_batch(part, batch)
                except PastMeasuredBatch as exc:
                    unpriced[batch] = Unpriced(task.profile.name, exc.short)
                    continue
                parts[batch].append(scored if batch == task.setting.batch else best_per_group(scored))
    first, others = batches[0], batches[1:]
    table = unpriced.get(first) or ranking.ranked(pd.concat(parts[first], ignore_index=True), "speedup")
    return Scored(table, {b: unpriced.get(b) or best_per_group(pd.concat(parts[b], ignore_index=True))
                          for b in others})


def rank_tables(scored: list[pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """One table per method: its profiles' ranked frames (`score_space`) in profile order, each
    configuration's `rank` within its profile; the same rows and order as ranking the whole table
    by profile at once (`sweep.ranking` sorts stably, each profile's rows apart from the others')."""
    by_method: dict[str, list[pd.DataFrame]] = {}
    for frame in scored:
        by_method.setdefault(str(frame["method"].iloc[0]), []).append(frame)
    tables = {}
    for method in methods.names():
        if method not in by_method:
            continue
        frames = sorted(by_method[method], key=lambda f: str(f["profile"].iloc[0]))
        frame = pd.concat(frames, ignore_index=True)
        frame["rank"] = np.concatenate([np.arange(1, len(f) + 1) for f in frames])   # a frame is one profile's
        tables[method] = frame
    return tables


def _chunks(frame: pd.DataFrame, rows: int) -> list[pd.DataFrame]:
    return [frame.iloc[i:i + rows].reset_index(drop=True) for i in range(0, len(frame), rows)] or [frame]
