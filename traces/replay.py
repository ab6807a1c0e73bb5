"""Exact greedy replay of speculative methods from a TokenTrace alone (no models, no torch).

Under greedy decoding (temperature 0) the target's output is one fixed token sequence y_0..y_{n-1},
and a teacher-forced pass records for every position p the rank of y_p in the drafter's
distribution given the true prefix y_<p (`draft_rank`, 0 = the drafter's top-1) and the drafter's
top-1 probability there (`draft_conf`). A speculation step that starts at committed position p
only ever consults the drafter along the true prefix until the first miss, so these two columns
decide every step exactly:

- sd (config `gamma`): the drafter's greedy chain of gamma tokens; level l hits iff
  draft_rank[p+l] == 0.
- mcsd (config `k`, e.g. `4x2x1` = k_1 x ... x k_g): level l keeps the drafter's top-k_{l+1}
  children of the node on the true path; it hits iff draft_rank[p+l] < k_{l+1}. (Greedy MCSS draws
  the top-k; with or without replacement only matters when sampling.)
- cape (config `gamma`, `bins`): greedy chain as sd; chain position l carries the expansion set
  of drafter ranks 1 .. S[b]-1 where b = floor(10 * draft_conf[p+l]) clipped to 0..10 and S is
  the bin array (11 entries; the GLIDE paper's 12-entry array is accepted, its last entry is never
  used). S[b] counts the top-ranked tokens taken at that position *including* the chain token
  (GLIDE Alg. 1 `topk(p_i, S[...])`), so S[b] <= 1 means no expansion. At the first chain miss l,
  if y_{p+l} is in the expansion set it is accepted and the target's prediction after it (one more
  token) comes free from the same forward.
- an early-exit drafter (config `gamma` = max draft steps, `eta`): the self-draft chain as sd, but
  drafting stops after the first drafted token whose top-1 confidence is <= eta (that token is
  still verified); eta = 0 gives fixed gamma steps.

"Accepted length" of a step = tokens committed by it, bonus included, exactly as StepTrace's
`accepted`: with d tokens drafted along the chain and m leading hits,
  accepted = d + 1 if m == d (all hit; the target's bonus token),
  accepted = m + 2 for cape when the miss at m is caught by the expansion set,
  accepted = m + 1 otherwise (the target's correction token),
then capped at the tokens left in the recorded output (n - p), which is how a run that stops at
max_new_tokens or EOS truncates its last step. Steps follow each other: the next one starts at
p + accepted.

Vectorised with numpy: `accept_lengths` scores one configuration at every position of every
prompt at once; `walk` follows the steps of many configurations together.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

from common.errors import InputError



# ----------------------------------------------------------------------------- token tables

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


# ----------------------------------------------------------------------------- per-position scoring

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


def accept_lengths(table: TokenTable, method: str, config: Any) -> np.ndarray:
    """(N,) accepted length of a step of `method`/`config` (a config, mapping or label) that starts
    at each position; the method module says how its steps replay (`MethodSpec.replay_lengths`)."""
    import methods

    spec = methods.get(method)
    lengths = spec.replay_lengths(table, spec.parse(config))
    if lengths is None:
        raise InputError(f"method {method} cannot be replayed from a TokenTrace (replayable: {', '.join(replayable())})")
    return lengths


def replayable() -> list[str]:
    """Methods whose greedy steps a TokenTrace decides."""
    import methods

    return [s.name for s in methods.specs() if type(s).replay_lengths is not methods.MethodSpec.replay_lengths]


def chain_lengths(table: TokenTable, levels: Sequence[int], *, eta: float = 0.0,
                  bins: Sequence[int] | None = None) -> np.ndarray:
    """(N,) accepted length of a step starting at each position whose level l keeps the drafter's
    top-levels[l] (a chain: all 1); drafting stops after the first token with conf <= eta (eta > 0);
    with CAPE `bins`, a miss at l is caught iff its rank < bins[confidence_bin(conf)]."""
    from costmodel.cape import confidence_bin

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


# ----------------------------------------------------------------------------- step walks

@dataclass(frozen=True)
class Walk:
    """The steps of one or more configurations over every prompt of a TokenTable."""

    steps: np.ndarray        # (C,) total steps per configuration
    tokens: int              # tokens in the table (every configuration commits them all)
    histogram: np.ndarray    # (C, max_len + 1) steps by accepted length

    @property
    def mean_accepted(self) -> np.ndarray:
        return self.tokens / self.steps


def walk(table: TokenTable, lengths: np.ndarray) -> Walk:
    """Follow the step chains p -> p + lengths[p] from every prompt start, for each row of
    `lengths` ((N,) or (C, N) from `accept_lengths`) at once."""
    lens = np.atleast_2d(np.asarray(lengths, dtype=np.int64))
    if lens.shape[1] != table.size or np.any(lens < 1):
        raise InputError("step lengths must be >= 1 and one per token-table position")
    n_configs = lens.shape[0]
    max_len = int(lens.max())
    starts = np.broadcast_to(table.offsets[:-1], (n_configs, len(table.prompt_ids))).copy()
    ends = np.broadcast_to(table.offsets[1:], starts.shape)
    rows = np.broadcast_to(np.arange(n_configs)[:, None], starts.shape)
    histogram = np.zeros((n_configs, max_len + 1), dtype=np.int64)
    active = starts < ends
    width = max_len + 1
    while active.any():
        r, c = rows[active], starts[active]
        taken = lens[r, c]
        histogram += np.bincount(r * width + taken, minlength=n_configs * width).reshape(n_configs, width)
        starts[active] = c + taken
        active = starts < ends
    steps = histogram.sum(axis=1)
    return Walk(steps=steps, tokens=table.size, histogram=histogram)


def replay_steps(table: TokenTable, method: str, config: Any) -> pd.DataFrame:
    """Every replayed step of one configuration: prompt_id, step, pos (committed output tokens
    before the step) and accepted, in StepTrace order."""
    lengths = accept_lengths(table, method, config)
    records: list[tuple[str, int, int, int]] = []
    for index, prompt_id in enumerate(table.prompt_ids):
        pos, end, base, step = int(table.offsets[index]), int(table.offsets[index + 1]), int(table.offsets[index]), 0
        while pos < end:
            records.append((prompt_id, step, pos - base, int(lengths[pos])))
            pos += int(lengths[pos])
            step += 1
    return pd.DataFrame.from_records(records, columns=["prompt_id", "step", "pos", "accepted"])


def replay_summary(table: TokenTable, method: str, configs: Iterable[Any]) -> pd.DataFrame:
    """Mean accepted length (tokens per step) of many configurations of one method."""
    import methods

    spec = methods.get(method)
    parsed = [spec.parse(c) for c in configs]
    if not parsed:
        raise InputError("replay_summary needs at least one configuration")
    lengths = np.stack([accept_lengths(table, method, c) for c in parsed])
    result = walk(table, lengths)
    return pd.DataFrame({
        "method": method,
        "config": [c.label for c in parsed],
        "steps": result.steps,
        "tokens": result.tokens,
        "mean_accepted": result.mean_accepted,
    })
