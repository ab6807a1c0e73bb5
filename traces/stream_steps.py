"""A served request stream replayed exactly: every request's prompt, output and steps at one proposer
setting, which `simulator.closed_loop` serves with continuous batching.

A SpanReplay (`traces.span_replay`) gives, for each request and drafter, the tokens a greedy step
starting at each generated position produces; `ReplayRequest.steps(drafter, k)` walks them at draft
length k. What a step costs also depends on how many tokens it proposed, which the spans do not
say where nothing was accepted: EAGLE proposes k every step; vLLM's n-gram proposer proposes what
its rule finds (`traces.lookup_replay.lookup_spans`, replayed from the request's token ids: at most
k, none where no n-gram matches), so a step that accepted nothing may still have verified k + 1
tokens. Four proposers (`PROPOSERS`):

- plain: one token a step, the stored generation's length (`ReplayRequest.output_len`);
- eagle: the EAGLE run's spans at k, k proposed every step;
- ngram: the n-gram run's spans at k, min(k, what the rule proposed) proposed, never fewer than accepted;
- oracle: a proposer that drafts exactly what will be accepted, k + 1 tokens a step until the output
  ends, on the output length of the drafter it is priced as.

Step 0 of every request is the prefill's token (vLLM proposes nothing before it).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from common.errors import InputError
from traces.span_replay import ReplayRequest, step_starts

PROPOSERS = ("plain", "eagle", "ngram", "oracle")


@dataclass(frozen=True)
class StreamSteps:
    """Every request's steps at one proposer setting, concatenated in request order: request r's
    steps are [offsets[r], offsets[r + 1]), its step 0 the prefill's token."""

    proposer: str
    k: int
    prompt: np.ndarray       # (R,) prompt tokens
    output: np.ndarray       # (R,) tokens generated: the sum of its step sizes
    offsets: np.ndarray      # (R + 1,)
    size: np.ndarray         # tokens each step produces (accepted drafts and the target's token)
    drafted: np.ndarray      # tokens each step proposed: its verify forward runs 1 + drafted a row

    @property
    def requests(self) -> int:
        return int(self.prompt.size)

    @property
    def steps_of(self) -> np.ndarray:
        """(R,) steps of each request."""
        return np.diff(self.offsets)

    def tokens_per_step(self) -> float:
        """Mean tokens of a decode step (the prefill's token left out), as the ingest reports it."""
        decode = np.ones(self.size.size, bool)
        decode[self.offsets[:-1]] = False
        return float(self.size[decode].mean()) if decode.any() else float("nan")


def oracle_sizes(output_len: int, k: int) -> np.ndarray:
    """Step sizes of the oracle: the prefill's token, then k + 1 a step, the last clipped at the end."""
    left = output_len - 1
    full, rest = divmod(left, k + 1)
    return np.concatenate([[1], np.full(full, k + 1), [rest] if rest else []]).astype(np.int64)


def stream_steps(requests: Sequence[ReplayRequest], proposer: str, k: int = 0, drafter: str | None = None,
                 proposed: Sequence[np.ndarray] | None = None) -> StreamSteps:
    """`StreamSteps` of `requests` in their order (module docstring). `drafter`: the spans an oracle's
    output length is read from (the drafter it is priced as; default eagle); `proposed[r]`: what vLLM's
    n-gram rule proposed at each of request r's generated positions (ngram; proposals of up to any
    K >= k, cut to k here)."""
    if proposer not in PROPOSERS:
        raise InputError(f"unknown proposer '{proposer}' (known: {', '.join(PROPOSERS)})")
    if not requests:
        raise InputError("no requests to replay")
    if proposer != "plain" and k < 1:
        raise InputError(f"draft length k must be >= 1 for proposer {proposer}, got {k}")
    prompt = np.array([r.prompt_len for r in requests], np.int64)
    if proposer in ("plain", "oracle"):
        lengths = [r.output_len if proposer == "plain" else r.output_len_of(drafter or "eagle") for r in requests]
        if min(lengths) < 1:
            raise InputError("a request without output tokens cannot be replayed")
        sizes = [np.ones(n, np.int64) if proposer == "plain" else oracle_sizes(n, k) for n in lengths]
        count = np.array([a.size for a in sizes])
        size = np.concatenate(sizes)
        drafted = np.full(size.size, 0 if proposer == "plain" else k, np.int64)
    else:
        spans = [r.span_array(proposer) for r in requests]
        lengths = np.array([a.size for a in spans])
        if lengths.min() < 1:
            raise InputError(f"a request without {proposer} spans cannot be replayed")
        starts, size = step_starts(np.concatenate(spans), lengths, k)
        size = size.astype(np.int64)
        count = np.diff(np.searchsorted(starts, np.concatenate([[0], np.cumsum(lengths)])))
        if proposer == "eagle":
            drafted = np.full(size.size, k, np.int64)
        else:
            if proposed is None or len(proposed) != len(requests) or any(
                    p.size != n for p, n in zip(proposed, lengths)):
                raise InputError("the n-gram proposer's steps need its proposals at every generated position of "
                                 "every request")
            drafted = np.maximum(np.minimum(np.concatenate(proposed)[starts], k), size - 1).astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(count)]).astype(np.int64)
    drafted[offsets[:-1]] = 0                 # the prefill's token verifies nothing
    output = np.add.reduceat(size, offsets[:-1])
    return StreamSteps(proposer, int(k), prompt, output.astype(np.int64), offsets, size, drafted)
