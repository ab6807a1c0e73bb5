"""Statistical mode: for large vocabularies and GPU code, where exact enumeration is impossible.

    samples_needed(k, delta, alpha, beta) -> n
        Smallest n such that Pearson's chi-square test over k cells at level alpha has power
        >= 1 - beta against every law at TV distance >= delta: the noncentrality of such a law is
        n * sum((p' - p)^2 / p) >= n * (sum |p' - p|)^2 = 4 n delta^2 (Cauchy-Schwarz), so n is
        the noncentral chi-square (df = k - 1) power requirement divided by 4 delta^2.
    detectable_tv(n, k, alpha, beta) -> delta, the inverse.
    certified_eps(n, k, alpha) -> eps: with probability >= 1 - alpha the TV distance between the
        empirical law of n samples over k outcomes and the true law is <= eps
        (E <= sqrt((k - 1) / n) / 2, plus McDiarmid's sqrt(ln(1/alpha) / (2 n))). Every result
        reports TV <= TV_hat + eps (two-sample: + eps of both samples).
    statistical_check(sampler, case, target=..., reference=..., ...) -> StatResult

Order of the checks: support (any sample with target probability 0 fails at once), Pearson
chi-square with cells pooled by EXPECTED count only (never by observed counts), and for
single-draft rules a two-sided binomial test of P(accept) = sum(min(p, q)). `tests` is the
number of checks in the run (Bonferroni: each uses alpha / tests and the sample size for it).
The power guarantee holds for the TV distance between the pooled laws; pooled cells only
contain outcomes whose expected count is below `min_expected`.

A sampler is `(case, rng) -> outcome` (a token id) called n times with `rng = rules.NumpySource(seed)` (the
same protocol as exact mode), or, with `batched=True`, `(case, rng: np.random.Generator, n) ->
outcomes` (an int array), or `(outcomes, accepted)` when an acceptance rate is tested. The
signature and the outcomes are checked: a wrong signature, outcomes that are not token ids (a
tuple without accept_rate, a float, None), a token id outside a target vector's vocabulary, a case
whose laws differ in length (`verification.inputs.check_case_laws`), a target that is not a finite
probability vector, or an n that is not a positive integer raise one-line InputErrors. A sampler
that raises is a failed check whose reason names its exception and draw, as exact mode's `error`.

Before the n draws, a probe of PROBE_DRAWS draws is run with the same seed as the check (twice for
a batched sampler): its time per draw estimates the run, refused above `max_seconds`
(DEFAULT_MAX_SECONDS; None: no limit) with the estimate in the message, and its outcomes must
come back the same in the check's own draws: a seeded run that does not repeat draws randomness
outside rng or keeps state between calls (InputError, as in exact mode); so does a sampler after
which a global random source moved (`verification.inputs.GlobalRandomness`).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np
from scipy import optimize, stats

from verification import rules
from common.errors import InputError, duration
from verification.inputs import (GlobalRandomness, SamplerError, call_sampler, check_case_laws, check_count,
                                 check_sampler, check_vocabulary)
from verification.memo import BYPASS

MIN_EXPECTED = 5.0
PROBE_DRAWS = 2_048             # draws of the probe that times a check and repeats its seed
DEFAULT_MAX_SECONDS = 600.0     # 10 minutes per check; None: no limit


def _check_levels(alpha: float, beta: float) -> None:
    for name, value in (("alpha", alpha), ("beta", beta)):
        if not 0 < value < 1:
            raise InputError(f"{name} is {value}, must lie in (0, 1)")


def _noncentrality_needed(df: int, alpha: float, beta: float) -> float:
    """Smallest noncentrality whose chi-square(df) test at level alpha has power 1 - beta."""
    critical = stats.chi2.isf(alpha, df)
    def shortfall(lam):
        return stats.ncx2.sf(critical, df, lam) - (1 - beta)
    hi = 1.0
    while shortfall(hi) < 0:
        hi *= 2
    return optimize.brentq(shortfall, 0.0, hi, xtol=1e-9, rtol=1e-12)


def samples_needed(k: int, delta: float, alpha: float, beta: float) -> int:
    """Samples for a chi-square test over k cells to catch TV >= delta (false alarm alpha, miss beta)."""
    _check_levels(alpha, beta)
    if k < 2:
        raise InputError(f"k is {k}, a chi-square test needs at least 2 cells")
    if not 0 < delta <= 1:
        raise InputError(f"delta is {delta}, must lie in (0, 1]")
    return math.ceil(_noncentrality_needed(k - 1, alpha, beta) / (4 * delta * delta))


def detectable_tv(n: int, k: int, alpha: float, beta: float) -> float:
    """The TV distance that n samples over k cells catch with miss probability beta at level alpha."""
    _check_levels(alpha, beta)
    if n < 1 or k < 2:
        raise InputError(f"n = {n} and k = {k} must be >= 1 and >= 2")
    return math.sqrt(_noncentrality_needed(k - 1, alpha, beta) / (4 * n))


def certified_eps(n: int, k: int, alpha: float) -> float:
    """Distribution-free bound on TV(empirical law of n samples over k outcomes, true law), prob 1 - alpha."""
    return 0.5 * math.sqrt(max(k - 1, 0) / n) + math.sqrt(math.log(1 / alpha) / (2 * n))


def pool_by_expected(expected: np.ndarray, min_expected: float = MIN_EXPECTED) -> np.ndarray:
    """Cell -> group id: cells sorted by expected count, the smallest merged until each group has
    at least `min_expected` (a short last group joins the previous one). Observed counts are not read."""
    order = np.argsort(expected, kind="stable")
    group = np.empty(len(expected), dtype=np.int64)
    gid, running = 0, 0.0
    for cell in order:
        group[cell] = gid
        running += expected[cell]
        if running >= min_expected:
            gid, running = gid + 1, 0.0
    if running > 0 and gid > 0:  # leftover cells below the minimum join the last full group
        group[group == gid] = gid - 1
    return group


@dataclass
class StatResult:
    passed: bool
    reason: str                  # "" when passed, else what failed
    n: int                       # samples drawn (per sampler)
    cells: int                   # chi-square cells after pooling
    chi2: float
    p_value: float
    tv_hat: float                # TV between the empirical law and the target (or the two empirical laws)
    eps: float                   # certified: TV <= tv_hat + eps with probability >= 1 - alpha
    level: float                 # alpha after Bonferroni
    accept_rate: float | None = None
    accept_p_value: float | None = None
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)

    @property
    def tv_bound(self) -> float:
        return self.tv_hat + self.eps


def _token_ids(outcomes: Any, n: int, accept_hint: bool) -> np.ndarray:
    """Outcomes as an int array of n token ids; InputError naming the first outcome that is not one
    (None included: the sampler forgot to return)."""
    if isinstance(outcomes, np.ndarray) and outcomes.dtype.kind in "iu" and outcomes.shape == (n,):
        return outcomes
    values = list(outcomes) if isinstance(outcomes, (list, tuple, np.ndarray)) else [outcomes]
    wrong = [v for v in values if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer))]
    if wrong:
        bad = wrong[0]
        hint = (" (return (token, accepted) pairs only together with accept_rate=...)"
                if accept_hint and isinstance(bad, tuple) else "")
        raise InputError(f"statistical mode: the sampler returned {bad!r} ({type(bad).__name__}); outcomes must be "
                         f"token ids (int){hint}")
    if len(values) != n:
        raise InputError(f"statistical mode: the sampler returned {len(values)} outcomes, {n} were asked for")
    return np.asarray(values, dtype=np.int64)


def _draw(sampler: Callable, case: Any, n: int, seed: int, batched: bool, want_accept: bool, twice: bool = False):
    """n outcomes (and acceptance flags) of `sampler` seeded with `seed`; `twice`: a per-call
    sampler runs every draw twice from the same rng state, and the two must agree (a batched one is
    compared by its caller, batch against batch)."""
    if batched:
        check_sampler(sampler, (case, None, n), "statistical")
        out = call_sampler(sampler, (case, np.random.default_rng(seed), n), "statistical", f"a batch of {n}")
        outcomes, accepted = out if isinstance(out, tuple) else (out, None)
        if outcomes is None:
            raise InputError(f"statistical mode: the batched sampler returned None; it must return {n} token ids "
                             "(an int array)")
        return _token_ids(np.asarray(outcomes), n, True), (None if accepted is None else np.asarray(accepted, dtype=bool))
    check_sampler(sampler, (case, None), "statistical")
    source = rules.NumpySource(seed)
    draws = [_twice(sampler, case, source, i) if twice else call_sampler(sampler, (case, source), "statistical",
                                                                          f"draw {i}") for i in range(n)]
    if want_accept:
        bad = next((d for d in draws if not (isinstance(d, tuple) and len(d) == 2)), None)
        if bad is not None:
            raise InputError(f"statistical mode: with accept_rate the sampler must return (token, accepted); it "
                             f"returned {bad!r}")
        return _token_ids([d[0] for d in draws], n, False), np.asarray([bool(d[1]) for d in draws])
    return _token_ids(draws, n, True), None


def _twice(sampler: Callable, case: Any, source: rules.NumpySource, i: int) -> Any:
    state = source.rng.bit_generator.state
    first = call_sampler(sampler, (case, source), "statistical", f"draw {i}")
    after, source.rng.bit_generator.state = source.rng.bit_generator.state, state
    again = call_sampler(sampler, (case, source), "statistical", f"draw {i}")
    if repr(first) != repr(again) or source.rng.bit_generator.state != after:
        raise InputError(f"statistical mode: {BYPASS} (draw {i} run twice from the same rng state: {first!r}, then "
                         f"{again!r})")
    return first


def _target_vector(target: Mapping | np.ndarray | None, vocab: int | None) -> np.ndarray:
    """The target law as a probability vector over token ids; InputError naming the first entry that
    is not a finite probability (a NaN compares false with everything and would pass any sampler)."""
    try:
        if isinstance(target, Mapping):
            if any(isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0 for k in target):
                raise InputError("statistical mode: target keys must be token ids (ints >= 0)")
            vec = np.zeros(vocab or (max(int(k) for k in target) + 1 if target else 0))
            for key, value in target.items():
                vec[int(key)] = float(value)
        else:
            vec = np.asarray(target, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, InputError):
            raise
        raise InputError(f"statistical mode: target must be a vector of probabilities over token ids or "
                         f"{{token id: probability}} ({exc})") from None
    if vec.ndim != 1 or vec.size == 0:
        raise InputError(f"statistical mode: target must be a non-empty vector over token ids, got shape {vec.shape}")
    bad = np.flatnonzero(~np.isfinite(vec) | (vec < 0))
    if bad.size:
        raise InputError(f"statistical mode: target[{int(bad[0])}] is {float(vec[bad[0]])}, not a probability >= 0")
    if abs(vec.sum() - 1) > rules.SUM_TOLERANCE:
        raise InputError(f"statistical mode: target probabilities sum to {vec.sum():.9g}, not 1")
    return vec


@dataclass
class _Probe:
    """PROBE_DRAWS draws with the check's seed: their outcomes and the time per draw."""

    outcomes: np.ndarray
    accepted: np.ndarray | None
    seconds_per_draw: float


def _probe(sampler: Callable, case: Any, n: int, seed: int, batched: bool, want_accept: bool) -> _Probe:
    """The probe of one sampler (module docstring). A batched sampler runs it twice, must repeat, and
    is timed on its second run (the first may warm its kernels up)."""
    m = min(n, PROBE_DRAWS)
    guard = GlobalRandomness("statistical")
    start = time.perf_counter()
    try:
        first = _draw(sampler, case, m, seed, batched, want_accept, twice=True)
        if batched:
            start = time.perf_counter()
            _same_draws(first, _draw(sampler, case, m, seed, batched, want_accept), m)
    except InputError:
        guard.check()            # name the global source it drew from, where one moved
        raise
    per_draw = (time.perf_counter() - start) / m / (1 if batched else 2)
    guard.check()
    return _Probe(*first, per_draw)


def _same_draws(first: tuple, again: tuple, m: int) -> None:
    """InputError when two draws with one seed differ in their first m outcomes or acceptance flags."""
    for a, b in zip(first, again):
        if a is None and b is None:
            continue
        a, b = np.asarray(a)[:m], np.asarray(b)[:m]
        differ = np.flatnonzero(a != b)
        if differ.size:
            i = int(differ[0])
            raise InputError(f"statistical mode: {BYPASS} (draw {i} with the same seed: {a[i]!r}, then {b[i]!r})")


def sample_size(target: Mapping | np.ndarray | None = None, *, alpha: float = 1e-6, beta: float = 1e-6,
                delta: float = 0.01, n: int | None = None, tests: int = 1) -> int:
    """The draws `statistical_check` makes per sampler with these arguments (`target` None: a
    two-sample check against a reference)."""
    _check_levels(alpha, beta)
    if n is not None:
        return check_count(n, "n", "statistical", "the draws per sampler (None: the sample size that catches delta)")
    level = alpha / check_count(tests, "tests", "statistical", "the checks of the run (Bonferroni)")
    support = 2 if target is None else int((_target_vector(target, None) > 0).sum())
    return samples_needed(max(support, 2), delta, level, beta)


def estimate_seconds(sampler: Callable, case: Any, n: int, *, reference: Callable | None = None, seed: int = 0,
                     batched: bool = False, accept_rate: float | None = None) -> float:
    """The seconds `statistical_check` will take to draw n outcomes (of each sampler), from its probe."""
    probes = [_probe(sampler, case, n, seed, batched, accept_rate is not None)]
    if reference is not None:
        probes.append(_probe(reference, case, n, seed + 1, batched, False))
    return n * sum(p.seconds_per_draw for p in probes)


def statistical_check(sampler: Callable, case: Any, target: Mapping | np.ndarray | None = None,
                      reference: Callable | None = None, *, alpha: float = 1e-6, beta: float = 1e-6,
                      delta: float = 0.01, n: int | None = None, tests: int = 1, seed: int = 0,
                      batched: bool = False, accept_rate: float | None = None,
                      min_expected: float = MIN_EXPECTED,
                      max_seconds: float | None = DEFAULT_MAX_SECONDS) -> StatResult:
    """Check that `sampler` draws outcomes (token ids 0..V-1) from `target`, or as `reference` does."""
    _check_levels(alpha, beta)
    if (target is None) == (reference is None):
        raise InputError("give exactly one of target (a law) or reference (a sampler)")
    if max_seconds is not None and not (isinstance(max_seconds, (int, float)) and max_seconds > 0):
        raise InputError(f"max_seconds is {max_seconds!r}, must be a number of seconds > 0 (or None: no limit)")
    n = sample_size(target, alpha=alpha, beta=beta, delta=delta, n=n, tests=tests)
    check_case_laws(case, target, "statistical")
    level = alpha / tests
    start = time.perf_counter()
    try:
        return _checked(sampler, case, target, reference, n, level, seed, batched, accept_rate, min_expected,
                        max_seconds, start)
    except SamplerError as exc:        # the sampler's own failure is a verdict, as in exact mode
        return StatResult(False, f"the sampler raised {exc}", n, 0, math.inf, 0.0, 1.0, 0.0, level,
                          seconds=time.perf_counter() - start)


def _checked(sampler: Callable, case: Any, target, reference, n: int, level: float, seed: int, batched: bool,
             accept_rate: float | None, min_expected: float, max_seconds: float | None, start: float) -> StatResult:
    """statistical_check once its arguments are checked (SamplerError when a sampler raises)."""
    want = accept_rate is not None
    probes = [_probe(sampler, case, n, seed, batched, want)]
    if reference is not None:
        probes.append(_probe(reference, case, n, seed + 1, batched, False))
    seconds = n * sum(p.seconds_per_draw for p in probes)
    if max_seconds is not None and seconds > max_seconds:
        raise InputError(f"statistical mode: n = {n:,} draws{' of each sampler' if reference else ''} at "
                         f"{sum(p.seconds_per_draw for p in probes) * 1e6:.3g} us each (measured on "
                         f"{min(n, PROBE_DRAWS):,}) would take ~{duration(seconds)}, past max_seconds = "
                         f"{max_seconds:g}; raise delta (the TV to catch), alpha or beta, pass a smaller n, or raise "
                         "max_seconds")
    guard = GlobalRandomness("statistical")
    if reference is None:
        law = _target_vector(target, None)
        support = int((law > 0).sum())
        outcomes, accepted = _draw(sampler, case, n, seed, batched, want)
        guard.check()
        if not batched:
            _same_draws((probes[0].outcomes, probes[0].accepted), (outcomes, accepted), min(n, PROBE_DRAWS))
        check_vocabulary(outcomes, target, "statistical")
        outside = (outcomes < 0) | (outcomes >= len(law))
        bad = outcomes[outside] if outside.any() else outcomes[law[np.clip(outcomes, 0, len(law) - 1)] == 0]
        if bad.size:
            return StatResult(False, f"support: outcome {int(bad[0])} has target probability 0", n, 0, math.inf,
                              0.0, 1.0, 0.0, level, seconds=time.perf_counter() - start)
        counts = np.bincount(outcomes, minlength=len(law)).astype(np.float64)
        cells = np.flatnonzero(law > 0)
        group = pool_by_expected(n * law[cells], min_expected)
        observed = np.bincount(group, weights=counts[cells])
        expected = np.bincount(group, weights=n * law[cells])
        chi2 = float(((observed - expected) ** 2 / expected).sum())
        df = max(len(expected) - 1, 1)
        tv_hat = 0.5 * float(np.abs(counts / n - law).sum())
        eps = certified_eps(n, support, level)
    else:
        outcomes, accepted = _draw(sampler, case, n, seed, batched, want)
        ref, _ = _draw(reference, case, n, seed + 1, batched, False)
        guard.check()
        if not batched:
            m = min(n, PROBE_DRAWS)
            _same_draws((probes[0].outcomes, probes[0].accepted), (outcomes, accepted), m)
            _same_draws((probes[1].outcomes, None), (ref, None), m)
        size = int(max(outcomes.max(), ref.max())) + 1
        a, b = np.bincount(outcomes, minlength=size), np.bincount(ref, minlength=size)
        pooled = (a + b) / 2.0
        seen = np.flatnonzero(pooled > 0)
        group = pool_by_expected(pooled[seen], min_expected)
        ga, gb, ge = (np.bincount(group, weights=x[seen].astype(np.float64)) for x in (a, b, pooled))
        chi2 = float((((ga - ge) ** 2 + (gb - ge) ** 2) / ge).sum())
        df = max(len(ge) - 1, 1)
        tv_hat = 0.5 * float(np.abs(a - b).sum()) / n
        eps = 2 * certified_eps(n, len(seen), level)
    p_value = float(stats.chi2.sf(chi2, df))
    result = StatResult(p_value >= level, "" if p_value >= level else f"chi-square p = {p_value:.3g} < {level:.3g}",
                        n, df + 1, chi2, p_value, tv_hat, eps, level)
    if accept_rate is not None:
        if accepted is None:
            raise InputError("accept_rate given but the sampler reports no acceptance flags")
        hits = int(accepted.sum())
        result.accept_rate = hits / n
        result.accept_p_value = float(stats.binomtest(hits, n, accept_rate).pvalue)
        if result.accept_p_value < level and result.passed:
            result.passed = False
            result.reason = f"acceptance {hits / n:.5f} vs expected {accept_rate:.5f} (binomial p = {result.accept_p_value:.3g})"
    result.seconds = time.perf_counter() - start
    return result
