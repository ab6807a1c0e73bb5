"""Typed, frozen method configurations with one set of defaults and a label that parses back.

A method's configuration is a frozen dataclass deriving from `MethodConfig`; each field declares
its `Param` (how it is checked, written into a label and read back from one). Every layer (engine,
replay, closed forms, simulator, sweep, reports, CLIs) builds configurations through
`from_dict` / `from_label`, so a configuration means the same thing everywhere:

    SDConfig.from_dict({"gamma": 8})          # unknown keys and bad values: one-line InputError
    MCSDConfig().label                         # 'mcsd k2x2x1 repl'
    parse_label("mcsd k4x2x1 norepl")          # MCSDConfig(k=(4, 2, 1), replacement=False)

A label is the method name followed by one token per field, in field order: the field's prefix
and its value (`g4`, `k4x2x1`, `S88886666442`, `eta0.6`), or for a flag its on/off word.
"""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Iterable, Mapping

import numpy as np
import pandas as pd

from common.errors import InputError


# ---- one field kind each ------------------------------------------------------------------------

@dataclass(frozen=True)
class Param:
    """How one config field is checked and written in a label (`prefix` + value)."""

    prefix: str
    doc: str = ""
    omit: Any = NotImplemented      # a value written as no token at all (a label omits it)

    def check(self, name: str, value: Any) -> Any:
        return value

    def label_token(self, value: Any) -> str:
        return "" if self.omit is not NotImplemented and value == self.omit else self.format(value)

    def format(self, value: Any) -> str:
        return f"{self.prefix}{value}"

    def owns(self, token: str) -> bool:
        """Whether a label token is this field's (its prefix and a value)."""
        return token.startswith(self.prefix) and len(token) > len(self.prefix)

    def read(self, name: str, token: str) -> Any:
        """The checked value of a token this field owns; InputError in the check's words."""
        return self.check(name, token[len(self.prefix):])


@dataclass(frozen=True)
class Int(Param):
    low: int = 0
    high: int | None = None

    def check(self, name, value):
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            value = int(value)
        if isinstance(value, (float, np.floating)) and float(value).is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise InputError(f"config '{name}' must be an integer, got {value!r}")
        value = int(value)
        if value < self.low or (self.high is not None and value > self.high):
            allowed = f">= {self.low}" if self.high is None else f"in {self.low}..{self.high}"
            raise InputError(f"config '{name}' must be {allowed}, got {value}")
        return value



@dataclass(frozen=True)
class Float(Param):
    low: float = 0.0
    high: float = 1.0

    def check(self, name, value):
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise InputError(f"config '{name}' must be a number, got {value!r}")
        value = float(value)
        if math.isnan(value) or not self.low <= value <= self.high:
            raise InputError(f"config '{name}' must be in [{self.low:g}, {self.high:g}], got {value!r}")
        return value

    def format(self, value):
        return f"{self.prefix}{float(value):g}"



@dataclass(frozen=True)
class Flag(Param):
    """A boolean: the word `prefix` when true, `off` when false."""

    off: str = ""

    def check(self, name, value):
        if isinstance(value, (bool, np.bool_)):
            return bool(value)
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise InputError(f"config '{name}' must be true or false, got {value!r}")

    def format(self, value):
        return self.prefix if value else self.off

    def label_token(self, value):
        return self.format(value)

    def owns(self, token):
        return token in (self.prefix, self.off) and bool(token)

    def read(self, name, token):
        return token == self.prefix


@dataclass(frozen=True)
class IntTuple(Param):
    """A tuple of integers: `parse` turns text or a sequence into the tuple (one parser per kind),
    `text` writes its value part of a label."""

    parser: Callable[[Any], tuple[int, ...]] = tuple
    text: Callable[[tuple[int, ...]], str] = str

    def check(self, name, value):
        if value is None and self.omit is None:
            return None
        try:
            parsed = self.parser(value)
            return parsed if type(parsed) is tuple and set(map(type, parsed)) <= {int} else tuple(int(v) for v in parsed)
        except InputError as exc:
            raise InputError(f"config '{name}': {exc}") from None
        except (TypeError, ValueError) as exc:
            raise InputError(f"config '{name}': {exc}") from None

    def format(self, value):
        return f"{self.prefix}{self.text(value)}"



def param(kind: Param, default: Any) -> Any:
    """A dataclass field with `default` and its `Param` in the metadata."""
    return dataclasses.field(default=default, metadata={"param": kind})


# ---- the base class ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class MethodConfig:
    """Base of every method's configuration: checked on construction, labelled, round-trippable."""

    method: ClassVar[str] = ""

    def __post_init__(self):
        for f in dataclasses.fields(self):
            object.__setattr__(self, f.name, f.metadata["param"].check(f.name, getattr(self, f.name)))
        self.validate()

    def validate(self) -> None:
        """Checks across fields (override); raise InputError naming the field."""

    # -- dicts -------------------------------------------------------------------------------------
    @classmethod
    def keys(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any] | str | None = None) -> "MethodConfig":
        """The configuration from a mapping (or JSON text); unknown keys and bad values are refused."""
        raw = as_mapping(raw, cls.method)
        unknown = [k for k in raw if k not in cls.keys()]
        if unknown:
            known = ", ".join(cls.keys()) or "none"
            raise InputError(f"{cls.method}: unknown config key '{unknown[0]}' (known: {known})")
        return cls(**raw)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready field values (tuples as lists)."""
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(self).items()}

    def replace(self, **changes: Any) -> "MethodConfig":
        return dataclasses.replace(self, **changes)

    @classmethod
    def split(cls, raw: "MethodConfig | Mapping[str, Any] | str | None", extra: Iterable[str] = (),
              what: str = "") -> tuple["MethodConfig", dict[str, Any]]:
        """(the configuration, the other keys) of a config, a label, or a mapping / JSON text that
        may also hold the caller's own `extra` keys (a decoder's options, the simulator's setup
        keys): the one place a method's keys are told from a caller's. A key that is neither is
        refused, naming both lists."""
        if isinstance(raw, cls):
            return raw, {}
        if isinstance(raw, str) and raw.split(" ", 1)[0] == cls.method:
            return cls.from_label(raw), {}
        if isinstance(raw, str) and raw.strip() and not raw.strip().startswith("{"):
            raise InputError(f"{cls.method}: config {raw!r} is not JSON nor a '{cls.method} ...' label")
        mapping = as_mapping(raw, cls.method)
        extra = tuple(extra)
        unknown = [k for k in mapping if k not in cls.keys() and k not in extra]
        if unknown:
            others = f"; {what or 'other'} keys: {', '.join(extra)}" if extra else ""
            raise InputError(f"{cls.method}: unknown config key '{unknown[0]}' (method keys: "
                             f"{', '.join(cls.keys()) or 'none'}{others})")
        own = cls.from_dict({k: v for k, v in mapping.items() if k in cls.keys()})
        return own, {k: v for k, v in mapping.items() if k not in cls.keys()}

    # -- labels ------------------------------------------------------------------------------------
    @property
    def label(self) -> str:
        tokens = [_token(f, getattr(self, f.name)) for f in dataclasses.fields(self)]
        return " ".join([self.method] + [t for t in tokens if t])

    @classmethod
    def labels(cls, frame) -> list[str]:
        """The label of every row of a frame of configurations (a column per field; a missing
        column takes the field's default), written by the same `Param`s as `label`: a space's
        labels cannot drift from its configurations'. Each distinct value is checked and written
        once and the tokens are joined column by column, so a space of 10^5 rows is labelled in
        milliseconds."""
        labels = np.full(len(frame), cls.method, dtype=object)
        for f in dataclasses.fields(cls):
            codes, distinct = _distinct(frame[f.name]) if f.name in frame else (np.zeros(len(frame), int), [f.default])
            tokens = [_token(f, f.metadata["param"].check(f.name, _plain(value))) for value in distinct]
            labels = labels + np.asarray([" " + t if t else "" for t in tokens], dtype=object)[codes]
        return labels.tolist()

    @classmethod
    def from_label(cls, text: str) -> "MethodConfig":
        """The configuration a label describes (fields it omits take their defaults)."""
        tokens = str(text).split()
        if not tokens or tokens[0] != cls.method:
            raise InputError(f"label {text!r} does not start with the method name '{cls.method}'")
        values: dict[str, Any] = {}
        fields = dataclasses.fields(cls)
        for token in tokens[1:]:
            for f in sorted(fields, key=lambda f: -len(f.metadata["param"].prefix)):
                param = f.metadata["param"]
                if f.name not in values and param.owns(token):
                    values[f.name] = param.read(f.name, token)    # a bad value: the Param's own words
                    break
            else:
                raise InputError(f"label {text!r}: token '{token}' is no field of {cls.method} "
                                 f"(fields: {', '.join(f.name for f in fields) or 'none'})")
        return cls(**values)

    def __str__(self) -> str:
        return self.label


def _token(f: dataclasses.Field, value: Any) -> str:
    return f.metadata["param"].label_token(value)


def _plain(value: Any) -> Any:
    """A frame cell as a config value: numpy scalars as Python ones, arrays and lists as tuples."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (np.ndarray, list)):
        return tuple(np.asarray(value).tolist())
    return value


def _hashable(value: Any) -> Any:
    return tuple(np.asarray(value).tolist()) if isinstance(value, (np.ndarray, list)) else value


def _distinct(column) -> tuple[np.ndarray, list]:
    """(per row the index of its value, the distinct values); cells that are arrays or lists are
    compared as tuples, and a missing cell (None, NaN) is kept as it is, not made NaN."""
    cells = column.to_numpy() if isinstance(column, pd.Series) else np.asarray(column)
    try:
        codes, distinct = pd.factorize(cells)
    except TypeError:                   # unhashable cells
        keys = np.empty(len(cells), dtype=object)
        keys[:] = [_hashable(v) for v in cells]
        codes, distinct = pd.factorize(keys)
    distinct, missing = list(distinct), {}
    for i in np.flatnonzero(codes < 0):
        kind = type(cells[i])
        if kind not in missing:
            missing[kind] = len(distinct)
            distinct.append(cells[i])
        codes[i] = missing[kind]
    return codes, distinct


def as_mapping(raw: Mapping[str, Any] | str | None, what: str) -> dict[str, Any]:
    """A configuration given as a mapping or JSON text (None or '': empty), as a dict; the one
    parser of both, InputError naming `what` otherwise."""
    if raw is None:
        return {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError as exc:
            raise InputError(f"{what}: config is not valid JSON ({exc.msg})") from None
    if not isinstance(raw, Mapping):
        raise InputError(f"{what}: config must be a JSON object, got {type(raw).__name__}")
    return dict(raw)
