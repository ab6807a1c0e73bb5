"""Exact mode: enumerate every random choice a sampler makes and return its exact output law.

A sampler is any callable `(case, rng) -> outcome` (outcome hashable) that takes all of its
randomness from `rng` through the `verification.rules.RandomSource` protocol. Here `rng` is an
`ExactSource`: `uniform()` returns a symbolic uniform whose interval is split at each comparison
(`u <= x`, `u < x`, ... also after scaling/shifting by numbers, as an inverse CDF does), and
`categorical(w)` branches over every index with positive weight. Each branch point is a choice;
the sampler is re-run once per path (depth-first over choice scripts) and every path's
probability is an exact `Fraction`, so the law and its TV distance to the target are exact.

    exact_law(sampler, case, max_paths=...) -> (law: dict[outcome, Fraction], paths: int)
    exact_check(sampler, case, target) -> ExactResult (law, tv, paths, passed = law == target;
        a sampler that raises on some path fails, with the error in `ExactResult.error`)
    tv_distance(a, b) -> Fraction (half the L1 distance of two laws given as dicts)

Numbers a uniform is compared with are converted to Fractions exactly (floats included). Any
other use of a uniform (float(), arithmetic other than scaling and shifting) raises InputError.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable, Hashable, Mapping, Sequence

from common.errors import InputError

Sampler = Callable[[Any, Any], Hashable]

DEFAULT_MAX_PATHS = 2_000_000


class SamplerError(Exception):
    """The sampler under test raised on one of its paths (the original error is the cause)."""


def _exact(x: Any) -> Fraction:
    if isinstance(x, Fraction):
        return x
    try:
        return Fraction(x)
    except (TypeError, ValueError):
        raise InputError(f"exact mode: cannot compare a uniform with {x!r}") from None


class ExactSource:
    """Random source that follows a script of choices and records new branch points."""

    def __init__(self, script: tuple[int, ...]):
        self.script = script
        self.taken: list[int] = []
        self.branches: list[tuple[int, list[int]]] = []  # (depth, untried alternatives)
        self.prob = Fraction(1)

    def _choose(self, probs: Sequence[Fraction]) -> int:
        """Pick a branch among options with the given probabilities (sum 1, some may be 0)."""
        live = [i for i, pr in enumerate(probs) if pr > 0]
        if len(live) == 1:
            choice = live[0]
        else:
            depth = len(self.taken)
            if depth < len(self.script):
                choice = self.script[depth]
            else:
                choice = live[0]
                self.branches.append((depth, live[1:]))
            self.taken.append(choice)
        self.prob *= probs[choice]
        return choice

    def uniform(self) -> "SymbolicUniform":
        return SymbolicUniform(_Interval(self), Fraction(1), Fraction(0))

    def categorical(self, weights: Sequence[Any]) -> int:
        exact = [_exact(w) for w in weights]
        total = sum(exact)
        if not total > 0 or any(w < 0 for w in exact):
            raise InputError("categorical weights must be >= 0 with positive mass")
        return self._choose([w / total for w in exact])


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

    def _affine(self, scale: Any, offset: Any) -> "SymbolicUniform":
        return SymbolicUniform(self._iv, self._scale * scale, self._offset * scale + offset)

    def __mul__(self, other):
        return self._affine(_exact(other), Fraction(0))

    __rmul__ = __mul__

    def __truediv__(self, other):
        return self._affine(1 / _exact(other), Fraction(0))

    def __add__(self, other):
        return self._affine(Fraction(1), _exact(other))

    __radd__ = __add__

    def __sub__(self, other):
        return self._affine(Fraction(1), -_exact(other))

    def __rsub__(self, other):
        return SymbolicUniform(self._iv, -self._scale, _exact(other) - self._offset)

    def _less_than(self, x: Any) -> bool:
        """scale * U + offset < x."""
        bound = _exact(x) - self._offset
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


def exact_law(sampler: Sampler, case: Any, max_paths: int = DEFAULT_MAX_PATHS) -> tuple[dict, int]:
    """The exact output law of `sampler` on `case` and the number of paths enumerated."""
    law: dict = {}
    stack: list[tuple[int, ...]] = [()]
    paths = 0
    while stack:
        script = stack.pop()
        source = ExactSource(script)
        try:
            outcome = sampler(case, source)
        except Exception as exc:  # the sampler's own failure is a verdict, not a crash of the verifier
            if isinstance(exc, InputError) and str(exc).startswith("exact mode:"):
                raise
            raise SamplerError(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from exc
        if len(source.taken) < len(script):
            raise InputError("exact mode: the sampler is not deterministic given its random choices")
        for depth, alternatives in source.branches:
            prefix = tuple(source.taken[:depth])
            stack.extend(prefix + (alt,) for alt in reversed(alternatives))
        try:
            law[outcome] = law.get(outcome, Fraction(0)) + source.prob
        except TypeError:
            raise InputError(f"exact mode: sampler outcome {outcome!r} is not hashable") from None
        paths += 1
        if paths > max_paths:
            raise InputError(f"exact mode: more than {max_paths} paths; use a smaller case or statistical mode")
    if sum(law.values()) != 1:  # pragma: no cover - would mean a bug in the enumeration itself
        raise AssertionError("exact enumeration lost probability mass")
    return law, paths


def tv_distance(a: Mapping, b: Mapping) -> Fraction:
    """Total variation distance between two laws given as {outcome: probability}."""
    keys = set(a) | set(b)
    return sum((abs(_exact(a.get(k, 0)) - _exact(b.get(k, 0))) for k in keys), Fraction(0)) / 2


@dataclass
class ExactResult:
    law: dict            # outcome -> Fraction
    tv: Fraction         # exact TV distance to the target
    paths: int           # enumerated paths
    passed: bool         # law equals the target exactly
    error: str = ""      # what the sampler raised, when it did (then passed is False)

    def worst_outcome(self, target: Mapping) -> Hashable | None:
        """The outcome with the largest |law - target| (None when they agree)."""
        keys = set(self.law) | set(target)
        if not keys or self.passed:
            return None
        return max(keys, key=lambda k: abs(self.law.get(k, 0) - _exact(target.get(k, 0))))


def exact_check(sampler: Sampler, case: Any, target: Mapping, max_paths: int = DEFAULT_MAX_PATHS) -> ExactResult:
    """Enumerate `sampler` on `case` and compare its law with `target` exactly."""
    try:
        law, paths = exact_law(sampler, case, max_paths=max_paths)
    except SamplerError as exc:
        return ExactResult(law={}, tv=Fraction(1), paths=0, passed=False, error=str(exc))
    tv = tv_distance(law, target)
    return ExactResult(law=law, tv=tv, paths=paths, passed=tv == 0)
