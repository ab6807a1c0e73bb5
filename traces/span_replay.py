"""A served request stream replayed exactly from per-position acceptance spans (the SpanReplay contract).

Some benchmarks record, for every generated position of a request, its span: the tokens a
speculative step starting at that position produces under greedy verification, the target's own
token included, when the drafter proposes up to K tokens (K the recorded proposer's). A step that
proposes k <= K tokens produces min(span, k + 1) of them, so one recording replays every draft
length up to K exactly, with no acceptance model in between: a request's decode is the walk
that starts at generated position 0, produces s = min(span[pos], k + 1) tokens, starts the next
step at pos + s, and clips the last step at the output's end. Position 0 is the token the prefill
samples (vLLM proposes nothing before it; its span is 1 in every record read so far), so the
walk's first step is the prefill's and every later one is a verification forward. Past K the
spans say nothing (a span of K + 1 may have gone on): a replay at k > `SpanReplay.recorded_k`
is a lower bound.

Contract (`SpanReplay`, parquet): one row per request, columns `dataset`, `request_id`,
`prompt_len`, `output_len` (the tokens of the stored generation) and `spans_<drafter>` (list of
int16, one per generated position of that drafter's run; its length is that run's output length,
which may differ from `output_len` where the drafter's run generated other tokens); the footer key
`specsim.span_replay` holds the drafters, `recorded_k` and the source's provenance (JSON).
`ReplayRequest.steps(drafter, k)` gives one request's step sizes; `step_starts` walks many
requests at once (the statistics of `calibrate.ingest.specdecode_bench`).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from common import atomic
from common.errors import InputError

METADATA_KEY = "specsim.span_replay"
SPAN_DTYPE = np.int16
MAX_SPAN = int(np.iinfo(SPAN_DTYPE).max)


def step_starts(spans: np.ndarray, lengths: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(first position, tokens produced) of every step of the requests whose spans are concatenated
    in `spans` (`lengths` positions each), drafting up to k tokens a step; positions index `spans`,
    ascending. Each request's walk starts at its position 0; requests of length 0 take no step."""
    if k < 0:
        raise InputError(f"draft length k must be >= 0, got {k}")
    lengths = np.asarray(lengths, dtype=np.int64)
    ends = np.cumsum(lengths)
    if spans.shape != (int(ends[-1]) if len(ends) else 0,):
        raise InputError(f"{spans.size} spans for requests of {int(lengths.sum())} positions in all")
    if spans.size and spans.min() < 1:
        raise InputError(f"a span below 1 ({int(spans.min())}): every step produces at least the target's token")
    position = np.arange(spans.size, dtype=np.int64)
    room = np.repeat(ends, lengths) - position                 # tokens left in its request from each position
    size = np.minimum(np.minimum(spans.astype(np.int64), k + 1), room)
    frontier = (ends - lengths)[lengths > 0]
    taken = []
    while frontier.size:                                       # one step of every unfinished request at a time
        taken.append(frontier)
        going_on = size[frontier] < room[frontier]
        frontier = frontier[going_on] + size[frontier[going_on]]
    starts = np.sort(np.concatenate(taken)) if taken else np.zeros(0, dtype=np.int64)
    return starts, size[starts]


@dataclass(frozen=True)
class ReplayRequest:
    """One request: its lengths and, per drafter, the span of every generated position of that drafter's run."""

    dataset: str
    request_id: str
    prompt_len: int
    output_len: int                              # tokens of the stored generation (plain decoding's output)
    spans: Mapping[str, np.ndarray] = field(repr=False)   # drafter -> int16 spans, one per generated position

    def output_len_of(self, drafter: str) -> int:
        """The output length of `drafter`'s run: its span count."""
        return int(self.span_array(drafter).size)

    def span_array(self, drafter: str) -> np.ndarray:
        if drafter not in self.spans:
            raise InputError(f"request {self.dataset}/{self.request_id} has no spans of drafter '{drafter}' "
                             f"(has: {', '.join(sorted(self.spans))})")
        return self.spans[drafter]

    def steps(self, drafter: str, k: int) -> np.ndarray:
        """Tokens each step produces when `drafter` proposes up to k tokens a step: the prefill's
        token first, the last step clipped at the output's end; they add up to the output length."""
        spans = self.span_array(drafter)
        return step_starts(spans, np.array([spans.size]), k)[1]


@dataclass
class SpanReplay:
    """The requests of one or more datasets, in file order; see the module docstring."""

    requests: list[ReplayRequest]
    recorded_k: dict[str, int]                   # drafter -> the largest k its spans tell (largest span - 1)
    source: dict[str, Any] = field(default_factory=dict)

    @property
    def drafters(self) -> list[str]:
        return sorted(self.recorded_k)

    @property
    def datasets(self) -> list[str]:
        return list(dict.fromkeys(r.dataset for r in self.requests))

    def of(self, dataset: str) -> list[ReplayRequest]:
        found = [r for r in self.requests if r.dataset == dataset]
        if not found:
            raise InputError(f"no requests of dataset '{dataset}' (has: {', '.join(self.datasets)})")
        return found

    def write(self, path: str | Path) -> Path:
        """The replay as parquet (atomically), provenance in the footer."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        columns = {"dataset": pa.array([r.dataset for r in self.requests], pa.string()),
                   "request_id": pa.array([r.request_id for r in self.requests], pa.string()),
                   "prompt_len": pa.array([r.prompt_len for r in self.requests], pa.int32()),
                   "output_len": pa.array([r.output_len for r in self.requests], pa.int32())}
        for drafter in self.drafters:
            arrays = [r.span_array(drafter) for r in self.requests]
            offsets = np.concatenate([[0], np.cumsum([a.size for a in arrays])]).astype(np.int64)
            values = np.concatenate(arrays).astype(SPAN_DTYPE) if arrays else np.zeros(0, SPAN_DTYPE)
            columns[f"spans_{drafter}"] = pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(values))
        meta = {"version": 1, "drafters": self.drafters, "recorded_k": self.recorded_k, "source": self.source}
        table = pa.table(columns).replace_schema_metadata({METADATA_KEY: json.dumps(meta)})
        with atomic.atomic_path(path) as tmp:
            pq.write_table(table, tmp)
        return Path(path)

    @classmethod
    def read(cls, path: str | Path) -> "SpanReplay":
        import pyarrow.parquet as pq

        p = Path(path)
        try:
            table = pq.read_table(p)
        except Exception as exc:                  # pyarrow raises several types for a missing or non-parquet file
            raise InputError(f"{p}: not a readable parquet file ({type(exc).__name__})") from None
        raw = (table.schema.metadata or {}).get(METADATA_KEY.encode())
        if raw is None:
            raise InputError(f"{p}: not a span replay (no '{METADATA_KEY}' in the footer)")
        meta = json.loads(raw)
        spans = {}
        for drafter in meta["drafters"]:
            column = table.column(f"spans_{drafter}").combine_chunks()
            offsets, values = column.offsets.to_numpy(), column.values.to_numpy().astype(SPAN_DTYPE)
            if values.size and values.min() < 1:
                raise InputError(f"{p}: column 'spans_{drafter}' holds a span below 1")
            spans[drafter] = [values[a:b] for a, b in zip(offsets[:-1], offsets[1:])]
        rows = table.select(["dataset", "request_id", "prompt_len", "output_len"]).to_pydict()
        requests = [ReplayRequest(d, i, int(p_len), int(o_len), {name: spans[name][n] for name in spans})
                    for n, (d, i, p_len, o_len) in enumerate(zip(rows["dataset"], rows["request_id"],
                                                                 rows["prompt_len"], rows["output_len"]))]
        return cls(requests, {k: int(v) for k, v in meta["recorded_k"].items()}, meta.get("source", {}))
