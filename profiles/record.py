"""`Record`: a frozen JSON object, for what a Profile carries to be read by people and reports (fit
diagnostics, provenance details, sources) rather than priced. Frozen so that a Profile shared by
every worker cannot be changed under them; picklable so that it travels to them as it is.
"""
from __future__ import annotations

from typing import Any, Iterator, Mapping


class Record(Mapping[str, Any]):
    """An immutable mapping whose objects are Records and whose lists are tuples (`of` freezes a
    JSON value, `to_json` thaws it)."""

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[str, Any] | None = None):
        object.__setattr__(self, "_items", {str(k): freeze(v) for k, v in (items or {}).items()})

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("a Record is frozen")

    def __reduce__(self):
        return (Record, (self._items,))

    def __repr__(self) -> str:
        return f"Record({self._items!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and dict(self.items()) == dict(other.items())

    def __hash__(self) -> int:
        return hash(repr(self.to_json()))

    def to_json(self) -> dict[str, Any]:
        return {k: thaw(v) for k, v in self._items.items()}


def freeze(value: Any) -> Any:
    """A JSON value with its objects as Records and its lists as tuples."""
    if isinstance(value, Record):
        return value
    if isinstance(value, Mapping):
        return Record(value)
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """The JSON value `freeze` was given (Records as dicts, tuples as lists)."""
    if isinstance(value, Record):
        return value.to_json()
    if isinstance(value, tuple):
        return [thaw(v) for v in value]
    return value
