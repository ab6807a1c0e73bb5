"""The KV cache of a batch whose rows hold different lengths, and the inputs of its forwards.

Continuous batching puts requests of different lengths in one forward, and after a speculative step
each row has accepted its own number of tokens, so one length for every row (`runtime.cache.KVCache`)
cannot hold them. `BatchKVCache` keeps a host length per row (`row_lengths`): its buffers are
[rows, kv_heads, capacity, head_dim] per layer, row r valid over its first row_lengths[r] entries,
stale (or zero) after them.

A batched forward of q query rows per row, some of them padding, runs through the unchanged
`runtime.llama.Llama.forward`:
- `inputs(rows)` builds ids [b, q], positions [b, q] and the mask [b, 1, q, width + q], `width` being
  the longest row: row r's real queries see its own prefix and, among its last entries and its new
  tokens, what its tail mask lets them see (default causal), never another row's entries nor the
  stale entries past its own length; a padding query sees its own key only (a row of the mask is
  never empty, so nothing turns NaN);
- `append`, called by every layer, writes row r's q new keys/values at row_lengths[r] .. + q and
  returns the first width + q entries; the forward reads `lengths` (that padded width) as its past
  length, so the mask has its usual shape [.., q, past + q];
- `advance(counts)` then counts each row's real tokens (the padding written past a row's length
  stays stale and is overwritten later).
Edits per row: `keep` (after verification every row keeps its prefix and its accepted path: one
gather and one scatter on the device for all rows), `crop` (a row's host length moves back).
Rows join and leave: `add_row` copies a request's batch-1 cache (its prefill) into the next row and
`remove_row` moves the last row into the freed one, so rows 0..active-1 are the live ones and a
forward runs over those only. A request's decoder sees its row through a `RowCache` (the length and
crop a drafter's state reads between forwards), which follows the row when it moves.
Eager mode only: the static and graph modes keep one length per cache (`runtime.cache`).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from common.errors import InputError
from runtime.cache import KVCache


@dataclass
class RowInput:
    """One row's part of a batched forward: its new tokens, their absolute positions ([n]; None: the
    row's next n), and its tail mask ([n, m] bool over the row's last m keys, i.e. its last m - n
    cached entries and its n new tokens, every earlier entry visible; None: causal over the new)."""

    tokens: list[int]
    positions: torch.Tensor | None = None
    tail: torch.Tensor | None = None


class RowCache:
    """A request's view of its row of a `BatchKVCache`: the row's length and crop."""

    static = False

    def __init__(self, batch: "BatchKVCache", index: int):
        self.batch, self.index = batch, index

    @property
    def length(self) -> int:
        return self.batch.row_lengths[self.index]

    def crop(self, length: int) -> None:
        self.batch.crop(self.index, length)


class BatchKVCache:
    """Per-layer key/value buffers [rows, kv_heads, capacity, head_dim], each row of its own length."""

    static = False

    def __init__(self, config, rows: int, capacity: int = 256, dtype=torch.float32, device="cpu"):
        self.config, self.rows, self.dtype, self.device = config, rows, dtype, torch.device(device)
        shape = (rows, config.num_kv_heads, max(capacity, 1), config.head_dim)
        self.keys = [torch.zeros(shape, dtype=dtype, device=self.device) for _ in range(config.num_layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=self.device) for _ in range(config.num_layers)]
        self.row_lengths: list[int] = []      # one per live row, in row order
        self.views: list[RowCache] = []
        self._index: tuple[tuple, torch.Tensor] | None = None   # (row lengths, q) -> append's write index

    @classmethod
    def like(cls, cache: KVCache, rows: int, capacity: int) -> "BatchKVCache":
        """A batch cache of `rows` rows shaped like a batch-1 cache of the same module."""
        return cls(cache.config, rows, capacity, cache.dtype, cache.device)

    # -- what Llama.forward reads --------------------------------------------------------------
    @property
    def active(self) -> int:
        return len(self.row_lengths)

    @property
    def width(self) -> int:
        """The longest row: the past length of a batched forward (shorter rows are masked past theirs)."""
        return max(self.row_lengths, default=0)

    @property
    def lengths(self) -> list[int]:
        return [self.width] * len(self.keys)

    @property
    def length(self) -> int:
        return self.width

    def layer_kv(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The first `width` entries of one layer, every live row (rows past their length: stale)."""
        n = self.width
        return self.keys[layer][: self.active, :, :n], self.values[layer][: self.active, :, :n]

    def filled(self) -> torch.Tensor:
        """[active, 1, 1, width] bool: which of `layer_kv`'s entries each row holds."""
        lengths = torch.tensor(self.row_lengths, device=self.device)
        return (torch.arange(self.width, device=self.device)[None] < lengths[:, None])[:, None, None]

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write row r's q new k/v after its own length; return each layer's first width + q entries."""
        b, _, q, _ = k.shape
        if b != self.active:
            raise ValueError(f"a forward of {b} rows over a batch cache of {self.active} live rows")
        end = self.width + q
        self._reserve(end)
        index = self._write_index(q).expand_as(k)
        self.keys[layer][:b].scatter_(2, index, k)
        self.values[layer][:b].scatter_(2, index, v)
        return self.keys[layer][:b, :, :end], self.values[layer][:b, :, :end]

    def _write_index(self, q: int) -> torch.Tensor:
        key = (tuple(self.row_lengths), q)
        if self._index is None or self._index[0] != key:
            lengths = torch.tensor(self.row_lengths, device=self.device)
            self._index = key, (lengths[:, None] + torch.arange(q, device=self.device))[:, None, :, None]
        return self._index[1]

    def _reserve(self, needed: int) -> None:
        """Grow every layer's buffers (double, as KVCache) until they hold `needed` entries."""
        capacity = self.keys[0].shape[2]
        if needed <= capacity:
            return
        capacity = max(needed, 2 * capacity)
        for store in (self.keys, self.values):
            for layer, old in enumerate(store):
                grown = old.new_zeros(old.shape[:2] + (capacity, old.shape[3]))
                grown[:, :, : old.shape[2]] = old
                store[layer] = grown

    # -- the inputs of a batched forward ---------------------------------------------------------
    def inputs(self, rows: list[RowInput]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """ids [b, q], positions [b, q] and mask [b, 1, q, width + q] of a forward over every live row
        (a row with no tokens takes part as padding only); q = the most tokens of a row."""
        b, past = self.active, self.width
        if len(rows) != b or not rows:
            raise ValueError(f"{len(rows)} row inputs for {b} live rows")
        counts = torch.tensor([len(r.tokens) for r in rows])
        q = max(int(counts.max()), 1)
        lengths = torch.tensor(self.row_lengths)
        slots = lengths[:, None] + torch.arange(q)                  # [b, q]: where each query's key goes
        ids, positions = torch.zeros(b, q, dtype=torch.long), slots.clone()
        tails = [self._tail(i, r) for i, r in enumerate(rows)]
        span = torch.tensor([t.shape[1] for t in tails])
        packed = torch.zeros(b, q, max(int(span.max()), 1), dtype=torch.bool)
        for i, (r, tail) in enumerate(zip(rows, tails)):
            n = len(r.tokens)
            ids[i, :n] = torch.tensor(r.tokens, dtype=torch.long)
            if r.positions is not None:
                positions[i, :n] = r.positions.to("cpu")
            packed[i, :n, : tail.shape[1]] = tail
        # key k of row i: before the row's tail visible, inside it the tail's column, after it hidden
        keys = torch.arange(past + q)
        column = keys[None] - (lengths + counts - span)[:, None]    # [b, keys]
        inside = (column >= 0) & (column < span[:, None])
        from_tail = packed.gather(2, column.clamp(0, packed.shape[2] - 1)[:, None].expand(b, q, past + q))
        mask = torch.where(inside[:, None], from_tail, (column < 0)[:, None])
        padding = torch.arange(q)[None] >= counts[:, None]          # [b, q]
        mask = torch.where(padding[:, :, None], keys == slots[:, :, None], mask)   # padding sees its own key
        dev = self.device
        return ids.to(dev), positions.to(dev), mask[:, None].to(dev)

    def _tail(self, row: int, given: RowInput) -> torch.Tensor:
        """A row input's tail mask [n, m] (causal over its n tokens when it gives none)."""
        n = len(given.tokens)
        if given.tail is None:
            return torch.ones(n, n, dtype=torch.bool).tril()
        tail = given.tail.to("cpu", torch.bool)
        if tail.shape[0] != n or not n <= tail.shape[1] <= self.row_lengths[row] + n:
            raise ValueError(f"tail mask of shape {tuple(tail.shape)} for {n} tokens after {self.row_lengths[row]}")
        return tail

    def advance(self, counts: list[int]) -> None:
        """Count the real tokens a batched forward wrote to each row."""
        self.row_lengths = [n + c for n, c in zip(self.row_lengths, counts, strict=True)]

    # -- per-row edits ----------------------------------------------------------------------------
    def crop(self, row: int, length: int) -> None:
        if not 0 <= length <= self.row_lengths[row]:
            raise ValueError(f"cannot crop row {row} of length {self.row_lengths[row]} to {length}")
        self.row_lengths[row] = length

    def keep(self, starts: list[int], paths: list[list[int]]) -> None:
        """Row r keeps its first starts[r] entries plus those at the absolute indices paths[r]
        (>= starts[r], ascending), packed after them: every row in one gather per layer."""
        b = self.active
        if len(starts) != b or len(paths) != b:
            raise ValueError(f"keep needs one start and one path per live row ({b})")
        n = max(map(len, paths), default=0)
        if n:
            self._reserve(max(starts) + n)
            dst = torch.tensor(starts)[:, None] + torch.arange(n)
            src = dst.clone()      # padding past a row's path copies an entry onto itself
            for r, path in enumerate(paths):
                src[r, : len(path)] = torch.tensor(path, dtype=torch.long)
            shape = (b, self.config.num_kv_heads, n, self.config.head_dim)
            src = src.to(self.device)[:, None, :, None].expand(shape)
            dst = dst.to(self.device)[:, None, :, None].expand(shape)
            for store in (self.keys, self.values):
                for buffer in store:
                    buffer[:b].scatter_(2, dst, buffer[:b].gather(2, src))
        self.row_lengths = [s + len(p) for s, p in zip(starts, paths)]

    # -- rows joining and leaving -------------------------------------------------------------------
    def add_row(self, cache: KVCache) -> RowCache:
        """Copy a batch-1 cache's entries into the next row; return that row's view."""
        if self.active == self.rows:
            raise InputError(f"the batch cache holds {self.rows} rows, all live")
        lengths = set(cache.lengths)
        if len(lengths) != 1:
            raise ValueError(f"a cache whose layers hold different lengths {sorted(lengths)} cannot join a batch")
        n, row = lengths.pop(), self.active
        self._reserve(n)
        for mine, theirs in ((self.keys, cache.keys), (self.values, cache.values)):
            for layer, buffer in enumerate(mine):
                buffer[row, :, :n] = theirs[layer][0, :, :n]
        self.row_lengths.append(n)
        self.views.append(RowCache(self, row))
        return self.views[-1]

    def remove_row(self, row: int) -> None:
        """Free a row: the last live row moves into it (its view follows)."""
        last = self.active - 1
        if row != last:
            n = self.row_lengths[last]
            for store in (self.keys, self.values):
                for buffer in store:
                    buffer[row, :, :n] = buffer[last, :, :n]
            self.row_lengths[row] = n
            self.views[row] = self.views[last]
            self.views[row].index = row
        self.row_lengths.pop()
        self.views.pop()
