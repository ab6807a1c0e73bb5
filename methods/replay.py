"""Exact greedy replay from a TokenTrace: the primitives every replayable method states its steps with.

Under greedy decoding the target's output is one fixed token sequence, and a teacher-forced pass
records for every position p the rank of the output token in the drafter's distribution given the
true prefix (`draft_rank`, 0 = the drafter's top-1) and the drafter's top-1 probability there
(`draft_conf`). A step that starts at committed position p consults the drafter along the true
prefix only until its first miss, so these two columns decide every step of a family of methods
exactly. A method states its member of the family with `MethodSpec.replay_rules(config)`:

- `levels`: level l keeps the drafter's top-levels[l] children of the node on the true path and
  hits iff draft_rank[p + l] < levels[l] (a chain: all 1; a k-configuration tree: its k);
- `eta`: drafting stops after the first drafted token whose top-1 confidence is <= eta (that token
  is still verified; 0: never);
- `bins`: chain position l also verifies its drafter ranks 1 .. S[b] - 1, b = floor(10 conf)
  (S counts the chain token); a miss caught by that set is accepted and the target's token after
  it comes free from the same forward.

"Accepted length" of a step = tokens committed by it, bonus included, as StepTrace's `accepted`:
with d tokens drafted and m leading hits, d + 1 if m == d, m + 2 when `bins` catch the miss,
m + 1 otherwise, capped at the tokens left in the recorded output (n - p), as a run that stops at
max_new_tokens or EOS truncates its last step. `chain_shapes` gives the same steps' draft forwards
and verify tokens. Vectorised over every position of every prompt at once.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Sequence

import numpy as np
import pandas as pd

from common.errors import InputError
from costmodel.cape import confidence_bin
from methods.draws import first_failure


@dataclass(frozen=True)
class TokenTable:
    """The replay-relevant columns of a TokenTrace, all prompts concatenated in `pos` order."""

    prompt_ids: tuple[str, ...]
    offsets: np.ndarray      # (n_prompts + 1,) start of each prompt in the flat arrays
    draft_rank: np.ndarray   # (N,) int64
    draft_conf: np.ndarray   # (N,) float64
    tokens: np.ndarray       # (N,) int64, the target's greedy output

    @property
    def size(self) -> int:
        return int(self.draft_rank.shape[0])

    @classmethod
    def from_frame(cls, frame: pd.DataFrame) -> "TokenTable":
        """Build from a TokenTrace frame (as `traces.schema.read_trace` returns it)."""
        for column in ("prompt_id", "pos", "token", "draft_rank", "draft_conf"):
            if column not in frame.columns:
                raise InputError(f"token trace lacks column '{column}'")
        if frame.empty:
            raise InputError("token trace is empty")
        ordered = frame.sort_values(["prompt_id", "pos"], kind="stable")
        prompt_ids: list[str] = []
        lengths: list[int] = []
        for prompt_id, group in ordered.groupby("prompt_id", sort=False):
            pos = group["pos"].to_numpy()
            if not np.array_equal(pos, np.arange(len(pos))):
                raise InputError(f"token trace: prompt '{prompt_id}' positions are not 0..{len(pos) - 1} without gaps")
            prompt_ids.append(str(prompt_id))
            lengths.append(len(pos))
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        return cls.from_arrays(prompt_ids, offsets, ordered["draft_rank"].to_numpy(),
                               ordered["draft_conf"].to_numpy(), ordered["token"].to_numpy())

    @classmethod
    def from_arrays(cls, prompt_ids: Sequence[str], offsets: Sequence[int], draft_rank: Sequence[int],
                    draft_conf: Sequence[float], tokens: Sequence[int] | None = None) -> "TokenTable":
        rank = np.asarray(draft_rank, dtype=np.int64)
        conf = np.asarray(draft_conf, dtype=np.float64)
        offs = np.asarray(offsets, dtype=np.int64)
        if rank.shape != conf.shape or rank.ndim != 1:
            raise InputError("draft_rank and draft_conf must be 1-D arrays of one length")
        if offs.ndim != 1 or len(offs) != len(prompt_ids) + 1 or offs[0] != 0 or offs[-1] != len(rank) \
                or np.any(np.diff(offs) < 1):
            raise InputError("offsets must run from 0 to the table size, one non-empty prompt each")
        if np.any(rank < 0) or np.any((conf < 0) | (conf > 1)):
            raise InputError("draft_rank must be >= 0 and draft_conf in [0, 1]")
        toks = np.full(len(rank), -1, np.int64) if tokens is None else np.asarray(tokens, dtype=np.int64)
        return cls(tuple(prompt_ids), offs, rank, conf, toks)

    @cached_property
    def top1_run(self) -> np.ndarray:
        """(N,) how many positions in a row from each one have draft_rank 0 (across prompt ends;
        callers cap at the prompt's end)."""
        positions = np.arange(self.size)
        next_miss = np.where(self.draft_rank != 0, positions, self.size)
        next_miss = np.minimum.accumulate(next_miss[::-1])[::-1]
        return next_miss - positions

    def remaining(self) -> np.ndarray:
        """(N,) tokens left in the prompt's recorded output from each position, itself included."""
        ends = np.repeat(self.offsets[1:], np.diff(self.offsets))
        return ends - np.arange(self.size)



def _padded(values: np.ndarray, depth: int, fill) -> np.ndarray:
    """`values` followed by `depth` copies of `fill`: row p + l is readable for every p < N, l < depth."""
    return np.concatenate([values, np.full(depth, fill, dtype=values.dtype)])


def _leading(ok_at, depth: int, size: int) -> np.ndarray:
    """(N,) how many levels l = 0, 1, ... in a row satisfy ok_at(l) (a bool (N,) array), at most depth."""
    alive = np.ones(size, dtype=bool)
    count = np.zeros(size, dtype=np.int64)
    for level in range(depth):
        alive &= ok_at(level)
        if not alive.any():
            break
        count += alive
    return count


def chain_lengths(table: TokenTable, levels: Sequence[int], *, eta: float = 0.0,
                  bins: Sequence[int] | None = None) -> np.ndarray:
    """(N,) accepted length of a step starting at each position whose level l keeps the drafter's
    top-levels[l] (a chain: all 1); drafting stops after the first token with conf <= eta (eta > 0);
    with CAPE `bins`, a miss at l is caught iff its rank < bins[confidence_bin(conf)]."""
    n = table.size
    depth = len(levels)
    # Past the end of the table a rank never hits; the cap below makes this exact, and reading the
    # next prompt's ranks past a prompt's own end is harmless for the same reason.
    rank = _padded(table.draft_rank, depth, np.iinfo(np.int64).max)
    conf = _padded(table.draft_conf, depth, 0.0)
    if max(levels) == 1:                                                             # m
        first_miss = np.minimum(table.top1_run, depth)
    else:
        first_miss = _leading(lambda l: rank[l: l + n] < levels[l], depth, n)
    drafted = np.full(n, depth, dtype=np.int64)                                     # d
    if eta > 0:
        drafted = np.minimum(_leading(lambda l: conf[l: l + n] > eta, depth, n) + 1, depth)
    accepted = np.where(first_miss >= drafted, drafted + 1, first_miss + 1)
    if bins is not None:
        at_miss = np.arange(n) + first_miss
        caught = (first_miss < depth) & (rank[at_miss] < np.asarray(bins, dtype=np.int64)[confidence_bin(conf[at_miss])])
        accepted = np.where(caught, first_miss + 2, accepted)
    return np.minimum(accepted, table.remaining())


def chain_shapes(table: TokenTable, pos: np.ndarray, levels: Sequence[int], verify_tokens: float, *,
                 eta: float = 0.0, bins: Sequence[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(draft forwards, verify query tokens) of the steps starting at `pos` under the same rules as
    `chain_lengths`: `verify_tokens` (the step's fixed shape) unless `eta` stops the drafts early
    (a chain then verifies its drafts + 1) or `bins` size each position's set by its confidence."""
    conf = table.draft_conf
    depth = len(levels)
    window = pos[:, None] + np.arange(depth)[None, :]
    conf_w = np.where(window < conf.size, conf[np.minimum(window, max(conf.size - 1, 0))], 1.0)
    drafted = np.full(pos.size, depth, np.int64)
    verify = np.full(pos.size, float(verify_tokens))
    if eta > 0:
        drafted = np.minimum(first_failure(conf_w > eta) + 1, depth).astype(np.int64)
        verify = drafted + 1.0
    if bins is not None:
        sizes = np.asarray(bins, np.int64)[confidence_bin(conf_w)]
        verify = 1.0 + (sizes * (np.arange(depth)[None, :] < drafted[:, None])).sum(axis=1)
    return drafted, np.rint(verify).astype(np.int64)
