"""Latency models of one (model, hardware, dtype, role): seconds per forward, fitted from a LatencyTrace.

Two kinds, both with `.predict(n_tokens, ctx_len, batch=1) -> np.ndarray` (broadcasting) and
`.to_dict()` giving the Profile form {"kind", "params", "fit"}:

- "roofline": costmodel.latency's roofline on the datasheet figures with fitted numbers, bw_eff,
  flops_eff and overhead_s (and launch_s, the host's kernel-issue floor, where a paper fit states
  it). It extrapolates to shapes that were never measured.
- "table": the measured grid itself, interpolated linearly in (log2 n_tokens, ctx_len,
  log2 batch) on log seconds, extrapolated linearly past its edges. Exact where measured.

`fit_latency(frame, ...)` fits either kind and reports the mean absolute percentage error both on
the grid points it was fitted on and on grid points held out of the fit (whole interior values of
each axis, so that the table kind still sees a regular grid).
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from costmodel.hardware import get_hardware
from costmodel.latency import ForwardShape, forward_bytes_flops, roofline_seconds
from costmodel.params import Arch, as_arch
from common.errors import InputError

AXES = ("n_tokens", "ctx_len", "batch")


def _require(params: dict[str, Any], keys: tuple[str, ...], name: str, kind: str) -> None:
    for key in keys:
        if key not in params:
            raise InputError(f"latency model '{name}' ({kind}) is missing parameter '{key}'")


def _is_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


def mape(predicted: np.ndarray, observed: np.ndarray) -> float:
    """Mean absolute percentage error, in per cent."""
    observed = np.asarray(observed, float)
    if observed.size == 0:
        return float("nan")
    return float(100.0 * np.mean(np.abs(np.asarray(predicted, float) / observed - 1.0)))


# ---- roofline ---------------------------------------------------------------------------------------
@dataclass
class RooflineLatency:
    """Roofline on datasheet figures with fitted efficiencies and a fixed per-forward overhead."""

    arch: dict[str, Any]
    hardware: str
    dtype: str
    bw_eff: float = 1.0
    flops_eff: float = 1.0
    overhead_s: float = 0.0
    fit: dict[str, Any] = field(default_factory=dict)
    name: str = "model"
    launch_s: float = 0.0
    kind = "roofline"

    def __post_init__(self) -> None:
        try:
            self._hw = get_hardware(self.hardware)
            self._shape = ForwardShape.of(as_arch(self.arch, self.name), self.dtype)
            self._hw.peak(self.dtype)
        except ValueError as exc:
            raise InputError(f"latency model '{self.name}': {exc}") from None
        for key in ("bw_eff", "flops_eff"):    # a share of the datasheet's bandwidth or peak: (0, 1]
            value = getattr(self, key)
            if not (_is_number(value) and 0 < value <= 1):
                raise InputError(f"latency model '{self.name}': {key} must be an efficiency in (0, 1] (a share of "
                                 f"the {self.hardware} datasheet's {'bandwidth' if key == 'bw_eff' else 'peak'}), "
                                 f"got {value!r}")
        for key in ("overhead_s", "launch_s"):
            if not (_is_number(getattr(self, key)) and getattr(self, key) >= 0):
                raise InputError(f"latency model '{self.name}': {key} must be a number of seconds >= 0, "
                                 f"got {getattr(self, key)!r}")

    def predict(self, n_tokens, ctx_len, batch=1) -> np.ndarray:
        try:
            return roofline_seconds(self._shape, self._hw, self.dtype, n_tokens, ctx_len, batch,
                                    self.bw_eff, self.flops_eff, self.overhead_s, self.launch_s)
        except ValueError as exc:
            raise InputError(f"latency model '{self.name}': {exc}") from None

    def bound(self, n_tokens, ctx_len, batch=1) -> np.ndarray:
        """'memory', 'compute' or 'launch' per grid point: which side of the roofline the forward sits on."""
        moved, flops = forward_bytes_flops(self._shape, n_tokens, ctx_len, batch)
        memory, compute = moved / (self._hw.bandwidth * self.bw_eff), flops / (self._hw.peak(self.dtype) * self.flops_eff)
        side = np.where(compute > memory, "compute", "memory")
        return np.where(self.launch_s > np.maximum(memory, compute), "launch", side)

    def to_dict(self) -> dict[str, Any]:
        arch = {k: v for k, v in as_arch(self.arch, self.name).to_dict().items()}
        params = {"hardware": self.hardware, "dtype": self.dtype, "arch": arch, "bw_eff": self.bw_eff,
                  "flops_eff": self.flops_eff, "overhead_s": self.overhead_s}
        if self.launch_s:
            params["launch_s"] = self.launch_s
        return {"kind": self.kind, "params": params, "fit": dict(self.fit)}

    @classmethod
    def from_params(cls, params: dict[str, Any], fit: dict[str, Any], name: str) -> "RooflineLatency":
        _require(params, ("hardware", "dtype", "arch"), name, cls.kind)
        return cls(arch=params["arch"], hardware=params["hardware"], dtype=params["dtype"],
                   bw_eff=params.get("bw_eff", 1.0), flops_eff=params.get("flops_eff", 1.0),
                   overhead_s=params.get("overhead_s", 0.0), fit=fit, name=name, launch_s=params.get("launch_s", 0.0))

    @classmethod
    def fit_frame(cls, frame: pd.DataFrame, arch: "Arch | dict | str", hardware: str, dtype: str,
                  name: str = "model") -> "RooflineLatency":
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
        return cls(arch=a.to_dict(), hardware=hw.name, dtype=dtype, overhead_s=overhead, name=name,
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


# ---- measured table -----------------------------------------------------------------------------------
@dataclass
class TableLatency:
    """A measured regular grid, interpolated on log seconds over (log2 n_tokens, ctx_len, log2 batch)."""

    n_tokens: list[float]
    ctx_len: list[float]
    batch: list[float]
    seconds: list  # nested [n_tokens][ctx_len][batch]
    fit: dict[str, Any] = field(default_factory=dict)
    name: str = "model"
    kind = "table"

    def __post_init__(self) -> None:
        try:
            axes = [np.asarray(getattr(self, a), float) for a in AXES]
            grid = np.asarray(self.seconds, float)
        except (TypeError, ValueError) as exc:
            raise InputError(f"latency model '{self.name}': table axes and seconds must be numbers ({exc})") from None
        for axis_name, axis in zip(AXES, axes):
            if axis.ndim != 1 or axis.size < 1 or np.any(np.diff(axis) <= 0):
                raise InputError(f"latency model '{self.name}': table axis '{axis_name}' must be strictly increasing")
        if grid.shape != tuple(a.size for a in axes):
            raise InputError(f"latency model '{self.name}': table seconds has shape {grid.shape}, "
                             f"axes need {tuple(a.size for a in axes)}")
        if not np.all(np.isfinite(grid)) or np.any(grid <= 0):
            raise InputError(f"latency model '{self.name}': table seconds must be finite and > 0")
        self._coords = [np.log2(axes[0]), axes[1], np.log2(axes[2])]
        self._log_seconds = np.log(grid)

    def predict(self, n_tokens, ctx_len, batch=1) -> np.ndarray:
        n, c, b = np.broadcast_arrays(np.asarray(n_tokens, float), np.asarray(ctx_len, float), np.asarray(batch, float))
        if np.any(n < 1) or np.any(b < 1) or np.any(c < 0):
            raise InputError(f"latency model '{self.name}': n_tokens and batch must be >= 1, ctx_len >= 0")
        points = [np.log2(n), c, np.log2(b)]
        return np.exp(_multilinear(self._coords, self._log_seconds, points))

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "params": {"n_tokens": list(self.n_tokens), "ctx_len": list(self.ctx_len),
                                              "batch": list(self.batch), "seconds": np.asarray(self.seconds).tolist()},
                "fit": dict(self.fit)}

    @classmethod
    def from_params(cls, params: dict[str, Any], fit: dict[str, Any], name: str) -> "TableLatency":
        _require(params, (*AXES, "seconds"), name, cls.kind)
        return cls(*(params[k] for k in (*AXES, "seconds")), fit=fit, name=name)

    @classmethod
    def fit_frame(cls, frame: pd.DataFrame, name: str = "model", **_: Any) -> "TableLatency":
        """Median seconds per grid point; the points must form a full regular grid."""
        med = frame.groupby(list(AXES))["seconds"].median()
        axes = [sorted(med.index.get_level_values(a).unique()) for a in AXES]
        full = pd.MultiIndex.from_product(axes, names=list(AXES))
        missing = full.difference(med.index)
        if len(missing):
            raise InputError(f"latency model '{name}': table fit needs a full grid; missing point "
                             f"(n_tokens, ctx_len, batch) = {tuple(int(v) for v in missing[0])}")
        grid = med.reindex(full).to_numpy().reshape([len(a) for a in axes])
        return cls(*[[float(v) for v in a] for a in axes], seconds=grid.tolist(), name=name)


def _multilinear(coords: list[np.ndarray], values: np.ndarray, points: list[np.ndarray]) -> np.ndarray:
    """Multilinear interpolation on a regular grid, linear extrapolation past the edges."""
    out = np.zeros(points[0].shape)
    lows, fracs = [], []
    for axis, x in zip(coords, points):
        if axis.size == 1:
            lows.append(np.zeros(x.shape, int))
            fracs.append(np.zeros(x.shape))
            continue
        i = np.clip(np.searchsorted(axis, x, side="right") - 1, 0, axis.size - 2)
        lows.append(i)
        fracs.append((x - axis[i]) / (axis[i + 1] - axis[i]))
    for corner in itertools.product((0, 1), repeat=len(coords)):
        weight = np.ones(points[0].shape)
        index = []
        for d, bit in enumerate(corner):
            if coords[d].size == 1:
                if bit:
                    weight = weight * 0.0
                index.append(lows[d])
                continue
            weight = weight * (fracs[d] if bit else 1.0 - fracs[d])
            index.append(lows[d] + bit)
        out = out + weight * values[tuple(index)]
    return out


# ---- dispatch and fitting ---------------------------------------------------------------------------
LATENCY_KINDS = {"roofline": RooflineLatency, "table": TableLatency}


def latency_model_from_dict(spec: dict[str, Any], name: str = "model"):
    """Build the latency model a Profile stores under `name` ({"kind", "params", "fit"})."""
    if not isinstance(spec, dict) or "kind" not in spec or "params" not in spec:
        raise InputError(f"latency model '{name}' needs 'kind' and 'params'")
    kind = spec["kind"]
    if kind not in LATENCY_KINDS:
        raise InputError(f"latency model '{name}' has kind {kind!r}; known: {', '.join(LATENCY_KINDS)}")
    if not isinstance(spec["params"], dict):
        raise InputError(f"latency model '{name}': 'params' must be an object")
    return LATENCY_KINDS[kind].from_params(spec["params"], dict(spec.get("fit", {})), name)


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
    if kind not in LATENCY_KINDS:
        raise InputError(f"unknown latency model kind {kind!r}; known: {', '.join(LATENCY_KINDS)}")
    if len(frame) == 0:
        raise InputError(f"latency model '{name}': no trace rows to fit")
    if kind == "roofline" and (arch is None or hardware is None or dtype is None):
        raise InputError(f"latency model '{name}': a roofline fit needs the architecture, hardware and dtype")
    cls = LATENCY_KINDS[kind]
    options = dict(arch=arch, hardware=hardware, dtype=dtype, name=name)
    rows = frame.groupby(list(AXES), as_index=False)["seconds"].median()
    held = holdout_mask(rows, holdout_every)
    if held.any() and (~held).sum() >= 3:
        partial = cls.fit_frame(rows[~held], **options)
        mape_heldout = mape(partial.predict(*(rows.loc[held, a] for a in AXES)), rows.loc[held, "seconds"])
    else:
        mape_heldout = float("nan")
    model = cls.fit_frame(rows, **options)
    observed = rows["seconds"].to_numpy()
    model.fit = {
        "mape_train": mape(model.predict(*(rows[a] for a in AXES)), observed),
        "mape_heldout": mape_heldout,
        "n_points": int(len(rows)),
        "n_heldout": int(held.sum()),
        "heldout_rule": f"one in {holdout_every} interior values of each axis with >= 4 values",
    }
    return model
