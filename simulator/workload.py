"""Requests to serve: arrival times (Poisson, Gamma with a coefficient of variation, or a replayed
timestamp trace) and prompt / output length distributions, all from one seed."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from common.errors import InputError

ARRIVALS = ("poisson", "gamma", "trace")
TRACE_COLUMNS = ("arrival_s",)  # optional: prompt_len, output_len
PROMPT_LEN = "lognormal:256:0.6:2048"     # the command lines' default workload (capacity, simulate serve)
OUTPUT_LEN = "lognormal:128:0.6:512"


def add_workload_options(parser) -> None:
    """The arrival process and lengths, one set of names and defaults for every command that serves
    a workload (`python -m experiments.capacity`, `python -m experiments.simulate serve`)."""
    parser.add_argument("--arrival", choices=ARRIVALS, default="poisson",
                        help="arrival process (default poisson); 'trace' replays --arrival-trace")
    parser.add_argument("--cv", type=float, default=1.0,
                        help="coefficient of variation of gamma inter-arrivals (default 1)")
    parser.add_argument("--arrival-trace", default=None, metavar="CSV",
                        help="with --arrival trace: a CSV with column arrival_s, and optionally prompt_len and "
                             "output_len, which then replace --prompt-len / --output-len (default: none)")
    parser.add_argument("--prompt-len", default=PROMPT_LEN,
                        help=f"prompt length distribution: fixed:N, uniform:LO:HI or lognormal:MEDIAN:SIGMA:MAX "
                             f"(default {PROMPT_LEN})")
    parser.add_argument("--output-len", default=OUTPUT_LEN,
                        help=f"output length distribution, same forms (default {OUTPUT_LEN})")


@dataclass
class Workload:
    """What arrives: `rate` requests/s for `duration_s` (or `n_requests` of them); arrival "poisson",
    "gamma" (inter-arrival CV `cv`) or "trace" (`trace` path or frame with arrival_s and optional
    prompt_len, output_len); lengths as "fixed:N", "uniform:LO:HI" or "lognormal:MEDIAN:SIGMA:MAX"."""

    rate: float = 1.0
    duration_s: float = 60.0
    n_requests: int | None = None
    arrival: str = "poisson"
    cv: float = 1.0
    prompt_len: str = "fixed:128"
    output_len: str = "fixed:128"
    trace: str | Path | pd.DataFrame | None = None

    def __post_init__(self):
        for what, spec in (("prompt length", self.prompt_len), ("output length", self.output_len)):
            if spec is not None:
                sample_lengths(spec, 1, np.random.default_rng(0), what)  # a bad spec fails here, not mid-run
        if self.arrival not in ARRIVALS:
            raise InputError(f"unknown arrival process '{self.arrival}' (known: {', '.join(ARRIVALS)})")
        if self.arrival != "trace":
            if not (isinstance(self.rate, (int, float)) and np.isfinite(self.rate) and self.rate > 0):
                raise InputError(f"arrival rate must be > 0 requests/s, got {self.rate!r}")
            if self.n_requests is None and not self.duration_s > 0:
                raise InputError(f"duration_s must be > 0, got {self.duration_s!r}")
            if self.n_requests is not None and self.n_requests < 1:
                raise InputError(f"n_requests must be >= 1, got {self.n_requests}")
        if self.arrival == "gamma" and not self.cv > 0:
            raise InputError(f"gamma arrivals need cv > 0, got {self.cv!r}")
        if self.arrival == "trace" and self.trace is None:
            raise InputError("trace arrivals need a timestamp trace (CSV with column arrival_s)")


def sample_lengths(spec: str | int, n: int, rng: np.random.Generator, what: str) -> np.ndarray:
    """n lengths >= 1 from a distribution spec."""
    if isinstance(spec, (int, np.integer)):
        spec = f"fixed:{spec}"
    parts = str(spec).split(":")
    try:
        kind, args = parts[0], [float(a) for a in parts[1:]]
    except ValueError:
        raise InputError(f"{what} distribution '{spec}' has a non-numeric argument") from None
    if kind == "fixed" and len(args) == 1:
        out = np.full(n, args[0])
    elif kind == "uniform" and len(args) == 2 and args[0] <= args[1]:
        out = rng.integers(int(args[0]), int(args[1]) + 1, n)
    elif kind == "lognormal" and len(args) == 3:
        out = np.minimum(np.round(args[0] * np.exp(rng.normal(0.0, args[1], n))), args[2])
    else:
        raise InputError(f"{what} distribution '{spec}' is not fixed:N, uniform:LO:HI or lognormal:MEDIAN:SIGMA:MAX")
    if (out < 1).any():
        raise InputError(f"{what} distribution '{spec}' gives lengths below 1")
    return out.astype(np.int64)


def _read_trace(trace) -> pd.DataFrame:
    if isinstance(trace, pd.DataFrame):
        frame = trace
    else:
        path = Path(trace)
        if not path.exists():
            raise InputError(f"arrival trace not found: {path}")
        frame = pd.read_csv(path)
    missing = [c for c in TRACE_COLUMNS if c not in frame.columns]
    if missing:
        raise InputError(f"arrival trace is missing column(s) {', '.join(missing)}")
    times = pd.to_numeric(frame["arrival_s"], errors="coerce")
    if times.isna().any() or (times < 0).any():
        raise InputError("arrival trace column 'arrival_s' must hold numbers >= 0")
    return frame.assign(arrival_s=times).sort_values("arrival_s", kind="stable").reset_index(drop=True)


def make_requests(workload: Workload, seed: int = 0) -> pd.DataFrame:
    """One row per request: request_id, arrival_s, prompt_len, output_len (output >= 2)."""
    rng = np.random.default_rng(seed)
    if workload.arrival == "trace":
        frame = _read_trace(workload.trace)
        times = frame["arrival_s"].to_numpy(float)
    else:
        n = workload.n_requests or int(np.ceil(workload.rate * workload.duration_s * 1.2 + 10 * np.sqrt(workload.rate * workload.duration_s) + 10))
        if workload.arrival == "poisson":
            gaps = rng.exponential(1.0 / workload.rate, n)
        else:
            shape = 1.0 / workload.cv ** 2
            gaps = rng.gamma(shape, 1.0 / (workload.rate * shape), n)
        times = np.cumsum(gaps)
        if workload.n_requests is None:
            times = times[times < workload.duration_s]
        frame = None
    n = times.size
    if n == 0:
        raise InputError("the workload produces no requests (raise rate or duration)")
    prompt = (frame["prompt_len"].to_numpy(np.int64) if frame is not None and "prompt_len" in frame
              else sample_lengths(workload.prompt_len, n, rng, "prompt length"))
    output = (frame["output_len"].to_numpy(np.int64) if frame is not None and "output_len" in frame
              else sample_lengths(workload.output_len, n, rng, "output length"))
    return pd.DataFrame({"request_id": np.arange(n), "arrival_s": times, "prompt_len": prompt,
                         "output_len": np.maximum(output, 2)})
