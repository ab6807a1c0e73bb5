"""Requests to serve: arrival times (Poisson, Gamma with a coefficient of variation, or a replayed
timestamp trace) and prompt / output length distributions, all from one seed.

A trace (`read_trace`: a CSV with arrival_s, and prompt_len / output_len where it has them) is
checked row by row when read, a timestamp that goes backwards refused naming its row; served at a
rate, it keeps its shape and takes that rate (`Workload` states the rule), so a load search tries
the trace's pattern at every rate rather than its recorded timestamps at none. `check_load`
refuses, before any request is drawn, a load whose simulation would not fit in memory or would run
past `--max-hours` (`MAX_HOURS`), with its estimate (requests x output tokens).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from common.errors import InputError, duration
from common.memory import READ_LIMIT, check_fits, gb

ARRIVALS = ("poisson", "gamma", "fixed", "trace")
TRACE_COLUMNS = ("arrival_s",)
LENGTH_COLUMNS = ("prompt_len", "output_len")   # optional: they replace the length distributions
TRACE_ROW_BYTES = 150      # bytes per row while pandas reads a trace (three float columns, the parser's buffers)
SERVE_REQUEST_BYTES = 250  # the serving simulator's bytes per request (its arrays and result rows; 220-240 measured)
SERVE_STEP_BYTES = 120     # per logged iteration (per_step), counted at one per output token
SERVE_TOKEN_S = 8e-6       # CPU seconds per served output token (9-32 us measured, busiest batches cheapest)
MAX_HOURS = 6.0            # default --max-hours of a simulated load
PROMPT_LEN = "lognormal:256:0.6:2048"     # the command lines' default workload (capacity, simulate serve)
OUTPUT_LEN = "lognormal:128:0.6:512"


def add_workload_options(parser) -> None:
    """The arrival process and lengths, one set of names and defaults for every command that serves
    a workload (`python -m experiments.capacity`, `python -m experiments.simulate serve`)."""
    parser.add_argument("--arrival", choices=ARRIVALS, default="poisson",
                        help="arrival process (default poisson); 'fixed': evenly spaced at the rate; "
                             "'trace' replays --arrival-trace")
    parser.add_argument("--cv", type=float, default=1.0,
                        help="coefficient of variation of gamma inter-arrivals (default 1)")
    parser.add_argument("--arrival-trace", default=None, metavar="CSV",
                        help="with --arrival trace: a CSV with column arrival_s (in time order), and optionally "
                             "prompt_len and output_len, which then replace --prompt-len / --output-len; at a rate "
                             "the trace keeps its shape (inter-arrival gaps scaled to that rate) and is replayed "
                             "back to back for the duration (default: none)")
    parser.add_argument("--prompt-len", default=PROMPT_LEN,
                        help=f"prompt length distribution: fixed:N, uniform:LO:HI or lognormal:MEDIAN:SIGMA:MAX "
                             f"(default {PROMPT_LEN})")
    parser.add_argument("--output-len", default=OUTPUT_LEN,
                        help=f"output length distribution, same forms (default {OUTPUT_LEN})")
    parser.add_argument("--max-hours", type=float, default=MAX_HOURS,
                        help="refuse, before anything runs, a simulated load (requests x output tokens) estimated to "
                             f"take longer than this many CPU hours (default {MAX_HOURS:g})")


def trace_option(args) -> ArrivalTrace | None:
    """The `--arrival-trace` of a command (`add_workload_options`), read and checked once, or None;
    InputError when one is given without the other (a trace is never silently left unused)."""
    if args.arrival_trace is not None and args.arrival != "trace":
        raise InputError(f"--arrival-trace {args.arrival_trace} is replayed only with --arrival trace "
                         f"(--arrival is {args.arrival})")
    if args.arrival == "trace" and args.arrival_trace is None:
        raise InputError("--arrival trace needs --arrival-trace CSV (a CSV with column arrival_s)")
    if not (args.max_hours > 0 and np.isfinite(args.max_hours)):
        raise InputError(f"--max-hours must be a number of hours > 0, got {args.max_hours}")
    return read_trace(args.arrival_trace) if args.arrival_trace is not None else None


@dataclass
class Workload:
    """What arrives: `rate` requests/s for `duration_s` (or `n_requests` of them); arrival "poisson",
    "gamma" (inter-arrival CV `cv`), "fixed" (one every 1 / `rate` s, Gamma's limit as its CV goes to 0)
    or "trace" (`trace`: a CSV path, a frame or an `ArrivalTrace`);
    lengths as "fixed:N", "uniform:LO:HI" or "lognormal:MEDIAN:SIGMA:MAX".

    A trace keeps its shape and takes the rate asked for: its inter-arrival gaps are scaled by (the
    trace's own rate / `rate`), so its bursts and lulls stay and its mean rate is `rate`, and it is
    replayed back to back (one mean gap between copies) until `duration_s` (or `n_requests`); its
    prompt_len and output_len columns, where it has them, go with their rows. Without a rate (None,
    the default) a trace is replayed once as recorded (its own timestamps and rate), and Poisson,
    Gamma or fixed arrivals come at 1 request/s.

    `acceptance_spread`: how far one request's gain from speculation strays from the dataset's, the
    standard deviation over requests of its tokens per step relative to the gain T - 1 (a Profile's
    `prompt_spread`), measured on prompts of `spread_tokens` new tokens (the steps' own noise in it is
    taken out; None: none is); 0, the default, serves every request by the same acceptance law
    (`simulator.leaning`)."""

    rate: float | None = None
    duration_s: float = 60.0
    n_requests: int | None = None
    arrival: str = "poisson"
    cv: float = 1.0
    prompt_len: str = "fixed:128"
    output_len: str = "fixed:128"
    trace: str | Path | pd.DataFrame | ArrivalTrace | None = None
    acceptance_spread: float = 0.0
    spread_tokens: int | None = None

    def __post_init__(self):
        for what, spec in (("prompt length", self.prompt_len), ("output length", self.output_len)):
            if spec is not None:
                sample_lengths(spec, 1, np.random.default_rng(0), what)  # a bad spec fails here, not mid-run
        if self.arrival not in ARRIVALS:
            raise InputError(f"unknown arrival process '{self.arrival}' (known: {', '.join(ARRIVALS)})")
        if self.rate is None and self.arrival != "trace":
            self.rate = 1.0
        if self.rate is not None or self.arrival != "trace":
            if not (isinstance(self.rate, (int, float)) and np.isfinite(self.rate) and self.rate > 0):
                raise InputError(f"arrival rate must be > 0 requests/s, got {self.rate!r}")
            if self.n_requests is None and not (self.duration_s > 0 and np.isfinite(self.duration_s)):
                raise InputError(f"duration_s must be a finite number > 0, got {self.duration_s!r}")
        if not (isinstance(self.acceptance_spread, (int, float)) and 0 <= self.acceptance_spread < np.inf):
            raise InputError(f"acceptance_spread must be a finite number >= 0, got {self.acceptance_spread!r}")
        if self.spread_tokens is not None and not (isinstance(self.spread_tokens, int) and self.spread_tokens >= 1):
            raise InputError(f"spread_tokens must be a whole number >= 1 (or None), got {self.spread_tokens!r}")
        if self.n_requests is not None and self.n_requests < 1:
            raise InputError(f"n_requests must be >= 1, got {self.n_requests}")
        if self.arrival == "gamma" and not self.cv > 0:
            raise InputError(f"gamma arrivals need cv > 0, got {self.cv!r}")
        if self.arrival == "trace":
            if self.trace is None:
                raise InputError("trace arrivals need a timestamp trace (CSV with column arrival_s)")
            self.trace = read_trace(self.trace)          # read and checked once, here
            if self.rate is not None:
                self.trace.rate                          # a trace without a rate cannot be scaled to one

    def requests(self) -> int:
        """How many requests `make_requests` draws (for a Poisson or Gamma process, its expectation)."""
        if self.arrival == "trace" and self.rate is None:
            return len(self.trace.arrival_s)
        return int(self.n_requests or np.ceil(self.rate * self.duration_s))

    def mean_output(self, seed: int = 0) -> float:
        """The mean output length of its requests (a distribution's from 4096 draws of `seed`)."""
        if self.arrival == "trace" and self.trace.output_len is not None:
            return float(np.maximum(self.trace.output_len, 2).mean())
        return float(np.maximum(sample_lengths(self.output_len, 4096, np.random.default_rng(seed), "output length"),
                                2).mean())

    def mean_prompt(self, seed: int = 0) -> float:
        """The mean prompt length of its requests (as `mean_output`)."""
        if self.arrival == "trace" and self.trace.prompt_len is not None:
            return float(np.mean(self.trace.prompt_len))
        return float(sample_lengths(self.prompt_len, 4096, np.random.default_rng(seed), "prompt length").mean())

    def describe(self, rate: str | None = None) -> str:
        """The arrivals and lengths in words (a report's header); `rate` words the rate where it varies
        ("each rate tried")."""
        if self.arrival == "trace":
            how = ("replayed as recorded" if self.rate is None else
                   f"its gaps scaled to {rate or f'{self.rate:g} req/s'} (its shape, the rate replaced) and replayed "
                   f"back to back for {self.duration_s:g} s")
            lengths = ("" if self.trace.prompt_len is not None and self.trace.output_len is not None else
                       f", prompt {self.prompt_len}" if self.trace.output_len is not None else
                       f", output {self.output_len}" if self.trace.prompt_len is not None else
                       f", prompt {self.prompt_len}, output {self.output_len} tokens")
            return f"arrivals of {self.trace.describe()}, {how}{lengths}"
        kind = {"poisson": "Poisson", "fixed": "Fixed-rate (evenly spaced)"}.get(self.arrival, f"Gamma (CV {self.cv:g})")
        return f"{kind} arrivals, prompt {self.prompt_len}, output {self.output_len} tokens"


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


@dataclass(frozen=True)
class ArrivalTrace:
    """A timestamp trace, read and checked once (`read_trace`): arrival times in file order, never
    going backwards, and the prompt and output lengths where its columns give them."""

    source: str
    arrival_s: np.ndarray
    prompt_len: np.ndarray | None = None
    output_len: np.ndarray | None = None

    @property
    def span_s(self) -> float:
        return float(self.arrival_s[-1] - self.arrival_s[0])

    @property
    def rate(self) -> float:
        """Its own mean rate, (requests - 1) / span; InputError when it has none to scale."""
        if len(self.arrival_s) < 2 or self.span_s <= 0:
            raise InputError(f"{self.source}: {len(self.arrival_s)} request(s) over {self.span_s:g} s have no rate to "
                             "scale to another: give a trace of at least two distinct arrival times, or replay it "
                             "as recorded")
        return (len(self.arrival_s) - 1) / self.span_s

    def describe(self) -> str:
        rate = f" ({self.rate:.3g} req/s)" if len(self.arrival_s) > 1 and self.span_s > 0 else ""
        lengths = [name for name, v in (("prompt", self.prompt_len), ("output", self.output_len)) if v is not None]
        return (f"{self.source}: {len(self.arrival_s):,} requests over {self.span_s:g} s{rate}"
                + (f", {' and '.join(lengths)} lengths from its columns" if lengths else ""))


def _row(path, i: int) -> str:
    return f"{path}: row {i + 1} (line {i + 2})"


def _column(frame: pd.DataFrame, name: str, source, minimum: float, integer: bool) -> np.ndarray:
    """A column as numbers >= minimum (whole numbers when `integer`); InputError naming the first bad row."""
    values = pd.to_numeric(frame[name], errors="coerce").to_numpy(float)
    bad = ~np.isfinite(values) | (values < minimum) | ((values != np.round(values)) if integer else False)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        kind = f"a whole number of tokens >= {minimum:g}" if integer else f"a number of seconds >= {minimum:g}"
        value = frame[name].iloc[i]
        raise InputError(f"{_row(source, i)}: {name} is {value.item() if hasattr(value, 'item') else value!r}, "
                         f"not {kind}")
    return values.astype(np.int64) if integer else values


def read_trace(trace: str | Path | pd.DataFrame | ArrivalTrace, limit: float = READ_LIMIT) -> ArrivalTrace:
    """An arrival trace checked row by row: a CSV (or frame) with column arrival_s and optionally
    prompt_len and output_len. InputError naming the file and row for a value that is not a time or
    a length, or a time before the previous row's (two traces written one after the other, say: sorting
    would silently add their loads); a file whose parse would need more than `limit` bytes is refused
    before it is read (`TRACE_ROW_BYTES` per row, the rows counted from its size)."""
    if isinstance(trace, ArrivalTrace):
        return trace
    if isinstance(trace, pd.DataFrame):
        frame, source, columns = trace, "arrival trace", list(trace.columns)
    else:
        path = Path(trace)
        if not path.is_file():
            raise InputError(f"arrival trace {path}: " + ("a directory, not a CSV file" if path.is_dir() else
                                                           "file not found"))
        size = path.stat().st_size
        with path.open("rb") as handle:
            head = handle.read(1 << 16)
        rows = size / max(1.0, len(head) / max(1, head.count(b"\n")))
        check_fits(rows * TRACE_ROW_BYTES, f"arrival trace {path} ({gb(size)}, ~{rows:,.0f} rows)", limit,
                   "give a shorter trace")
        try:
            columns = list(pd.read_csv(path, index_col=False, nrows=0).columns)
            frame = pd.read_csv(path, index_col=False, usecols=lambda c: c in (*TRACE_COLUMNS, *LENGTH_COLUMNS))
        except pd.errors.EmptyDataError:
            raise InputError(f"arrival trace {path}: empty file (expected a CSV with a header line naming "
                             "arrival_s)") from None
        except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as exc:
            raise InputError(f"arrival trace {path}: not a CSV ({str(exc).strip().splitlines()[0]})") from None
        source = path
    missing = [c for c in TRACE_COLUMNS if c not in frame.columns]
    if missing:
        raise InputError(f"{source}: missing column(s) {', '.join(missing)} (has: "
                         f"{', '.join(map(str, columns)) or 'none'})")
    if frame.empty:
        raise InputError(f"{source}: no requests (a header and no rows)")
    times = _column(frame, "arrival_s", source, 0.0, integer=False)
    back = np.flatnonzero(np.diff(times) < 0)
    if back.size:
        i = int(back[0]) + 1
        raise InputError(f"{_row(source, i)}: arrival_s {times[i]:g} comes before the previous row's {times[i - 1]:g}: "
                         "timestamps must not go backwards (two traces written one after the other? replay each "
                         "on its own, or give one in time order)")
    lengths = {name: _column(frame, name, source, 1, integer=True) if name in frame.columns else None
               for name in LENGTH_COLUMNS}
    return ArrivalTrace(str(source), times, **lengths)


def make_requests(workload: Workload, seed: int = 0) -> pd.DataFrame:
    """One row per request: request_id, arrival_s, prompt_len, output_len (output >= 2: the prefill
    emits the first token); a trace's arrivals by the rule `Workload` states."""
    rng = np.random.default_rng(seed)
    rows = None                          # the trace row of each request
    if workload.arrival == "trace":
        trace = workload.trace
        n = len(trace.arrival_s)
        if workload.rate is None:
            times, rows = trace.arrival_s, np.arange(n)
        else:
            want = workload.n_requests or int(np.ceil(workload.rate * workload.duration_s)) + 1
            copies = -(-want // n)
            shape = (trace.arrival_s - trace.arrival_s[0]) * (trace.rate / workload.rate)
            times = (shape[None, :] + (n / workload.rate) * np.arange(copies)[:, None]).ravel()[:want]
            rows = np.tile(np.arange(n), copies)[:want]
            if workload.n_requests is None:
                keep = times < workload.duration_s
                times, rows = times[keep], rows[keep]
    else:
        n = workload.n_requests or int(np.ceil(workload.rate * workload.duration_s * 1.2 + 10 * np.sqrt(workload.rate * workload.duration_s) + 10))
        if workload.arrival == "poisson":
            gaps = rng.exponential(1.0 / workload.rate, n)
        elif workload.arrival == "fixed":
            gaps = np.full(n, 1.0 / workload.rate)
        else:
            shape = 1.0 / workload.cv ** 2
            gaps = rng.gamma(shape, 1.0 / (workload.rate * shape), n)
        times = np.cumsum(gaps)
        if workload.n_requests is None:
            times = times[times < workload.duration_s]
    n = times.size
    if n == 0:
        raise InputError("the workload produces no requests (raise rate or duration)")
    traced = workload.trace if rows is not None else None
    prompt = (traced.prompt_len[rows] if traced is not None and traced.prompt_len is not None
              else sample_lengths(workload.prompt_len, n, rng, "prompt length"))
    output = (traced.output_len[rows] if traced is not None and traced.output_len is not None
              else sample_lengths(workload.output_len, n, rng, "output length"))
    return pd.DataFrame({"request_id": np.arange(n), "arrival_s": times, "prompt_len": prompt,
                         "output_len": np.maximum(output, 2)})


def realised_rate(requests: pd.DataFrame) -> float:
    """Arrivals per second actually drawn (Poisson noise on a short window is tens of per cent)."""
    arrivals = requests["arrival_s"].to_numpy()
    span = float(arrivals.max() - arrivals.min()) if len(arrivals) > 1 else 0.0
    return (len(arrivals) - 1) / span if span > 0 else 0.0


def check_load(workloads: list[Workload], max_hours: float = MAX_HOURS, per_step: bool = False,
               what: str = "the simulated load", lower: str = "lower the rate or the duration") -> None:
    """InputError (one line, with the estimate) when serving `workloads` one after another would
    hold more memory than is available (SERVE_REQUEST_BYTES per request, SERVE_STEP_BYTES per logged
    step) or take more than `max_hours` of CPU (SERVE_TOKEN_S per output token): checked before any
    request is drawn. The costs are the simulator's fastest measured, so only a load that is surely
    too large is refused."""
    requests = [w.requests() for w in workloads]
    tokens = sum(n * w.mean_output() for n, w in zip(requests, workloads))
    peak = max(requests) * SERVE_REQUEST_BYTES + (max(n * w.mean_output() for n, w in zip(requests, workloads))
                                                  * SERVE_STEP_BYTES if per_step else 0.0)
    count = sum(requests)
    said = f"{what}: ~{count:,} requests" if count < 1e7 else f"{what}: ~{count:.3g} requests"
    said += f", ~{tokens:,.0f} output tokens" if tokens < 1e7 else f", ~{tokens:.3g} output tokens"
    check_fits(peak, said, lower=lower)
    seconds = tokens * SERVE_TOKEN_S
    if seconds > max_hours * 3600:
        raise InputError(f"{said} would take ~{duration(seconds)} of CPU to simulate, beyond --max-hours "
                         f"{max_hours:g}; {lower}, or raise --max-hours")
