"""How one latency point is timed and cleaned, for every timing CLI (`traces.timing`,
`traces.drafter_timing`, the campaigns): the hardware's name, a median of timed runs (CUDA events
on a GPU, perf_counter on a CPU), points that stand out from their neighbours timed again,
and a point timed in several passes reduced to the lower median of their medians.
"""
from __future__ import annotations

import statistics
import time
from typing import Callable

import numpy as np
import pandas as pd
import torch


def hardware_name(device: torch.device) -> str:
    """A hardware name in the costmodel's vocabulary (H100, H200, A100-80G, ...; CPU)."""
    if device.type != "cuda":
        return "CPU"
    name = torch.cuda.get_device_name(device).upper()
    for known in ("H200", "H100", "H800", "A6000", "V100", "L40S", "L4", "A10"):
        if known in name:
            return known
    if "A100" in name:
        gib = torch.cuda.get_device_properties(device).total_memory / 2**30
        return "A100-80G" if gib > 60 else "A100-40G"
    return name.replace("NVIDIA ", "").replace(" ", "-")


class Timer:
    """Median seconds of a callable: warm-up runs, then timed repeats (CUDA events on a GPU)."""

    def __init__(self, device: torch.device, warmup: int, repeats: int, min_repeats: int | None = None,
                 point_seconds: float = float("inf")):
        self.cuda = device.type == "cuda"
        self.warmup, self.repeats = warmup, repeats
        self.min_repeats = repeats if min_repeats is None else min(min_repeats, repeats)
        self.point_seconds = point_seconds

    def median(self, run: Callable[[], None], reset: Callable[[], None]) -> tuple[float, int]:
        """(median seconds, timed runs)."""
        begin = time.perf_counter()
        for _ in range(self.warmup):
            run()
            reset()
        samples: list[float] = []
        while len(samples) < self.repeats:
            if len(samples) >= self.min_repeats and time.perf_counter() - begin > self.point_seconds:
                break
            if self.cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                run()
                end.record()
                end.synchronize()
                samples.append(start.elapsed_time(end) / 1000.0)
            else:
                start = time.perf_counter()
                run()
                samples.append(time.perf_counter() - start)
            reset()
            if self.cuda:
                torch.cuda.synchronize()
        return statistics.median(samples), len(samples)


RISE, JUMP, STALL, ROUNDS = 1.25, 2.5, 1.15, 3   # outlier rules of `retime_outliers`


def outliers(rows: list[dict]) -> list[int]:
    """Indices of rows that stand out from their neighbours; on a shared machine such points are
    stalls, not the model. Along context (same tokens and batch) a forward should not take RISE times
    longer than with more context, nor JUMP times longer than with the next smaller context. Across
    every axis (`_stalled_shapes`), a forward that takes longer than one doing as much work or more
    is a stall where its shape does not do so at its other contexts."""
    by_key: dict[tuple[int, int], list[int]] = {}
    for i, r in enumerate(rows):
        by_key.setdefault((r["n_tokens"], r["batch"]), []).append(i)
    found = set(_stalled_shapes(rows))
    for idx in by_key.values():
        idx = sorted(idx, key=lambda i: rows[i]["ctx_len"])
        secs = [rows[i]["seconds"] for i in idx]
        for j, i in enumerate(idx):
            larger = min(secs[j + 1:], default=float("inf"))
            if secs[j] > RISE * larger or (j > 0 and secs[j] > JUMP * secs[j - 1]):
                found.add(i)
    return sorted(found)


def _stalled_shapes(rows: list[dict]) -> list[int]:
    """Rows whose excess over the fastest forward doing at least as much work in every axis (tokens,
    context, rows) is STALL times the least excess of their (tokens, batch) shape over its contexts.
    A CPU kernel's choice for a shape can make it slower than a larger one (7 tokens slower than 8),
    but then at every context; a slow spell of the machine hits one or two contexts."""
    if not rows:
        return []
    n, ctx, batch, seconds = (np.array([r[k] for r in rows], float)
                              for k in ("n_tokens", "ctx_len", "batch", "seconds"))
    more = (n[None, :] >= n[:, None]) & (ctx[None, :] >= ctx[:, None]) & (batch[None, :] >= batch[:, None])
    np.fill_diagonal(more, False)
    fastest_larger = np.where(more, seconds[None, :], np.inf).min(axis=1)
    excess = np.maximum(seconds / fastest_larger, 1.0)
    least = pd.Series(excess).groupby([n, batch]).transform("min").to_numpy()
    return [int(i) for i in np.flatnonzero(excess > STALL * least)]


def retime_outliers(rows: list[dict], point: Callable[[int, int, int], tuple[float, int]]) -> int:
    """Time the `outliers` again (up to ROUNDS rounds), keeping the faster median of each point
    (noise on a shared machine only adds time); the number of points re-timed."""
    retimed = set()
    for _ in range(ROUNDS):
        todo = outliers(rows)
        if not todo:
            break
        for i in todo:
            r = rows[i]
            seconds, repeats = point(r["n_tokens"], r["ctx_len"], r["batch"])
            if seconds < r["seconds"]:
                r["seconds"], r["repeats"] = seconds, repeats
            retimed.add(i)
    return len(retimed)


def across_rounds(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per point from the rounds' rows: the lower median of their medians, their timed runs
    summed (`--rounds`: a point timed in several passes over the grid, minutes apart, so that a slow
    spell of a shared machine moves one of its samples, not the point; the lower median because
    noise only adds time, and of two passes the mean would carry half a spell)."""
    keys = [c for c in frame.columns if c not in ("seconds", "repeats")]
    return (frame.groupby(keys, sort=False, dropna=False)
            .agg(seconds=("seconds", _lower_median), repeats=("repeats", "sum")).reset_index()[list(frame.columns)])


def _lower_median(values: pd.Series) -> float:
    return float(statistics.median_low(values))
