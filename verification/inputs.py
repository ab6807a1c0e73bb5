"""What a user hands the verifier, checked before any sampling: sampler, case, target, outcomes.

Exact mode must not judge a correct rule lossy because of float rounding, nor call a programming
mistake a verdict, so:
    check_sampler(sampler, args, mode)  InputError unless `sampler` is callable with `args`
        (names the sampler and the signature it needs), instead of a "lossy, TV = 1" verdict.
    exact_case(case, floats) -> (case, notes)  floats in the case become exact `Fraction`s
        (`Fraction(x)` is the float's exact binary value); a float vector that is a probability
        vector (entries >= 0, sum within `rules.SUM_TOLERANCE` of 1) is then divided by its exact
        sum, which differs from 1 by rounding only, so the rules see an exact distribution. Lists,
        tuples, dicts, numpy arrays and dataclasses are converted recursively; other objects pass
        through. `floats="refuse"` raises InputError on the first float instead.
    exact_target(target, floats) -> (law, notes)  {outcome: probability} or a probability vector
        over token ids 0..V-1, converted the same way; InputError on anything else.
    check_outcome_kinds(law, target)  InputError when no outcome of the sampler has the kind (int,
        tuple, ...) of any target outcome: a sampler returning a Step or (token, accepted) against
        a law over token ids is a mistake, not a TV of 1.
    GlobalRandomness(mode)  a snapshot of the global random sources a sampler could draw from
        instead of rng (numpy's global state, Python's `random`, torch's generator once torch is
        loaded); `.check()` raises InputError naming the ones a sampler moved, in both modes.
    check_count(n, name, mode)  a positive integer count (draws, probes), or a one-line InputError.
    check_case_laws(case, target, mode)  InputError when the probability vectors of a case given as a
        tuple or list ((p, q), as the README's sampler takes it) and a target vector differ in length:
        a rule zips them and would be judged on the shorter ("lossy, TV 1"), not on the case.
    check_vocabulary(outcomes, target, mode)  InputError naming the first token id outside a target
        given as a vector over token ids 0..V-1 (a sampler's indexing mistake, not a law to compare).
    call_sampler(sampler, args, mode, where)  the sampler's return, or SamplerError naming what it
        raised: the sampler's own failure is a verdict (a failed check naming it), in both modes.
Conversions are reported in the result's `notes` and as an `ExactConversionWarning`.
"""
from __future__ import annotations

import ctypes
import dataclasses
import inspect
import math
import random
import sys
from fractions import Fraction
from typing import Any, Mapping

import numpy as np

from common.errors import InputError
from verification.rules import SUM_TOLERANCE

FLOAT_POLICIES = ("convert", "refuse")


class ExactConversionWarning(UserWarning):
    """Float probabilities were converted to exact Fractions before exact enumeration."""


class SamplerError(Exception):
    """The sampler under test raised (the original error is the cause): a verdict, not bad input."""


def call_sampler(sampler: Any, args: tuple, mode: str, where: str = "") -> Any:
    """`sampler(*args)`; SamplerError "<Type>: <first line> (<where>)" when the sampler itself raises.
    The verifier's own refusals (`<mode> mode: ...`) pass through, and so does a BaseException (a
    Ctrl-C, exact mode's memo cut)."""
    try:
        return sampler(*args)
    except Exception as exc:
        if isinstance(exc, InputError) and str(exc).startswith(f"{mode} mode:"):
            raise
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise SamplerError(f"{type(exc).__name__}: {text}" + (f" ({where})" if where else "")) from exc


def _probability_vector(value: Any) -> list | None:
    """`value` as a list when it is a flat vector of probabilities (entries >= 0 summing to 1), else None."""
    values = value.tolist() if isinstance(value, np.ndarray) and value.ndim == 1 else value
    if not isinstance(values, (list, tuple)) or hasattr(values, "_fields") or not _is_numbers(list(values)):
        return None
    try:
        total = float(sum(values))
    except (TypeError, ValueError, OverflowError):
        return None
    return list(values) if all(v >= 0 for v in values) and abs(total - 1) <= SUM_TOLERANCE else None


def check_case_laws(case: Any, target: Any, mode: str) -> None:
    """InputError naming the two lengths (module docstring)."""
    laws = []
    if isinstance(case, (list, tuple)) and not hasattr(case, "_fields"):
        laws = [(f"case[{i}]", law) for i, item in enumerate(case) if (law := _probability_vector(item)) is not None]
    if not isinstance(target, Mapping) and (law := _probability_vector(target)) is not None and laws:
        laws.append(("the target", law))
    sizes = {len(law) for _, law in laws}
    if len(sizes) > 1:
        (a, first), (b, other) = laws[0], next((n, law) for n, law in laws if len(law) != len(laws[0][1]))
        raise InputError(f"{mode} mode: {a} has {len(first)} probabilities and {b} {len(other)}: the laws of a case "
                         "cover one vocabulary (a rule that zips them would be judged on the shorter)")


def vocabulary(target: Any) -> int | None:
    """V of a target given as a vector over token ids 0..V-1; None for {outcome: probability}."""
    if isinstance(target, Mapping) or not isinstance(target, (list, tuple, np.ndarray)):
        return None
    return len(target)


def check_vocabulary(outcomes: Any, target: Any, mode: str) -> None:
    """InputError naming the first token id outside a vector target's vocabulary (module docstring)."""
    size = vocabulary(target)
    if size is None:
        return
    for outcome in outcomes:
        if isinstance(outcome, (int, np.integer)) and not isinstance(outcome, (bool, np.bool_)) \
                and not 0 <= outcome < size:
            raise InputError(f"{mode} mode: the sampler returned token {int(outcome)}, outside the target's vocabulary "
                             f"of {size} token ids (0..{size - 1})")


def check_sampler(sampler: Any, args: tuple, mode: str) -> None:
    """InputError (one line) unless `sampler(*args)` matches the sampler's signature."""
    name = getattr(sampler, "__qualname__", None) or type(sampler).__name__
    wanted = {1: "(case, rng)", 2: "(case, rng, n)"}.get(len(args) - 1, "(case, rng)")
    if not callable(sampler):
        raise InputError(f"{mode} mode: the sampler {sampler!r} is not callable; it must be a function {wanted}")
    try:
        signature = inspect.signature(sampler)
    except (TypeError, ValueError):  # builtins and some C callables have no signature: call them as they are
        return
    try:
        signature.bind(*args)
    except TypeError:
        raise InputError(f"{mode} mode: the sampler {name}{signature} must take {wanted}") from None


def _is_float(x: Any) -> bool:
    return isinstance(x, (float, np.floating))


def _number(x: Any, name: str) -> Fraction:
    if not math.isfinite(x):
        raise InputError(f"exact mode: {name} is {x}, not a finite number")
    return Fraction(float(x))


def _vector(values: list, name: str, notes: list) -> list:
    """Convert a flat list of numbers; renormalise exactly when it is a float probability vector."""
    if not any(_is_float(v) for v in values):
        return values
    exact = [_number(v, f"{name}[{i}]") if _is_float(v) else v for i, v in enumerate(values)]
    total = sum(exact, Fraction(0))
    if all(v >= 0 for v in exact) and abs(float(total) - 1) <= SUM_TOLERANCE and total != 1:
        notes.append(f"{name}: float probabilities converted to exact Fractions and divided by their exact "
                     f"sum (1 {'-' if total < 1 else '+'} {float(abs(total - 1)):.3g})")
        return [v / total for v in exact]
    notes.append(f"{name}: floats converted to exact Fractions")
    return exact


def _is_numbers(values: list) -> bool:
    return bool(values) and all(isinstance(v, (int, float, Fraction, np.number)) and not isinstance(v, bool)
                                for v in values)


def to_exact(obj: Any, name: str, floats: str, notes: list) -> Any:
    """`obj` with every float replaced by an exact Fraction (see the module docstring)."""
    if _is_float(obj):
        if floats == "refuse":
            raise InputError(f"exact mode: {name} is the float {obj!r}; pass Fractions (or floats='convert')")
        notes.append(f"{name}: float converted to an exact Fraction")
        return _number(obj, name)
    before = len(notes)
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind != "f":
            return obj
        if obj.ndim < 2:
            return np.array(to_exact(obj.tolist(), name, floats, notes), dtype=object)
        rows = [to_exact(list(row), f"{name}[{i}]", floats, notes) for i, row in enumerate(obj.reshape(-1, obj.shape[-1]))]
        return np.array(rows, dtype=object).reshape(obj.shape)
    if isinstance(obj, (list, tuple)) and not hasattr(obj, "_fields"):
        values = list(obj)
        if _is_numbers(values):
            if floats == "refuse" and any(_is_float(v) for v in values):
                first = next(i for i, v in enumerate(values) if _is_float(v))
                raise InputError(f"exact mode: {name}[{first}] is the float {values[first]!r}; pass Fractions "
                                 "(or floats='convert')")
            values = _vector(values, name, notes)
        else:
            values = [to_exact(v, f"{name}[{i}]", floats, notes) for i, v in enumerate(values)]
        if len(notes) == before:
            return obj
        return type(obj)(values) if isinstance(obj, tuple) else values
    if isinstance(obj, Mapping):
        keys = list(obj)
        values = [obj[k] for k in keys]
        if _is_numbers(values):
            values = to_exact(values, name, floats, notes)
        else:
            values = [to_exact(v, f"{name}[{k!r}]", floats, notes) for k, v in zip(keys, values)]
        return obj if len(notes) == before else dict(zip(keys, values))
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {}
        for f in dataclasses.fields(obj):
            if f.init:
                value = getattr(obj, f.name)
                new = to_exact(value, f"{name}.{f.name}", floats, notes)
                if new is not value:
                    changes[f.name] = new
        return dataclasses.replace(obj, **changes) if changes else obj
    return obj


def exact_case(case: Any, floats: str = "convert") -> tuple[Any, list[str]]:
    """The case with its floats converted to exact Fractions, and notes saying what was converted."""
    if floats not in FLOAT_POLICIES:
        raise InputError(f"floats is {floats!r}; expected one of {', '.join(FLOAT_POLICIES)}")
    notes: list[str] = []
    converted = to_exact(case, "case", floats, notes)
    return (converted if notes else case), notes


def exact_target(target: Any, floats: str = "convert") -> tuple[dict, list[str]]:
    """A target law as {outcome: Fraction}: a Mapping, or a probability vector over token ids 0..V-1."""
    if isinstance(target, Mapping):
        law = dict(target)
    elif isinstance(target, (list, tuple, np.ndarray)) and not isinstance(target, str):
        values = list(np.asarray(target).tolist()) if isinstance(target, np.ndarray) else list(target)
        if not _is_numbers(values):
            raise InputError("target must be {outcome: probability} or a vector of probabilities over token ids; "
                             f"got a {type(target).__name__} holding {values[:1]!r}...")
        law = dict(enumerate(values))
    else:
        raise InputError("target must be {outcome: probability} or a vector of probabilities over token ids; "
                         f"got {type(target).__name__} {target!r}"[:200])
    notes: list[str] = []
    law = to_exact(law, "target", floats, notes)
    for key, value in law.items():
        if isinstance(value, bool) or not isinstance(value, (int, Fraction)) or value < 0:
            raise InputError(f"target[{key!r}] is {value!r}, not a probability >= 0")
    total = sum(law.values(), Fraction(0))
    if total != 1:
        raise InputError(f"target probabilities sum to {total} ({float(total):.9g}), not exactly 1")
    return {k: Fraction(v) for k, v in law.items() if v > 0}, notes


def _kind(x: Any) -> str:
    if isinstance(x, (bool, np.bool_)):
        return "bool"
    if isinstance(x, (int, np.integer)):
        return "int"
    return type(x).__name__


def check_outcome_kinds(law: Mapping, target: Mapping) -> None:
    """InputError when the sampler's outcomes and the target's outcomes share no kind at all."""
    if not law or not target:
        return
    produced = {_kind(o) for o in law}
    expected = {_kind(o) for o in target}
    if not produced & expected:
        example = next(iter(law))
        raise InputError(f"exact mode: the sampler returned {example!r} ({_kind(example)}) but the target's outcomes "
                         f"are {', '.join(sorted(expected))}: return the same kind of outcome as the target")


class GlobalRandomness:
    """The state of every global random source at the snapshot (see the module docstring)."""

    def __init__(self, mode: str):
        self.mode = mode
        self.before = self._state()

    @staticmethod
    def _state() -> dict[str, Any]:
        state = {"numpy's global random state (np.random.*)": _numpy_global_state(),
                 "Python's random module": random.getstate()}
        torch = sys.modules.get("torch")
        if torch is not None and hasattr(torch, "random"):
            state["torch's global generator (torch.rand*)"] = bytes(torch.random.get_rng_state().numpy())
        return state

    def check(self) -> None:
        """InputError when a global source moved since the snapshot: the sampler drew from it."""
        after = self._state()
        moved = [name for name, value in self.before.items() if name in after and after[name] != value]
        if moved:
            raise InputError(f"{self.mode} mode: the sampler drew from {' and '.join(moved)} instead of rng: every "
                             "random choice must come from rng (a seeded run must repeat)")


def _numpy_global_state() -> Any:
    """numpy's global MT19937 state: its raw bytes where numpy exposes them (a microsecond: this runs
    after every path), else `np.random.get_state()`."""
    try:
        generator = np.random.mtrand._rand._bit_generator
        return ctypes.string_at(generator.ctypes.state_address, 625 * 4)      # key[624], pos
    except (AttributeError, TypeError):      # pragma: no cover - another numpy layout
        kind, keys, pos, has_gauss, gauss = np.random.get_state()
        return kind, keys.tobytes(), pos, has_gauss, gauss


def check_count(n: Any, name: str, mode: str, what: str) -> int:
    """`n` as a positive integer; one line naming it and what it counts otherwise."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise InputError(f"{mode} mode: {name} is {n!r}; it counts {what} and must be a positive integer")
    return int(n)
