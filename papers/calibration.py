"""Fitting a paper's Profiles to every published number that constrains a latency, all tables at once.

A paper's latency side is a few named parameters (`Param`: efficiencies, a draft model's seconds,
per-step overheads); `PaperModel.build(values)` turns them into the paper's Profiles, and each
published number that a latency decides is a `Cell` whose `predict(profiles)` recomputes it from
those Profiles alone: a speedup from the published tokens per step (tau, CR, S) priced through the
method's step shape (`costmodel.step`, as the sweep prices it), a latency in seconds, a
draft/target ratio. `fit` solves one bounded least squares on the log ratio predicted/published
over all cells of the paper, with a weak pull towards each parameter's prior so that a parameter
no remaining cell pins stays at its prior. A parameter's bounds are what the hardware physically
allows (an efficiency at most 1, an overhead no larger than a forward): a fit that lands on one is
a finding, which `warnings` names. `leave_one_out` refits without each table (or each target model
size) in turn and predicts its cells: the error to expect from a number the fit has not seen, and
from a model the fit has not seen.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np
from costmodel.step import step_seconds
from methods.spec import plain_shape, Setup
import methods

PRIOR_WEIGHT = 1e-4       # residual weight of (value - prior) / scale: a tie-breaker, not a constraint
AT_BOUND = 1e-3           # a value within this share of its range from a bound is on it
NEAR_BOUND = 0.02         # ... and within this share it presses against it (a note, not a warning)
# the held-out errors the issue asks of predictions (median, worst), per kind of published number
TARGETS = {"speedup": (0.03, 0.08), "tau": (0.015, 0.05)}
SCHEMES = {"table": "leave one published table out: refit without it, predict its cells (papers.calibration)",
           "size": "leave one target model size out: refit without its cells, predict them from the other sizes "
                   "(papers.calibration)"}


@dataclass(frozen=True)
class Param:
    """One parameter: prior (initial) value, bounds (what is physically possible, `why`), scale of
    the prior pull, unit."""

    name: str
    prior: float
    low: float
    high: float
    scale: float
    unit: str = "s"
    what: str = ""
    why: str = ""


@dataclass(frozen=True)
class Cell:
    """One published number and how the paper's Profiles predict it."""

    paper: str
    table: str
    row: str
    column: str
    published: float
    predict: Callable[[dict], float] = field(compare=False, repr=False)
    kind: str = "speedup"          # speedup | tau | seconds | ratio
    note: str = ""
    size: str = ""                 # the target model it measures (leave one model size out)


@dataclass(frozen=True)
class PaperModel:
    """A paper's parameters, its Profiles as a function of them, and its cells. `fixed`: terms of
    the model held at a value instead of fitted ({name: (value, why)}), such as an overhead a fit put
    on the floor of its range because the paper's numbers need none."""

    paper: str
    params: tuple[Param, ...]
    build_profiles: Callable[[dict[str, float]], list] = field(compare=False)
    cells: Callable[[], list[Cell]] = field(compare=False)
    fixed: dict[str, tuple[float, str]] = field(default_factory=dict, compare=False)

    @property
    def priors(self) -> dict[str, float]:
        return {p.name: p.prior for p in self.params}

    def build(self, values: dict[str, float]) -> list:
        """The paper's Profiles at the fitted `values` (the fixed terms added)."""
        return self.build_profiles({**{k: v for k, (v, _) in self.fixed.items()}, **values})


@dataclass(frozen=True)
class Fit:
    values: dict[str, float]
    tables: tuple[str, ...]
    n_cells: int
    rms_log_error: float
    at_bound: tuple[str, ...]
    unpinned: tuple[str, ...] = ()       # parameters no cell moves at the solution: their prior stands

    def describe(self, params: tuple[Param, ...]) -> list[str]:
        units = {p.name: p.unit for p in params}
        return [f"{k} = {_show(v, units[k])}" for k, v in self.values.items()]


def _show(value: float, unit: str) -> str:
    return f"{value * 1e3:.4g} ms" if unit == "s" else f"{value:.4g}{(' ' + unit) if unit else ''}"


def by_name(profiles: list) -> dict:
    return {p.name: p for p in profiles}


def predict(cells: list[Cell], profiles: dict) -> np.ndarray:
    return np.array([float(c.predict(profiles)) for c in cells])


def fit(model: PaperModel, cells: list[Cell] | None = None, start: dict[str, float] | None = None) -> Fit:
    """Bounded least squares of log(predicted / published) over `cells` (default: all of the paper's),
    from `start` (default: the priors, which also anchor the fit). Where the cells leave a valley flat
    the optimum found moves with the start and the CPU's floating-point paths; the predictions do not
    (tests/calibrate/test_profiles.py holds the bundled Profiles to those)."""
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

    first = x0 if start is None else np.array([start.get(p.name, p.prior) for p in params]) / scale
    start = np.clip(first, low + 1e-9 * np.maximum(1.0, np.abs(low)), high - 1e-9 * np.maximum(1.0, np.abs(high)))
    solution = least_squares(residuals, start, bounds=(low, high), x_scale=1.0, diff_step=1e-4, xtol=1e-8,
                             ftol=1e-8, max_nfev=60 * (len(params) + 1))
    values = values_of(solution.x)
    err = solution.fun[:len(cells)]
    at_bound = tuple(p.name for p, v in zip(params, values.values()) if on_bound(p, v))
    moved = np.abs(np.asarray(solution.jac)[:len(cells)]).max(axis=0) if len(cells) else np.zeros(len(params))
    unpinned = tuple(p.name for p, m in zip(params, moved) if m < 1e-9 and p.name not in at_bound)
    return Fit(values, tuple(dict.fromkeys(c.table for c in cells)), len(cells),
               float(np.sqrt(np.mean(err ** 2))), at_bound, unpinned)


def on_bound(param: Param, value: float) -> bool:
    """Whether `value` sits on one of `param`'s bounds (within AT_BOUND of its range)."""
    tol = AT_BOUND * (param.high - param.low)
    return bool(value <= param.low + tol or value >= param.high - tol)


def leave_one_out(model: PaperModel, by: str = "table") -> list[dict]:
    """For each group G of cells (a table, or a target model size: `by` = "table" | "size"): refit
    on the other groups, predict G's cells. One dict per cell (paper, table, row, column, kind, size,
    held_out, published, predicted, rel_error, at_bound: the parameters that refit put on a bound).
    A paper whose cells are all one group has nothing to leave out: no rows."""
    cells = model.cells()
    key = (lambda c: c.table) if by == "table" else (lambda c: c.size)
    groups = list(dict.fromkeys(key(c) for c in cells))
    rows = []
    for group in groups if len(groups) > 1 else []:
        held = [c for c in cells if key(c) == group]
        kept = [c for c in cells if key(c) != group]
        refit = fit(model, kept)
        predicted = predict(held, by_name(model.build(refit.values)))
        rows += [dict(paper=c.paper, table=c.table, row=c.row, column=c.column, kind=c.kind, size=c.size,
                      held_out=group, published=c.published, predicted=float(p),
                      rel_error=float(p) / c.published - 1.0, at_bound=",".join(refit.at_bound))
                 for c, p in zip(held, predicted)]
    return rows


def leave_one_table_out(model: PaperModel) -> list[dict]:
    """`leave_one_out(model, "table")`."""
    return leave_one_out(model, "table")


def heldout_summary(rows: list[dict], kind: str = "speedup", by: str = "table") -> dict:
    """The held-out error of a paper's `kind` cells ("speedup", "tau" or "latency": seconds and
    ratios); for speedups (what a Profile stores as its held-out error) all cells when the paper has
    none; {} when nothing was held out."""
    kinds = ("seconds", "ratio") if kind == "latency" else (kind,)
    chosen = [r for r in rows if r["kind"] in kinds] or ([] if kind != "speedup" else rows)
    if not chosen:
        return {}
    err = np.abs([r["rel_error"] for r in chosen])
    prefix = kind
    return {"scheme": SCHEMES[by], "cells": int(len(err)), f"{prefix}_error_median": float(np.median(err)),
            f"{prefix}_error_p90": float(np.quantile(err, 0.9)), f"{prefix}_error_max": float(err.max())}


def warnings(paper: str, fit_: Fit, params: tuple[Param, ...], heldout: dict[str, dict]) -> list[str]:
    """One line per finding a user of the fit must see: a parameter on a bound of its physical range,
    a held-out error above the issue's target (`TARGETS`). `heldout`: {label: heldout_summary}."""
    out = []
    for p in params:
        if p.name in fit_.at_bound:
            value = fit_.values[p.name]
            side = "lower" if value <= (p.low + p.high) / 2 else "upper"
            out.append(f"WARNING {paper}: fitted term {p.name} = {_show(value, p.unit)} is on the {side} bound of "
                       f"its physical range [{_show(p.low, p.unit)}, {_show(p.high, p.unit)}] ({p.what}"
                       f"{'; ' + p.why if p.why else ''})")
    for p in params:
        value = fit_.values[p.name]
        share = (value - p.low) / (p.high - p.low)
        if p.name not in fit_.at_bound and min(share, 1.0 - share) < NEAR_BOUND:
            out.append(f"NOTE {paper}: fitted term {p.name} = {_show(value, p.unit)} presses against its physical "
                       f"range [{_show(p.low, p.unit)}, {_show(p.high, p.unit)}] ({p.what})")
    for name in fit_.unpinned:
        p = next(p for p in params if p.name == name)
        out.append(f"NOTE {paper}: no published number moves term {name} = {_show(fit_.values[name], p.unit)} "
                   f"({p.what}) at the fit: every forward it prices sits on another side of the roofline")
    for label, summary in heldout.items():
        for kind, (median, worst) in TARGETS.items():
            m, w = summary.get(f"{kind}_error_median"), summary.get(f"{kind}_error_max")
            if m is not None and (m > median or w > worst):
                out.append(f"WARNING {paper}: {label} error median {m:.1%}, worst {w:.1%} exceeds the target "
                           f"(median <= {median:.1%}, worst <= {worst:.0%})")
    return out


def profile_warnings(profile) -> list[str]:
    """The warning lines a Profile's paper fit recorded (none for a Profile fitted from traces)."""
    return list(profile.provenance.warnings)


def _entry(profile, acceptance: str | None) -> dict | None:
    """An acceptance entry's content, for a cache key (None when the setup has none)."""
    return profile.acceptance[acceptance].to_dict() if acceptance in profile.acceptance else None


# ---- pricing a cell through the one step-cost model ----------------------------------------------------

def step_ratio(profile, method: str, config, *, drafter: str | None = None, acceptance: str | None = None,
               ctx: float, reach=None) -> float:
    """Seconds of one step of `config` over one plain decoding step, both as the sweep prices them
    (the method's shape with the Profile's step calibration folded in, `methods.spec.plain_shape`,
    `costmodel.step.step_seconds`) at context `ctx`; `reach` overrides the probability that each
    draft forward runs."""
    shape = profile.step_calibration(method).apply(_raw_shape(profile, method, config, drafter, acceptance))
    if reach is not None:
        shape = replace(shape, draft_reach=np.atleast_2d(np.asarray(reach, dtype=float)))
    plain = _plain(profile)
    return float(step_seconds(profile.seconds, shape, ctx)[0]) / float(step_seconds(profile.seconds, plain, ctx)[0])


_SHAPES: dict = {}      # shapes, tokens and plain shapes a fit asks for again and again (keys name all they depend on)


def _plain(profile):
    """`methods.spec.plain_shape` of the Profile, kept per engine calibration."""
    key = ("plain", profile.name, repr(profile.engine.to_dict()))
    if key not in _SHAPES:
        _SHAPES[key] = plain_shape(profile)
    return _SHAPES[key]


def _raw_shape(profile, method, config, drafter, acceptance):
    """`spec.step_shape` of one configuration; a fit rebuilds the Profiles with new latencies many
    times, while a shape depends only on the drafter's entry and the acceptance entry, which it keeps
    (both are part of the key)."""
    key = (profile.name, method, str(config), drafter, repr(profile.drafters.get(drafter)), acceptance,
           repr(_entry(profile, acceptance)))
    if key not in _SHAPES:
        spec = methods.get(method)
        frame = spec.frame_of([spec.parse(config)])
        _SHAPES[key] = spec.step_shape(Setup(profile, drafter, acceptance), frame)
    return _SHAPES[key]


def speedup_cell(paper: str, table: str, row: str, column: str, published: float, tokens: float, profile: str,
                 method: str, config, *, ctx: float, drafter: str | None = None, acceptance: str | None = None,
                 reach=None, note: str = "", size: str = "") -> Cell:
    """A published speedup predicted as tokens per step (published) / step_ratio on `profile`."""
    def predict_one(profiles):
        return tokens / step_ratio(profiles[profile], method, config, drafter=drafter, acceptance=acceptance,
                                   ctx=ctx, reach=reach)
    return Cell(paper, table, row, column, published, predict_one, "speedup", note, size)


def model_pick(profile, method: str, space, *, drafter: str | None, acceptance: str, ctx: float,
               new_tokens: int | None = None) -> tuple[str, float, float]:
    """The configuration of `space` (a list of labels) the Profile predicts fastest: (label, its
    predicted tokens per step, its step_ratio), tokens from the acceptance entry, steps priced as
    `step_ratio` prices them."""
    spec = methods.get(method)
    setup = Setup(profile, drafter, acceptance, new_tokens=new_tokens)
    key = (profile.name, method, tuple(space), drafter, repr(profile.drafters.get(drafter)), acceptance,
           repr(_entry(profile, acceptance)))
    if key not in _SHAPES:
        frame = spec.frame_of([spec.parse(c) for c in space])
        _SHAPES[key] = (frame, spec.step_shape(setup, frame), np.asarray(spec.expected_tokens(setup, frame), float))
    frame, raw, tokens = _SHAPES[key]
    shape = profile.step_calibration(method).apply(raw)
    plain = _plain(profile)
    ratio = step_seconds(profile.seconds, shape, ctx) / float(step_seconds(profile.seconds, plain, ctx)[0])
    best = int(np.argmax(tokens / ratio))
    return space[best], float(tokens[best]), float(ratio[best])


def tau_cell(paper: str, table: str, row: str, column: str, published: float, profile: str, method: str, config,
             *, acceptance: str, drafter: str | None = None, new_tokens: int | None = None, note: str = "",
             size: str = "") -> Cell:
    """A published tokens per step (tau) predicted by the method's closed form from `profile`'s
    acceptance entry `acceptance` (`spec.expected_tokens`, as the sweep counts tokens)."""
    def predict_one(profiles):
        key = ("tau", profile, method, str(config), drafter, acceptance, repr(_entry(profiles[profile], acceptance)),
               new_tokens)
        if key not in _SHAPES:
            spec = methods.get(method)
            setup = Setup(profiles[profile], drafter, acceptance, new_tokens=new_tokens)
            _SHAPES[key] = float(np.asarray(spec.expected_tokens(setup, spec.frame_of([spec.parse(config)])))[0])
        return _SHAPES[key]
    return Cell(paper, table, row, column, published, predict_one, "tau", note, size)


def seconds_cell(paper: str, table: str, row: str, column: str, published_s: float, profile: str, model: str,
                 n_tokens: float = 1, ctx: float = 0.0, batch: int = 1, note: str = "", size: str = "") -> Cell:
    """A published forward latency (seconds) of `model` on `profile`."""
    return Cell(paper, table, row, column, published_s,
                lambda profiles: float(profiles[profile].seconds(model, n_tokens, ctx, batch)), "seconds", note, size)
