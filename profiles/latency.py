"""Latency models of one (model, hardware, dtype): seconds per forward, as a Profile stores them.

Two kinds, both frozen, with `.predict(n_tokens, ctx_len, batch=1) -> np.ndarray` (broadcasting) and
`.to_dict()` giving the Profile form {"kind", "params", "fit"}:

- "roofline" (`RooflineLatency`): `costmodel.latency`'s roofline on the datasheet figures with fitted
  numbers, bw_eff, flops_eff and overhead_s (and launch_s, the host's kernel-issue floor, where a
  paper fit states it). It extrapolates to shapes that were never measured, and moves to other
  hardware (`moved_to`).
- "table" (`TableLatency`): the measured grid itself, interpolated linearly in (log2 n_tokens,
  ctx_len, log2 batch) on log seconds, extrapolated linearly past its edges. Exact where measured.
  Inside the grid a prediction cannot fall below the cheapest forward measured; an extrapolation
  that prices a forward below FLOOR_FRACTION of it (a slope that heads for 0 s: a free drafter, a
  free verify) is refused at the point it is asked for, naming the model, the point and the axis
  it left, so no consumer (closed form, simulator, capacity) prices a forward the machine never ran.
  A batch past the grid's largest (`max_batch`) is refused outright: a batch's cost turns where
  nothing was measured (on a CPU the few-row kernels take up to 8 rows and blocked ones the rest, a
  GPU turns compute-bound): extrapolated from batch 1-2, SmolLM2's CPU table priced plain decoding
  at batch 32 at 1.9x its batch-1 step where the batch recording measured its forward at 3.2x.
- "linear" (`LinearLatency`): seconds = fixed_s + per_token_s x query tokens + per_kv_token_s x cached
  tokens, summed over the batch: a step-time fit of that form (SpecDecode-Bench's predictor), kept as
  a second calibration beside a roofline.

A roofline and a linear model also price a forward over ragged rows (`predict_rows`, on
`costmodel.latency.RowSums`), as a continuous-batching engine runs them; a table cannot.

Fitting them from LatencyTraces is `calibrate.latency`; here they are read, checked and evaluated.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from common.errors import InputError
from costmodel.hardware import get_hardware
from costmodel.latency import ForwardShape, RowSums, forward_bytes_flops, roofline_seconds, rows_roofline_seconds
from costmodel.params import Arch, as_arch
from profiles.record import Record

AXES = ("n_tokens", "ctx_len", "batch")
FLOOR_FRACTION = 0.5       # a table's prediction below this share of its cheapest measured forward is refused


class PastMeasuredBatch(InputError):
    """A measured table asked for a batch past its grid: that batch is not priced (callers that
    price many batches leave it out and say so, `short` in a list of them). Its args are its parts,
    so the simulator's event loop and a worker process can build it again."""

    def __init__(self, model: str, measured: str, batch: int):
        super().__init__(model, measured, batch)

    def __str__(self) -> str:
        model, measured, batch = self.args
        return (f"latency model '{model}' (a measured table) was measured at batch {measured}; batch {batch} lies "
                "past it and a batch is not extrapolated (the step's cost turns there: a CPU's few-row kernels, "
                "a GPU's compute bound); measure that batch (python -m traces.timing --batch) or use a Profile "
                "recorded at it")

    @property
    def short(self) -> str:
        model, measured, _ = self.args
        return f"latency model '{model}' measured at batch {measured} only"


def _span(values) -> str:
    """'1-2' (or '4') for the values an axis measured."""
    low, high = min(values), max(values)
    return f"{low:g}" if low == high else f"{low:g}-{high:g}"


def _is_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


def _require(params: dict[str, Any], keys: tuple[str, ...], name: str, kind: str) -> None:
    for key in keys:
        if key not in params:
            raise InputError(f"latency model '{name}' ({kind}) is missing parameter '{key}'")


@dataclass(frozen=True)
class RooflineLatency:
    """Roofline on datasheet figures with fitted efficiencies and a fixed per-forward overhead."""

    arch: Arch
    hardware: str
    dtype: str
    bw_eff: float = 1.0
    flops_eff: float = 1.0
    overhead_s: float = 0.0
    fit: Record = field(default_factory=Record)
    name: str = "model"
    launch_s: float = 0.0
    attention_apart: bool = False       # attention kernels priced apart from the matmuls (costmodel.latency)
    corner: float = 0.0                 # p of the rounded roofline corner (0: the max, costmodel.latency)
    _hw: Any = field(init=False, repr=False, compare=False)
    _shape: Any = field(init=False, repr=False, compare=False)
    kind = "roofline"
    max_batch = math.inf       # the roofline prices any batch from the hardware's figures

    def __post_init__(self) -> None:
        try:
            arch = as_arch(self.arch, self.name)
            hw = get_hardware(self.hardware)
            object.__setattr__(self, "arch", arch)
            object.__setattr__(self, "_hw", hw)
            object.__setattr__(self, "_shape", ForwardShape.of(arch, self.dtype))
            hw.peak(self.dtype)
        except ValueError as exc:
            raise InputError(f"latency model '{self.name}': {exc}") from None
        object.__setattr__(self, "fit", Record(self.fit))
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
        if not isinstance(self.attention_apart, bool):
            raise InputError(f"latency model '{self.name}': attention_apart must be true or false, "
                             f"got {self.attention_apart!r}")
        if not (_is_number(self.corner) and self.corner >= 0):
            raise InputError(f"latency model '{self.name}': corner must be a number >= 0 (0: a sharp roofline), "
                             f"got {self.corner!r}")

    def predict(self, n_tokens, ctx_len, batch=1) -> np.ndarray:
        try:
            return roofline_seconds(self._shape, self._hw, self.dtype, n_tokens, ctx_len, batch,
                                    self.bw_eff, self.flops_eff, self.overhead_s, self.launch_s, self.attention_apart,
                                    self.corner)
        except ValueError as exc:
            raise InputError(f"latency model '{self.name}': {exc}") from None

    def predict_rows(self, sums: RowSums) -> np.ndarray:
        """Seconds of forwards over ragged rows (`costmodel.latency.RowSums`, one value per forward)."""
        return rows_roofline_seconds(self._shape, self._hw, self.dtype, sums, self.bw_eff, self.flops_eff,
                                     self.overhead_s, self.launch_s, self.attention_apart, self.corner)

    def bound(self, n_tokens, ctx_len, batch=1) -> np.ndarray:
        """'memory', 'compute' or 'launch' per grid point: which side of the roofline the forward sits on."""
        moved, flops = forward_bytes_flops(self._shape, n_tokens, ctx_len, batch)
        memory, compute = moved / (self._hw.bandwidth * self.bw_eff), flops / (self._hw.peak(self.dtype) * self.flops_eff)
        side = np.where(compute > memory, "compute", "memory")
        return np.where(self.launch_s > np.maximum(memory, compute), "launch", side)

    def moved_to(self, hardware: str) -> "RooflineLatency":
        """The same fitted efficiencies on another hardware's datasheet."""
        return replace(self, hardware=get_hardware(hardware).name)

    def to_dict(self) -> dict[str, Any]:
        params = {"hardware": self.hardware, "dtype": self.dtype, "arch": self.arch.to_dict(), "bw_eff": self.bw_eff,
                  "flops_eff": self.flops_eff, "overhead_s": self.overhead_s}
        if self.launch_s:
            params["launch_s"] = self.launch_s
        if self.attention_apart:
            params["attention_apart"] = True
        if self.corner:
            params["corner"] = self.corner
        return {"kind": self.kind, "params": params, "fit": self.fit.to_json()}

    @classmethod
    def from_params(cls, params: dict[str, Any], fit: dict[str, Any], name: str) -> "RooflineLatency":
        _require(params, ("hardware", "dtype", "arch"), name, cls.kind)
        return cls(arch=params["arch"], hardware=params["hardware"], dtype=params["dtype"],
                   bw_eff=params.get("bw_eff", 1.0), flops_eff=params.get("flops_eff", 1.0),
                   overhead_s=params.get("overhead_s", 0.0), fit=fit, name=name, launch_s=params.get("launch_s", 0.0),
                   attention_apart=params.get("attention_apart", False), corner=params.get("corner", 0.0))


@dataclass(frozen=True)
class TableLatency:
    """A measured regular grid, interpolated on log seconds over (log2 n_tokens, ctx_len, log2 batch)."""

    n_tokens: tuple[float, ...]
    ctx_len: tuple[float, ...]
    batch: tuple[float, ...]
    seconds: np.ndarray          # [n_tokens][ctx_len][batch]
    fit: Record = field(default_factory=Record)
    name: str = "model"
    _coords: Any = field(init=False, repr=False, compare=False)
    _log_seconds: Any = field(init=False, repr=False, compare=False)
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
        grid.setflags(write=False)
        for axis_name, axis in zip(AXES, axes):
            object.__setattr__(self, axis_name, tuple(float(v) for v in axis))
        object.__setattr__(self, "seconds", grid)
        object.__setattr__(self, "fit", Record(self.fit))
        object.__setattr__(self, "_coords", [np.log2(axes[0]), axes[1], np.log2(axes[2])])
        object.__setattr__(self, "_log_seconds", np.log(grid))

    def predict(self, n_tokens, ctx_len, batch=1) -> np.ndarray:
        n, c, b = np.broadcast_arrays(np.asarray(n_tokens, float), np.asarray(ctx_len, float), np.asarray(batch, float))
        if np.any(n < 1) or np.any(b < 1) or np.any(c < 0):
            raise InputError(f"latency model '{self.name}': n_tokens and batch must be >= 1, ctx_len >= 0")
        if np.any(b > self.max_batch):
            raise PastMeasuredBatch(self.name, _span(self.batch), int(np.max(b)))
        points = [np.log2(n), c, np.log2(b)]
        seconds = np.exp(_multilinear(self._coords, self._log_seconds, points))
        floor = FLOOR_FRACTION * float(self.seconds.min())
        if np.any(seconds < floor):      # only an extrapolation goes there: inside the grid it stays above the least
            i = int(np.argmin(seconds.ravel()))
            at = dict(zip(AXES, (float(v.ravel()[i]) for v in (n, c, b))))
            past = [f"{a} {at[a]:g} (measured {min(getattr(self, a)):g}-{max(getattr(self, a)):g})" for a in AXES
                    if not min(getattr(self, a)) <= at[a] <= max(getattr(self, a))]
            raise InputError(f"latency model '{self.name}' (a measured table) predicts {seconds.ravel()[i]:.3g} s at "
                             f"n_tokens {at['n_tokens']:g}, ctx_len {at['ctx_len']:g}, batch {at['batch']:g}, below "
                             f"{FLOOR_FRACTION:g} x its cheapest measured forward ({self.seconds.min():.3g} s): its "
                             f"extrapolation past {', '.join(past)} is not a forward this machine runs; measure that "
                             "range")
        return seconds

    @property
    def max_batch(self) -> float:
        """The largest batch the grid measured: `predict` refuses a batch past it."""
        return self.batch[-1]

    def predict_rows(self, sums: RowSums) -> np.ndarray:
        raise InputError(f"latency model '{self.name}' is a measured table of uniform batches: it cannot price a "
                         "forward over ragged rows (a roofline or linear model can)")

    def moved_to(self, hardware: str) -> "TableLatency":
        raise InputError(f"latency model '{self.name}' is a measured table, which holds seconds on one machine: "
                         f"only a roofline model can be moved to {hardware}")

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, TableLatency) and (self.n_tokens, self.ctx_len, self.batch, self.name, self.fit)
                == (other.n_tokens, other.ctx_len, other.batch, other.name, other.fit)
                and np.array_equal(self.seconds, other.seconds))

    __hash__ = None

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "params": {"n_tokens": list(self.n_tokens), "ctx_len": list(self.ctx_len),
                                              "batch": list(self.batch), "seconds": self.seconds.tolist()},
                "fit": self.fit.to_json()}

    @classmethod
    def from_params(cls, params: dict[str, Any], fit: dict[str, Any], name: str) -> "TableLatency":
        _require(params, (*AXES, "seconds"), name, cls.kind)
        return cls(*(params[k] for k in (*AXES, "seconds")), fit=fit, name=name)


@dataclass(frozen=True)
class LinearLatency:
    """seconds = fixed_s + per_token_s x query tokens + per_kv_token_s x cached tokens, each summed over the
    batch's rows (module docstring); on one machine only, like a table."""

    fixed_s: float
    per_token_s: float
    per_kv_token_s: float
    fit: Record = field(default_factory=Record)
    name: str = "model"
    kind = "linear"
    TERMS = ("fixed_s", "per_token_s", "per_kv_token_s")
    max_batch = math.inf       # a fitted form prices any batch

    def __post_init__(self) -> None:
        for key in self.TERMS:
            if not (_is_number(getattr(self, key)) and getattr(self, key) >= 0):
                raise InputError(f"latency model '{self.name}': {key} must be a number of seconds >= 0, "
                                 f"got {getattr(self, key)!r}")
        object.__setattr__(self, "fit", Record(self.fit))

    def predict(self, n_tokens, ctx_len, batch=1) -> np.ndarray:
        n, c, b = np.broadcast_arrays(np.asarray(n_tokens, float), np.asarray(ctx_len, float), np.asarray(batch, float))
        if np.any(n < 1) or np.any(b < 1) or np.any(c < 0):
            raise InputError(f"latency model '{self.name}': n_tokens and batch must be >= 1, ctx_len >= 0")
        return self.fixed_s + self.per_token_s * (b * n) + self.per_kv_token_s * (b * c)

    def predict_rows(self, sums: RowSums) -> np.ndarray:
        return self.fixed_s + self.per_token_s * np.asarray(sums.tokens, float) + self.per_kv_token_s * np.asarray(
            sums.ctx_tokens, float)

    def moved_to(self, hardware: str) -> "LinearLatency":
        raise InputError(f"latency model '{self.name}' is a linear fit of one machine's step times: only a roofline "
                         f"model can be moved to {hardware}")

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "params": {k: getattr(self, k) for k in self.TERMS}, "fit": self.fit.to_json()}

    @classmethod
    def from_params(cls, params: dict[str, Any], fit: dict[str, Any], name: str) -> "LinearLatency":
        _require(params, cls.TERMS, name, cls.kind)
        return cls(*(params[k] for k in cls.TERMS), fit=fit, name=name)


LatencyModel = RooflineLatency | TableLatency | LinearLatency


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


LATENCY_KINDS = {"roofline": RooflineLatency, "table": TableLatency, "linear": LinearLatency}


def latency_model(spec: dict[str, Any], name: str = "model") -> LatencyModel:
    """The latency model a Profile stores under `name` ({"kind", "params", "fit"}), checked."""
    if not isinstance(spec, dict) or "kind" not in spec or "params" not in spec:
        raise InputError(f"latency model '{name}' needs 'kind' and 'params'")
    kind = spec["kind"]
    if kind not in LATENCY_KINDS:
        raise InputError(f"latency model '{name}' has kind {kind!r}; known: {', '.join(LATENCY_KINDS)}")
    if not isinstance(spec["params"], dict):
        raise InputError(f"latency model '{name}': 'params' must be an object")
    fit = spec.get("fit", {})
    if not isinstance(fit, dict):
        raise InputError(f"latency model '{name}': 'fit' must be an object")
    return LATENCY_KINDS[kind].from_params(spec["params"], fit, name)
