"""Exact mode: enumerate every random choice a sampler makes and return its exact output law.

A sampler is any callable `(case, rng) -> outcome` (outcome hashable) that takes all of its
randomness from `rng` through the `verification.rules.RandomSource` protocol. Here `rng` is an
`ExactSource`: `uniform()` returns a symbolic uniform whose interval is split at each comparison
(`u <= x`, `u < x`, ... also after scaling/shifting by numbers, as an inverse CDF does), and
`categorical(w)` branches over every index with positive weight. Each branch point is a choice;
the sampler is re-run once per path (depth-first over choice scripts) and every path's
probability is an exact `Fraction`, so the law and its TV distance to the target are exact.

    exact_law(sampler, case, max_paths=..., memo=False, floats="convert", max_seconds=...) -> (law, paths)
    exact_check(sampler, case, target, max_paths=..., memo=False, floats="convert", max_seconds=...)
        -> ExactResult (law, tv, paths, passed = law == target, error: what the sampler raised on
        some path, notes: floats converted, estimate: the path count estimated before enumerating,
        seconds: the run time estimated before enumerating); a case whose laws differ in length
        and a token outside a vector target's vocabulary are InputErrors (`verification.inputs`)
    tv_distance(a, b) -> Fraction (half the L1 distance of two laws given as dicts)

Before enumerating (`verification.inputs`): the sampler's signature and the target are checked,
floats in the case and the target become exact Fractions (a note and an ExactConversionWarning
say so; floats="refuse" raises instead), so float rounding cannot make a correct rule look lossy.
Then `probes` random paths (each branch taken uniformly) give Knuth's unbiased estimate of the
path count, and their run time the seconds per path: above `max_paths`, or above `max_seconds`
(DEFAULT_MAX_SECONDS; None: no limit), the run is refused at once, naming the estimate; an
enumeration that runs past either anyway stops with the same refusal. Each probe is run twice
with the same choices: different outcomes mean randomness that bypasses `rng` or state kept
between calls, and raise InputError; so does a replayed path whose branch probabilities changed,
and any path after which a global random source moved (`verification.inputs.GlobalRandomness`:
numpy's global state, Python's `random`, torch's generator), even where the outcome did not.

Memoised mode (`memo=True`): a sampler may call `rng.memo(key)` where the law of the rest of its
run (its final outcome included) depends only on `key` (hashable; for a decode loop, the tokens
committed so far). The first two sub-trees reached with a key are enumerated in full and must
give the same conditional law (else InputError: the key misses some state); later ones are cut
and reuse it. `rules.NumpySource` has a no-op `memo`, so the same sampler runs in statistical mode.

Numbers a uniform is compared with are converted to Fractions exactly (floats included). Any
other use of a uniform (float(), arithmetic other than scaling and shifting) raises InputError.
"""
from __future__ import annotations

import random
import time
import warnings
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Callable, Hashable, Mapping, Sequence

import numpy as np

from common.errors import InputError, duration
from verification.inputs import (ExactConversionWarning, GlobalRandomness, SamplerError, call_sampler,
                                 check_case_laws, check_outcome_kinds, check_sampler, check_vocabulary, exact_case,
                                 exact_target)
from verification.memo import BYPASS, Memo

Sampler = Callable[[Any, Any], Hashable]

DEFAULT_MAX_PATHS = 2_000_000
DEFAULT_PROBES = 16
DEFAULT_MAX_SECONDS = 600.0     # 10 minutes per check; None: no limit


class _Cut(BaseException):
    """Raised by `ExactSource.memo` when the rest of the path is already known (a BaseException, so
    a sampler's own `except Exception` does not swallow it)."""

    def __init__(self, key: Hashable):
        super().__init__()
        self.key = key


def _exact(x: Any) -> Fraction:
    if isinstance(x, Fraction):
        return x
    try:
        return Fraction(x)
    except (TypeError, ValueError):
        raise InputError(f"exact mode: cannot compare a uniform with {x!r}") from None


class ExactSource:
    """Random source that follows a script of choices and records new branch points.

    Past the script it takes the first live branch (enumeration) or, given `chooser` (a
    `random.Random`), a uniformly random live one (probes; `width` is then Knuth's estimate)."""

    def __init__(self, script: tuple[int, ...], memo: Memo | None = None, expected: tuple | None = None,
                 chooser: random.Random | None = None):
        self.script = script
        self.taken: list[int] = []
        self.branches: list[tuple[int, list[int], tuple]] = []  # (depth, untried alternatives, probabilities)
        self.prob = Fraction(1)
        self.width = 1                 # product of live-branch counts (probes)
        self.floats = 0                # float numbers the sampler handed over (its own float arithmetic)
        self.memo_points: list[tuple[int, Hashable, Fraction]] = []
        self.memo_calls = 0
        self._memo, self._expected, self._chooser = memo, expected, chooser

    def exact(self, x: Any) -> Fraction:
        if isinstance(x, (float, np.floating)):
            self.floats += 1
        return _exact(x)

    def _choose(self, probs: Sequence[Fraction]) -> int:
        """Pick a branch among options with the given probabilities (sum 1, some may be 0)."""
        live = [i for i, pr in enumerate(probs) if pr > 0]
        if len(live) == 1:
            choice = live[0]
        else:
            depth = len(self.taken)
            if depth < len(self.script):
                choice = self.script[depth]
                if choice not in live or (depth == len(self.script) - 1 and self._expected is not None
                                          and tuple(probs) != self._expected):
                    raise InputError(f"exact mode: {BYPASS} (a replayed path branched differently)")
            elif self._chooser is not None:
                choice = self._chooser.choice(live)
                self.width *= len(live)
            else:
                choice = live[0]
                self.branches.append((depth, live[1:], tuple(probs)))
            self.taken.append(choice)
        self.prob *= probs[choice]
        return choice

    def uniform(self) -> "SymbolicUniform":
        return SymbolicUniform(_Interval(self), Fraction(1), Fraction(0))

    def categorical(self, weights: Sequence[Any]) -> int:
        exact = [self.exact(w) for w in weights]
        total = sum(exact)
        if not total > 0 or any(w < 0 for w in exact):
            raise InputError("categorical weights must be >= 0 with positive mass")
        return self._choose([w / total for w in exact])

    def memo(self, key: Hashable) -> None:
        """The rest of this run depends only on `key` (see the module docstring)."""
        self.memo_calls += 1
        if self._memo is None or len(self.taken) < len(self.script):  # off, or replaying a known prefix
            return
        try:
            hash(key)
        except TypeError:
            raise InputError(f"exact mode: memo key {key!r} is not hashable") from None
        if key in self._memo.verified:
            raise _Cut(key)
        self.memo_points.append((len(self.taken), key, self.prob))


class _Interval:
    """The set [lo, hi] a uniform is known to lie in on the current path."""

    def __init__(self, source: ExactSource):
        self.source, self.lo, self.hi = source, Fraction(0), Fraction(1)

    def below(self, t: Fraction) -> bool:
        """Branch on U < t (boundaries have measure zero)."""
        width = self.hi - self.lo
        p_true = min(max((t - self.lo) / width, Fraction(0)), Fraction(1))
        if self.source._choose([p_true, 1 - p_true]) == 0:
            self.hi = min(self.hi, t)
            return True
        self.lo = max(self.lo, t)
        return False


class SymbolicUniform:
    """scale * U + offset for a uniform U on the current path; comparisons branch the path."""

    __slots__ = ("_iv", "_scale", "_offset")

    def __init__(self, interval: _Interval, scale: Fraction, offset: Fraction):
        self._iv, self._scale, self._offset = interval, scale, offset

    def _exact(self, x: Any) -> Fraction:
        return self._iv.source.exact(x)

    def _affine(self, scale: Any, offset: Any) -> "SymbolicUniform":
        return SymbolicUniform(self._iv, self._scale * scale, self._offset * scale + offset)

    def __mul__(self, other):
        return self._affine(self._exact(other), Fraction(0))

    __rmul__ = __mul__

    def __truediv__(self, other):
        return self._affine(1 / self._exact(other), Fraction(0))

    def __add__(self, other):
        return self._affine(Fraction(1), self._exact(other))

    __radd__ = __add__

    def __sub__(self, other):
        return self._affine(Fraction(1), -self._exact(other))

    def __rsub__(self, other):
        return SymbolicUniform(self._iv, -self._scale, self._exact(other) - self._offset)

    def _less_than(self, x: Any) -> bool:
        """scale * U + offset < x."""
        bound = self._exact(x) - self._offset
        if self._scale == 0:
            return 0 < bound
        if self._scale > 0:
            return self._iv.below(bound / self._scale)
        return not self._iv.below(bound / self._scale)

    def __lt__(self, x):
        return self._less_than(x)

    __le__ = __lt__  # equality has probability zero

    def __gt__(self, x):
        return not self._less_than(x)

    __ge__ = __gt__

    def __float__(self):
        raise InputError("exact mode: a sampler converted a uniform to float; compare it with numbers instead")

    def __bool__(self):
        raise InputError("exact mode: a uniform was used as a truth value")

    def _unsupported(self, *_):
        raise InputError("exact mode: a uniform was used in an operation other than comparison, scaling or shifting")

    __pow__ = __rpow__ = __floordiv__ = __mod__ = __abs__ = __neg__ = __rtruediv__ = _unsupported
    __hash__ = None


def _run(sampler: Sampler, case: Any, source: ExactSource) -> tuple[Any, Hashable | None]:
    """(outcome, None) or (None, memo key) when the path was cut; SamplerError when the sampler raised
    (the sampler's own failure is a verdict, not a crash of the verifier)."""
    try:
        return call_sampler(sampler, (case, source), "exact"), None
    except _Cut as cut:
        return None, cut.key


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # e.g. numpy arrays: compare their text
        return repr(a) == repr(b)


@dataclass
class _Probes:
    paths: float             # Knuth's estimate of the path count
    memo: bool               # the sampler calls rng.memo
    seconds_per_path: float  # mean run time of one path


def estimate_paths(sampler: Sampler, case: Any, probes: int = DEFAULT_PROBES, seed: int = 0) -> tuple[float, bool]:
    """(Knuth's estimate of the path count from `probes` random paths, whether the sampler calls
    rng.memo); each probe is replayed and must repeat exactly (InputError otherwise)."""
    found = _probe(sampler, case, probes, seed, None)
    return found.paths, found.memo


def _probe(sampler: Sampler, case: Any, probes: int, seed: int, max_seconds: float | None) -> _Probes:
    """`probes` random paths, each run twice with the same choices (module docstring); they stop,
    refused, once they alone run past `max_seconds`."""
    chooser = random.Random(seed)
    widths, memo_calls, runs, start = [], 0, 0, time.perf_counter()
    guard = GlobalRandomness("exact")
    for _ in range(probes):
        first = ExactSource((), chooser=chooser)
        outcome, _ = _run(sampler, case, first)
        again = ExactSource(tuple(first.taken))
        repeat, _ = _run(sampler, case, again)
        guard.check()
        if not _same(outcome, repeat) or again.taken != first.taken or again.prob != first.prob:
            raise InputError(f"exact mode: {BYPASS} (outcome {outcome!r}, then {repeat!r})")
        widths.append(first.width)
        memo_calls += first.memo_calls
        runs += 2
        elapsed = time.perf_counter() - start
        if max_seconds is not None and elapsed > max_seconds:
            raise InputError(f"exact mode: {len(widths)} of {probes} probe paths alone took {duration(elapsed)}, past "
                             f"max_seconds = {max_seconds:g}; use a smaller case or statistical mode")
    per_path = (time.perf_counter() - start) / runs if runs else 0.0
    return _Probes(sum(widths) / len(widths) if widths else 0.0, memo_calls > 0, per_path)


@dataclass
class _Enumeration:
    law: dict
    paths: int
    estimate: float
    notes: list
    seconds: float = 0.0


def _enumerate(sampler: Sampler, case: Any, max_paths: int, memo: bool, probes: int, seed: int,
               max_seconds: float | None = DEFAULT_MAX_SECONDS) -> _Enumeration:
    if isinstance(max_paths, bool) or not isinstance(max_paths, int) or max_paths < 1:
        raise InputError(f"max_paths is {max_paths!r}, must be a positive integer")
    if max_seconds is not None and not (isinstance(max_seconds, (int, float)) and max_seconds > 0):
        raise InputError(f"max_seconds is {max_seconds!r}, must be a number of seconds > 0 (or None: no limit)")
    found = _probe(sampler, case, probes, seed, max_seconds)
    estimate, seconds = found.paths, found.paths * found.seconds_per_path
    cut = memo and found.memo          # memoised: far fewer paths than estimated, so neither bound applies yet
    if estimate > max_paths and not cut:
        raise InputError(f"exact mode: about {estimate:.3g} paths (estimated from {probes} random paths) exceed "
                         f"max_paths = {max_paths}; use a smaller case, raise max_paths (--max-paths), memo=True "
                         "(--memo) with rng.memo keys, or statistical mode")
    if max_seconds is not None and seconds > max_seconds and not cut:
        raise InputError(f"exact mode: about {estimate:.3g} paths at {found.seconds_per_path * 1e3:.3g} ms each "
                         f"(measured on {probes} random paths) would take ~{duration(seconds)}, past max_seconds = "
                         f"{max_seconds:g}; use a smaller case, memo=True (--memo) with rng.memo keys, statistical "
                         "mode, or raise max_seconds")
    law: dict = {}
    stack: list[tuple[tuple[int, ...], tuple | None]] = [((), None)]
    paths, floats, start = 0, 0, time.perf_counter()
    memo_state = Memo() if memo else None
    guard = GlobalRandomness("exact")
    while stack:
        script, expected = stack.pop()
        if memo_state is not None:
            memo_state.leave(script)
        source = ExactSource(script, memo_state, expected)
        outcome, cut_key = _run(sampler, case, source)
        guard.check()
        if len(source.taken) < len(script):
            raise InputError(f"exact mode: {BYPASS} (a replayed path ended early)")
        for depth, alternatives, probs in source.branches:
            prefix = tuple(source.taken[:depth])
            stack.extend((prefix + (alt,), probs) for alt in reversed(alternatives))
        if cut_key is None:
            try:
                contributions = {outcome: source.prob}
            except TypeError:
                raise InputError(f"exact mode: sampler outcome {outcome!r} is not hashable") from None
        else:
            contributions = {o: source.prob * w for o, w in memo_state.cache[cut_key].items()}
        if memo_state is not None:
            memo_state.enter(source)
            memo_state.add(contributions)
        for o, w in contributions.items():
            law[o] = law.get(o, Fraction(0)) + w
        floats += source.floats
        paths += 1
        if paths > max_paths:
            raise InputError(f"exact mode: more than max_paths = {max_paths} paths (estimated {estimate:.3g}); "
                             "use a smaller case, raise max_paths (--max-paths) or use statistical mode")
        if max_seconds is not None and time.perf_counter() - start > max_seconds:
            raise InputError(f"exact mode: {paths} paths took more than max_seconds = {max_seconds:g} (estimated "
                             f"{estimate:.3g} paths, ~{duration(seconds)}); use a smaller case, statistical mode, "
                             "or raise max_seconds")
    if memo_state is not None:
        memo_state.close_all()
    if sum(law.values()) != 1:  # pragma: no cover - would mean a bug in the enumeration itself
        raise AssertionError("exact enumeration lost probability mass")
    notes = []
    if floats:
        notes.append(f"the sampler handed {floats} floats of its own arithmetic to rng (comparisons or categorical "
                     "weights); their rounding can show as a TV near 1e-16: compute with Fractions")
    return _Enumeration(law, paths, estimate, notes, seconds)


def _prepare(sampler: Sampler, case: Any, floats: str, target: Any = None) -> tuple[Any, list]:
    check_sampler(sampler, (case, None), "exact")
    check_case_laws(case, target, "exact")
    case, notes = exact_case(case, floats)
    return case, notes


def _warn(notes: list) -> None:
    for note in notes:
        warnings.warn(f"exact mode: {note}", ExactConversionWarning, stacklevel=3)


def exact_law(sampler: Sampler, case: Any, max_paths: int = DEFAULT_MAX_PATHS, *, memo: bool = False,
              floats: str = "convert", probes: int = DEFAULT_PROBES, seed: int = 0,
              max_seconds: float | None = DEFAULT_MAX_SECONDS) -> tuple[dict, int]:
    """The exact output law of `sampler` on `case` and the number of paths (sampler runs) enumerated."""
    case, notes = _prepare(sampler, case, floats)
    result = _enumerate(sampler, case, max_paths, memo, probes, seed, max_seconds)
    _warn(notes + result.notes)
    return result.law, result.paths


def tv_distance(a: Mapping, b: Mapping) -> Fraction:
    """Total variation distance between two laws given as {outcome: probability}."""
    keys = set(a) | set(b)
    return sum((abs(_exact(a.get(k, 0)) - _exact(b.get(k, 0))) for k in keys), Fraction(0)) / 2


@dataclass
class ExactResult:
    law: dict            # outcome -> Fraction
    tv: Fraction         # exact TV distance to the target
    paths: int           # enumerated paths (sampler runs)
    passed: bool         # law equals the target exactly
    error: str = ""      # what the sampler raised, when it did (then passed is False)
    notes: list = field(default_factory=list)  # floats converted, floats seen in the sampler's arithmetic
    estimate: float = 0.0                      # path count estimated before enumerating
    seconds: float = 0.0                       # run time estimated before enumerating

def exact_check(sampler: Sampler, case: Any, target: Any, max_paths: int = DEFAULT_MAX_PATHS, *,
                memo: bool = False, floats: str = "convert", probes: int = DEFAULT_PROBES,
                seed: int = 0, max_seconds: float | None = DEFAULT_MAX_SECONDS) -> ExactResult:
    """Enumerate `sampler` on `case` and compare its law with `target` ({outcome: p} or a vector over token ids)."""
    vector_target = target
    target, target_notes = exact_target(target, floats)
    case, notes = _prepare(sampler, case, floats, vector_target)
    notes += target_notes
    try:
        result = _enumerate(sampler, case, max_paths, memo, probes, seed, max_seconds)
    except SamplerError as exc:
        _warn(notes)
        return ExactResult(law={}, tv=Fraction(1), paths=0, passed=False, error=str(exc), notes=notes)
    notes += result.notes
    _warn(notes)
    check_outcome_kinds(result.law, target)
    check_vocabulary(result.law, vector_target, "exact")
    tv = tv_distance(result.law, target)
    return ExactResult(law=result.law, tv=tv, paths=result.paths, passed=tv == 0, notes=notes,
                       estimate=result.estimate, seconds=result.seconds)
