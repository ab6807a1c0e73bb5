"""Repairing an earlier latency grid (`traces.timing --retime TRACE`): only its points that stand out from
their neighbours (`traces.timer.outliers`) are timed again, keeping the faster median, and every other
point is kept as it was measured.

A grid timed over half an hour on a shared machine can carry a slow spell in one or two points, which a
Profile then prices as the machine's cost of that shape. Timing the whole grid again costs the half hour
and brings spells of its own; timing the few outliers costs seconds. It is only sound on the machine that
timed the grid, with the options it was timed with, so both are checked against the trace's metadata.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from common.errors import InputError
from profiles.machine import Machine, recorded_in
from traces import schema

# Options a grid is timed with that change what a point costs, beside the machine and its threads (compared as
# `Machine.differences`): (the trace metadata's key, the CLI option)
TIMED_WITH = (("cache", "--cache"), ("linear", "--linear"), ("engine", "--engine"))
GRID_AXES = ("tokens", "ctx", "batch")


@dataclass(frozen=True)
class EarlierGrid:
    """An earlier LatencyTrace's points by unit ((role, model) -> {(n_tokens, ctx_len, batch): (seconds,
    repeats)}), its grid axes, and where it came from."""

    path: str
    axes: tuple[tuple[int, ...], ...]
    points: dict[tuple[str, str], dict[tuple[int, int, int], tuple[float, int]]]

    @classmethod
    def read(cls, path: str, here: Machine, options: dict[str, Any]) -> "EarlierGrid":
        """The trace at `path`, refused in one line when it was timed on another machine than `here`, or
        with other `options` (TIMED_WITH keys) than this command's."""
        frame, meta = schema.read_trace(path, kind="latency")
        timed_on = recorded_in(meta.extra, path, Machine())
        if not timed_on.measured:
            raise InputError(f"--retime {path}: the trace does not record the machine that timed it; time the grid "
                             "again instead")
        differ = timed_on.differences(here)
        if differ:
            raise InputError(f"--retime {path}: timed on {timed_on.describe()}, this is {here.describe()} "
                             f"({'; '.join(differ)}): re-time a grid on the machine that timed it")
        for key, option in TIMED_WITH:
            if key in meta.extra and meta.extra[key] != options[key]:
                raise InputError(f"--retime {path}: timed with {option} {meta.extra[key]}, this command has "
                                 f"{option} {options[key]}; give the options it was timed with")
        forwards = frame[frame["role"].isin(["target", "draft"])]      # heads are timed eager in every mode
        if "mode" in forwards and (forwards["mode"] != options["mode"]).any():
            raise InputError(f"--retime {path}: timed in mode {', '.join(sorted(set(forwards['mode'])))}, this "
                             f"command has --mode {options['mode']}")
        points: dict[tuple[str, str], dict[tuple[int, int, int], tuple[float, int]]] = {}
        for r in frame.itertuples(index=False):
            points.setdefault((r.role, r.model), {})[(int(r.n_tokens), int(r.ctx_len), int(r.batch))] = (
                float(r.seconds), int(r.repeats))
        axes = tuple(tuple(int(v) for v in meta.extra.get(a, ())) for a in GRID_AXES)
        return cls(path=str(path), axes=axes, points=points)

    def unit(self, role: str, model: str) -> dict[tuple[int, int, int], tuple[float, int]]:
        """The points of one unit; a unit the trace does not hold is refused (it would be timed whole)."""
        if (role, model) not in self.points:
            held = ", ".join(f"{r}/{m}" for r, m in self.points)
            raise InputError(f"--retime {self.path}: holds no {role} rows of {model} (it holds {held})")
        return self.points[(role, model)]

    def retimed(self, frame: pd.DataFrame) -> int:
        """How many of `frame`'s points (the repaired grid) differ from this trace's."""
        return sum(self.points.get((r.role, r.model), {}).get((int(r.n_tokens), int(r.ctx_len), int(r.batch)),
                                                               (None,))[0] != float(r.seconds)
                   for r in frame.itertuples(index=False))
