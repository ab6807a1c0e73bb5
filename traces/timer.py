"""How one latency point is timed and cleaned, for every timing CLI (`traces.timing`,
`traces.drafter_timing`, the campaigns): the hardware's name, a median of timed runs (CUDA events
on a GPU, perf_counter on a CPU), points that stand out from their context neighbours timed again,
and a point timed in several passes reduced to the median of their medians.
"""
from __future__ import annotations

import statistics
import time
from typing import Callable

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


RISE, JUMP, ROUNDS = 1.25, 2.5, 3   # outlier rules of `retime_outliers`


def outliers(rows: list[dict]) -> list[int]:
    """Indices of rows that stand out from their context neighbours (same tokens and batch): a
    forward should not take RISE times longer than with more context, nor JUMP times longer than
    with the next smaller context. On a shared machine such points are stalls, not the model."""
    by_key: dict[tuple[int, int], list[int]] = {}
    for i, r in enumerate(rows):
        by_key.setdefault((r["n_tokens"], r["batch"]), []).append(i)
    found = []
    for idx in by_key.values():
        idx = sorted(idx, key=lambda i: rows[i]["ctx_len"])
        secs = [rows[i]["seconds"] for i in idx]
        for j, i in enumerate(idx):
            larger = min(secs[j + 1:], default=float("inf"))
            if secs[j] > RISE * larger or (j > 0 and secs[j] > JUMP * secs[j - 1]):
                found.append(i)
    return found


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
    """One row per point from the rounds' rows: the median of their medians, their timed runs summed
    (`--rounds`: a point timed in several passes over the grid, minutes apart, so that a slow
    spell of a shared machine moves one of its samples, not the point)."""
    keys = [c for c in frame.columns if c not in ("seconds", "repeats")]
    return (frame.groupby(keys, sort=False, dropna=False)
            .agg(seconds=("seconds", "median"), repeats=("repeats", "sum")).reset_index()[list(frame.columns)])
