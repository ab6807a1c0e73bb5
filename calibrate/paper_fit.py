"""Fitting a paper's Profiles to every published number that constrains a latency, all tables at once.

A paper's latency side is a few named parameters (`Param`: efficiencies, a draft model's seconds,
per-step overheads); `PaperModel.build(values)` turns them into the paper's Profiles, and each
published number that a latency decides is a `Cell` whose `predict(profiles)` recomputes it from
those Profiles alone: a speedup from the published tokens per step (tau, CR, S) priced through the
method's step shape (`costmodel.step`, as the sweep prices it), a latency in seconds, a
draft/target ratio. `fit` solves one bounded least squares on the log ratio predicted/published
over all cells of the paper, with a weak pull towards each parameter's prior so that a parameter
no remaining cell pins stays at its prior. `leave_one_table_out` refits without each table in turn
and predicts that table's cells: the error to expect from a number the fit has not seen.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np

PRIOR_WEIGHT = 1e-3       # residual weight of (value - prior) / scale: a tie-breaker, not a constraint


@dataclass(frozen=True)
class Param:
    """One latency parameter: prior (initial) value, bounds, scale of the prior pull, unit."""

    name: str
    prior: float
    low: float
    high: float
    scale: float
    unit: str = "s"
    what: str = ""


@dataclass(frozen=True)
class Cell:
    """One published number and how the paper's Profiles predict it."""

    paper: str
    table: str
    row: str
    column: str
    published: float
    predict: Callable[[dict], float] = field(compare=False, repr=False)
    kind: str = "speedup"          # speedup | seconds | ratio
    note: str = ""


@dataclass(frozen=True)
class PaperModel:
    """A paper's latency parameters, its Profiles as a function of them, and its cells."""

    paper: str
    params: tuple[Param, ...]
    build: Callable[[dict[str, float]], list] = field(compare=False)
    cells: Callable[[], list[Cell]] = field(compare=False)

    @property
    def priors(self) -> dict[str, float]:
        return {p.name: p.prior for p in self.params}


@dataclass(frozen=True)
class Fit:
    values: dict[str, float]
    tables: tuple[str, ...]
    n_cells: int
    rms_log_error: float
    at_bound: tuple[str, ...]

    def describe(self, params: tuple[Param, ...]) -> list[str]:
        units = {p.name: p.unit for p in params}
        return [f"{k} = {_show(v, units[k])}" for k, v in self.values.items()]


def _show(value: float, unit: str) -> str:
    return f"{value * 1e3:.4g} ms" if unit == "s" else f"{value:.4g}{(' ' + unit) if unit else ''}"


def by_name(profiles: list) -> dict:
    return {p.name: p for p in profiles}


def predict(cells: list[Cell], profiles: dict) -> np.ndarray:
    return np.array([float(c.predict(profiles)) for c in cells])


def fit(model: PaperModel, cells: list[Cell] | None = None) -> Fit:
    """Bounded least squares of log(predicted / published) over `cells` (default: all of the paper's)."""
    from scipy.optimize import least_squares

    cells = model.cells() if cells is None else cells
    params = model.params
    published = np.array([c.published for c in cells])
    scale = np.array([p.scale for p in params])
    x0 = np.array([p.prior for p in params]) / scale
    low, high = np.array([p.low for p in params]) / scale, np.array([p.high for p in params]) / scale

    def values_of(x) -> dict[str, float]:
        return {p.name: float(v) for p, v in zip(params, x * scale)}

    def residuals(x):
        predicted = predict(cells, by_name(model.build(values_of(x))))
        return np.concatenate([np.log(np.maximum(predicted, 1e-12) / published), PRIOR_WEIGHT * (x - x0)])

    start = np.clip(x0, low + 1e-9 * np.maximum(1.0, np.abs(low)), high - 1e-9 * np.maximum(1.0, np.abs(high)))
    solution = least_squares(residuals, start, bounds=(low, high), x_scale=1.0, diff_step=1e-4, xtol=1e-8,
                             ftol=1e-8, max_nfev=60 * (len(params) + 1))
    values = values_of(solution.x)
    err = solution.fun[:len(cells)]
    at_bound = tuple(p.name for p, v in zip(params, solution.x)
                     if np.isclose(v, p.low / p.scale, rtol=1e-6, atol=1e-9)
                     or np.isclose(v, p.high / p.scale, rtol=1e-6, atol=1e-9))
    return Fit(values, tuple(dict.fromkeys(c.table for c in cells)), len(cells),
               float(np.sqrt(np.mean(err ** 2))), at_bound)


def leave_one_table_out(model: PaperModel) -> list[dict]:
    """For each table T with cells: refit on the other tables, predict T's cells. One dict per cell
    (paper, table, row, column, kind, published, predicted, rel_error)."""
    cells = model.cells()
    rows = []
    for table in dict.fromkeys(c.table for c in cells):
        held = [c for c in cells if c.table == table]
        kept = [c for c in cells if c.table != table]
        values = fit(model, kept).values if kept else model.priors
        predicted = predict(held, by_name(model.build(values)))
        rows += [dict(paper=c.paper, table=c.table, row=c.row, column=c.column, kind=c.kind,
                      published=c.published, predicted=float(p), rel_error=float(p) / c.published - 1.0)
                 for c, p in zip(held, predicted)]
    return rows


def heldout_summary(rows: list[dict]) -> dict:
    """The leave-one-table-out error of a paper's speedup cells (what a Profile stores as its
    held-out error); all cells when the paper has no speedup cell."""
    chosen = [r for r in rows if r["kind"] == "speedup"] or rows
    err = np.abs([r["rel_error"] for r in chosen])
    return {"scheme": "leave one published table out: refit the latency parameters without it, predict its cells "
                      "(calibrate.paper_fit)",
            "cells": int(len(err)), "speedup_error_median": float(np.median(err)),
            "speedup_error_p90": float(np.quantile(err, 0.9)), "speedup_error_max": float(err.max())}


# ---- pricing a cell through the one step-cost model ----------------------------------------------------

def step_ratio(profile, method: str, config, *, drafter: str | None = None, acceptance: str | None = None,
               ctx: float, reach=None) -> float:
    """Seconds of one step of `config` over one plain decoding step, both as the sweep prices them
    (the method's shape with the Profile's step calibration folded in, `methods.spec.plain_shape`,
    `costmodel.step.step_seconds`) at context `ctx`; `reach` overrides the probability that each
    draft forward runs."""
    from costmodel.step import step_seconds
    from methods.spec import plain_shape

    shape = profile.step_calibration(method).apply(_raw_shape(profile, method, config, drafter, acceptance))
    if reach is not None:
        shape = replace(shape, draft_reach=np.atleast_2d(np.asarray(reach, dtype=float)))
    plain = plain_shape(profile)
    return float(step_seconds(profile.seconds, shape, ctx)[0]) / float(step_seconds(profile.seconds, plain, ctx)[0])


_SHAPES: dict = {}


def _raw_shape(profile, method, config, drafter, acceptance):
    """`spec.step_shape` of one configuration; a fit rebuilds the Profiles with new latencies many
    times, while a shape depends only on the drafter's entry and the acceptance entry, which it keeps
    (both are part of the key)."""
    import methods
    from methods.spec import Setup

    key = (profile.name, method, str(config), drafter, repr(profile.drafters.get(drafter)), acceptance,
           repr(profile.acceptance.get(acceptance)))
    if key not in _SHAPES:
        spec = methods.get(method)
        frame = spec.frame_of([spec.parse(config)])
        _SHAPES[key] = spec.step_shape(Setup(profile, drafter, acceptance), frame)
    return _SHAPES[key]


def speedup_cell(paper: str, table: str, row: str, column: str, published: float, tokens: float, profile: str,
                 method: str, config, *, ctx: float, drafter: str | None = None, acceptance: str | None = None,
                 reach=None, note: str = "") -> Cell:
    """A published speedup predicted as tokens per step (published) / step_ratio on `profile`."""
    def predict_one(profiles):
        return tokens / step_ratio(profiles[profile], method, config, drafter=drafter, acceptance=acceptance,
                                   ctx=ctx, reach=reach)
    return Cell(paper, table, row, column, published, predict_one, "speedup", note)


def seconds_cell(paper: str, table: str, row: str, column: str, published_s: float, profile: str, model: str,
                 n_tokens: float = 1, ctx: float = 0.0, batch: int = 1, note: str = "") -> Cell:
    """A published forward latency (seconds) of `model` on `profile`."""
    return Cell(paper, table, row, column, published_s,
                lambda profiles: float(profiles[profile].seconds(model, n_tokens, ctx, batch)), "seconds", note)
