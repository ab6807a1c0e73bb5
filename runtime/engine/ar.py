"""The engine decoder of plain decoding (`methods.BASELINE`): one target forward per token."""
from __future__ import annotations

from methods import BASELINE
from runtime.engine.base import Decoder, Proposal
from verification import rules


class AR(Decoder):
    """Plain autoregressive decoding with the target: the reference of every identity test."""

    method = BASELINE
    batchable = True

    def propose(self) -> Proposal:
        return Proposal(rules.TokenTree((-1,), (-1,)))
