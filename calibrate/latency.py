"""Fitting latency models (`profiles.latency`) to LatencyTraces: seconds per forward of one (model,
hardware, dtype) over tokens per forward, context length and batch.

`fit_latency(frame, ...)` fits either kind ("roofline": efficiencies and a fixed overhead on the
datasheet's roofline; "table": the measured grid itself) and reports the mean absolute percentage
error both on the grid points it was fitted on and on grid points held out of the fit (whole interior
values of each axis, so that the table kind still sees a regular grid).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from common.errors import InputError
from costmodel.hardware import get_hardware
from costmodel.latency import ForwardShape, forward_bytes_flops
from costmodel.params import Arch, as_arch
from profiles.latency import AXES, RooflineLatency, TableLatency


def mape(predicted: np.ndarray, observed: np.ndarray) -> float:
    """Mean absolute percentage error, in per cent."""
    observed = np.asarray(observed, float)
    if observed.size == 0:
        return float("nan")
    return float(100.0 * np.mean(np.abs(np.asarray(predicted, float) / observed - 1.0)))


def fit_roofline(frame: pd.DataFrame, arch: "Arch | dict | str", hardware: str, dtype: str,
                 name: str = "model") -> RooflineLatency:
    """Least squares on relative error; exact on noise-free roofline data (see `_fit_roofline`)."""
    a = as_arch(arch, name)
    shape = ForwardShape.of(a, dtype)
    hw = get_hardware(hardware)
    moved, flops = forward_bytes_flops(shape, frame["n_tokens"], frame["ctx_len"], frame["batch"])
    inv_bw, inv_fl, overhead = _fit_roofline(moved / hw.bandwidth, flops / hw.peak(dtype),
                                             frame["seconds"].to_numpy(float))
    effs = {"bw_eff": 1.0 / inv_bw, "flops_eff": 1.0 / inv_fl}
    for key, value in effs.items():     # faster than the datasheet allows: the figures, not the fit, are wrong
        if value > 1.0 + 1e-9:
            raise InputError(f"latency model '{name}': the traces run faster than {hw.name}'s datasheet allows "
                             f"(fitted {key} {value:.3g} > 1); give the hardware it ran on, or fit the table "
                             "kind (--latency-kind table)")
    return RooflineLatency(arch=a, hardware=hw.name, dtype=dtype, overhead_s=overhead, name=name,
                           **{k: min(v, 1.0) for k, v in effs.items()})

def _fit_roofline(mem_s: np.ndarray, comp_s: np.ndarray, seconds: np.ndarray) -> tuple[float, float, float]:
    """Fit seconds ~ max(x * mem_s, y * comp_s) + z (x, y > 0, z >= 0) minimising relative error.

    For a fixed split of the points into memory- and compute-bound the model is linear in
    (x, y, z), so alternate: non-negative least squares on the current split, re-split by the fitted
    roofline, until the split stops changing; start from several splits and keep the best.
    """
    from scipy.optimize import least_squares, nnls

    w = 1.0 / seconds
    ratio = comp_s / np.maximum(mem_s, 1e-300)
    starts = {tuple(ratio > q) for q in np.quantile(ratio, [0.0, 0.25, 0.5, 0.75, 0.9, 1.0])}
    starts.add(tuple(np.zeros_like(ratio, bool)))
    best, best_cost = None, np.inf
    for start in starts:
        compute = np.array(start)
        for _ in range(50):
            design = np.column_stack([np.where(compute, 0.0, mem_s), np.where(compute, comp_s, 0.0), np.ones_like(mem_s)])
            coef, _ = nnls(design * w[:, None], np.ones_like(seconds))
            x = coef[0] or _below_all(mem_s, seconds)
            y = coef[1] or _below_all(comp_s, seconds)
            new = y * comp_s > x * mem_s
            if np.array_equal(new, compute):
                break
            compute = new
        cost = np.sum(((np.maximum(x * mem_s, y * comp_s) + coef[2]) * w - 1.0) ** 2)
        if cost < best_cost:
            best, best_cost = (x, y, coef[2]), cost
    x0 = np.array([np.log(best[0]), np.log(best[1]), max(best[2], 0.0)])

    def residual(p):
        return (np.maximum(np.exp(p[0]) * mem_s, np.exp(p[1]) * comp_s) + p[2]) * w - 1.0

    scale = float(np.median(seconds))
    polished = least_squares(residual, x0, bounds=([-np.inf, -np.inf, 0.0], [np.inf, np.inf, np.inf]),
                             x_scale=[1.0, 1.0, scale], xtol=1e-14, ftol=1e-14, gtol=1e-14)
    if np.sum(polished.fun ** 2) <= best_cost:
        return float(np.exp(polished.x[0])), float(np.exp(polished.x[1])), float(polished.x[2])
    return best


def _below_all(side_s: np.ndarray, seconds: np.ndarray) -> float:
    """A coefficient for a roofline side that no point sits on: the largest keeping it under every point."""
    return float(np.min(seconds / np.maximum(side_s, 1e-300)))


def fit_table(frame: pd.DataFrame, name: str = "model", **_) -> TableLatency:
    """Median seconds per grid point; the points must form a full regular grid."""
    med = frame.groupby(list(AXES))["seconds"].median()
    axes = [sorted(med.index.get_level_values(a).unique()) for a in AXES]
    full = pd.MultiIndex.from_product(axes, names=list(AXES))
    missing = full.difference(med.index)
    if len(missing):
        raise InputError(f"latency model '{name}': table fit needs a full grid; missing point "
                         f"(n_tokens, ctx_len, batch) = {tuple(int(v) for v in missing[0])}")
    grid = med.reindex(full).to_numpy().reshape([len(a) for a in axes])
    return TableLatency(*[[float(v) for v in a] for a in axes], seconds=grid, name=name)


FITS = {"roofline": fit_roofline, "table": fit_table}


def holdout_mask(frame: pd.DataFrame, every: int = 3) -> np.ndarray:
    """Rows held out of a fit: those on every `every`-th interior value of an axis with >= 4 values."""
    held = np.zeros(len(frame), bool)
    for axis in AXES:
        values = np.sort(frame[axis].unique())
        if values.size >= 4:
            interior = values[1:-1]
            held |= frame[axis].isin(interior[1::every]).to_numpy()
    return held


def fit_latency(frame: pd.DataFrame, kind: str = "roofline", arch: "Arch | dict | str | None" = None,
                hardware: str | None = None, dtype: str | None = None, name: str = "model",
                holdout_every: int = 3):
    """Fit a latency model of `kind` to LatencyTrace rows of one model, with train and held-out MAPE.

    The held-out grid points are left out of the fit, their error measured, and the returned model
    is then refitted on every point (its `fit` dict keeps both errors and the point counts).
    """
    if kind not in FITS:
        raise InputError(f"latency model kind {kind!r} is not fitted from LatencyTraces; fitted: {', '.join(FITS)}")
    if len(frame) == 0:
        raise InputError(f"latency model '{name}': no trace rows to fit")
    if kind == "roofline" and (arch is None or hardware is None or dtype is None):
        raise InputError(f"latency model '{name}': a roofline fit needs the architecture, hardware and dtype")
    fit = FITS[kind]
    options = dict(arch=arch, hardware=hardware, dtype=dtype, name=name)
    rows = frame.groupby(list(AXES), as_index=False)["seconds"].median()
    held = holdout_mask(rows, holdout_every)
    if held.any() and (~held).sum() >= 3:
        partial = fit(rows[~held], **options)
        mape_heldout = mape(partial.predict(*(rows.loc[held, a] for a in AXES)), rows.loc[held, "seconds"])
    else:
        mape_heldout = float("nan")
    model = fit(rows, **options)
    observed = rows["seconds"].to_numpy()
    return replace(model, fit={
        "mape_train": mape(model.predict(*(rows[a] for a in AXES)), observed),
        "mape_heldout": mape_heldout,
        "n_points": int(len(rows)),
        "n_heldout": int(held.sum()),
        "heldout_rule": f"one in {holdout_every} interior values of each axis with >= 4 values",
    })
