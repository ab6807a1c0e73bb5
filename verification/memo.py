"""Memoised exact mode: the conditional law below each `rng.memo(key)` point, reused for later paths.

`verification.exact` enumerates paths depth-first, so the paths below one memo point are
contiguous: an accumulator opened at the point collects their outcomes (weighted by path
probability) until the next path leaves that sub-tree; divided by the point's probability this is
the conditional law of `key`. The first sub-tree of a key fills the cache, the second must give
the same law (else the key misses some state: InputError), later ones are cut (`verified`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Hashable

from common.errors import InputError

BYPASS = ("the sampler gave different results for the same random choices: it draws randomness that does not come "
          "from rng (Python's random, numpy's global state, torch) or keeps state between calls")


def _tv(a: dict, b: dict) -> float:
    return float(sum(abs(a.get(k, 0) - b.get(k, 0)) for k in set(a) | set(b)) / 2)


@dataclass
class _Accumulator:
    """Outcomes of the paths below one memo point, to become the conditional law of its key."""

    prefix: tuple
    key: Hashable
    prob: Fraction
    check: bool                     # a second occurrence, compared with the cached law on closing
    law: dict = field(default_factory=dict)


class Memo:
    """Conditional laws by memo key; the accumulators of the memo points on the current path."""

    def __init__(self):
        self.cache: dict = {}
        self.verified: set = set()
        self.open: list[_Accumulator] = []

    def enter(self, source) -> None:
        active = {acc.key for acc in self.open}
        for depth, key, prob in source.memo_points:
            if key not in active:
                self.open.append(_Accumulator(tuple(source.taken[:depth]), key, prob, key in self.cache))
                active.add(key)

    def add(self, contributions: dict) -> None:
        for acc in self.open:
            for outcome, w in contributions.items():
                acc.law[outcome] = acc.law.get(outcome, Fraction(0)) + w

    def leave(self, script: tuple) -> None:
        """Close the accumulators whose sub-tree the next script is outside of (depth-first order)."""
        while self.open and script[: len(self.open[-1].prefix)] != self.open[-1].prefix:
            self._close(self.open.pop())

    def close_all(self) -> None:
        while self.open:
            self._close(self.open.pop())

    def _close(self, acc: _Accumulator) -> None:
        law = {o: w / acc.prob for o, w in acc.law.items()}
        if sum(law.values()) != 1:
            raise InputError(f"exact mode: {BYPASS} (memo key {acc.key!r} lost probability mass)")
        if not acc.check:
            self.cache[acc.key] = law
        elif law != self.cache[acc.key]:
            raise InputError(f"exact mode: memo key {acc.key!r} does not fix the rest of the sampler's run: two "
                             f"sub-states with this key have laws at TV {_tv(law, self.cache[acc.key]):.3g}")
        else:
            self.verified.add(acc.key)
