"""The runtime modes and the static KV cache that graph capture needs.

Three modes run the same engine code (`MODES`):
- "eager": `KVCache`, buffers that grow and attention over the valid entries only (the CPU
  default, unchanged);
- "static": `StaticKVCache`, one allocation of fixed capacity (plus `HEADROOM` for padded queries),
  written at device slot indices; every forward attends over the whole buffer with a boolean mask
  built on the device (`window`), so a forward's tensor shapes depend only on its width;
- "graph": "static" with each forward padded to a width bucket and, on CUDA, captured once per
  bucket as a CUDA graph and replayed (`runtime.graph.GraphRunner`).

The filled lengths stay host integers: the host knows them without reading the device (they change
by the widths it asked for and by the accept decision it already read), so keeping them costs no
synchronisation; what a captured graph reads (mask, slots, positions) are device tensors that are
refilled before each replay. Cache edits are the eager cache's: `crop` moves the host length,
`keep` gathers the accepted path on the device.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from common.errors import InputError

MODES = ("eager", "static", "graph")
HEADROOM = 256          # buffer entries past the capacity, written only by padded queries
STEP_ROOM = 512         # capacity beyond prompt + new tokens: one step's widest tree or window


class KVCache:
    """Per-layer key/value buffers [batch, kv_heads, capacity, head_dim] with a length per layer.

    Layers may hold different lengths for a while (an early-exit drafter runs the shallow layers
    only); a forward over a layer range needs the layers of that range to agree.
    `runtime.cache.StaticKVCache` is the fixed-capacity variant of the static and graph modes.
    """

    static = False

    def __init__(self, config, batch: int = 1, capacity: int = 256, dtype=torch.float32, device="cpu"):
        self.config = config
        self.batch, self.dtype, self.device = batch, dtype, torch.device(device)
        shape = (batch, config.num_kv_heads, max(capacity, 1), config.head_dim)
        self.keys = [torch.zeros(shape, dtype=dtype, device=self.device) for _ in range(config.num_layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=self.device) for _ in range(config.num_layers)]
        self.lengths = [0] * config.num_layers

    @property
    def length(self) -> int:
        """Cached tokens in layer 0 (all layers agree outside of an early-exit draft)."""
        return self.lengths[0]

    def layer_kv(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The valid keys and values of one layer, [batch, kv_heads, length, head_dim] (views)."""
        n = self.lengths[layer]
        return self.keys[layer][:, :, :n], self.values[layer][:, :, :n]

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write new k/v after the layer's valid entries; return all valid k/v of the layer."""
        start, n = self.lengths[layer], k.shape[2]
        if start + n > self.keys[layer].shape[2]:
            self._grow(layer, start + n)
        self.keys[layer][:, :, start : start + n] = k
        self.values[layer][:, :, start : start + n] = v
        self.lengths[layer] = start + n
        return self.layer_kv(layer)

    def _grow(self, layer: int, needed: int) -> None:
        new_cap = max(needed, 2 * self.keys[layer].shape[2])
        for store in (self.keys, self.values):
            old = store[layer]
            grown = torch.zeros(old.shape[:2] + (new_cap, old.shape[3]), dtype=old.dtype, device=old.device)
            grown[:, :, : old.shape[2]] = old
            store[layer] = grown

    def crop(self, length: int, layers: range | None = None) -> None:
        """Roll back to the first `length` entries (rejected draft tokens are dropped)."""
        for layer in layers if layers is not None else range(len(self.lengths)):
            if length > self.lengths[layer]:
                raise ValueError(f"cannot crop layer {layer} of length {self.lengths[layer]} to {length}")
            self.lengths[layer] = length

    def keep(self, start: int, indices: list[int] | torch.Tensor, layers: range | None = None) -> None:
        """Keep entries [0, start) plus the entries at absolute `indices` (>= start, ascending), packed.

        After a tree verification this keeps the prefix and the accepted path only.
        """
        idx = torch.as_tensor(indices, dtype=torch.long, device=self.device)
        for layer in layers if layers is not None else range(len(self.lengths)):
            n = int(idx.numel())
            if n:
                for store in (self.keys, self.values):
                    picked = store[layer].index_select(2, idx)
                    store[layer][:, :, start : start + n] = picked
            self.lengths[layer] = start + n


def causal_mask(past: int, q: int, device="cpu") -> torch.Tensor:
    """[q, past + q] boolean: every new token sees the whole cache and the new tokens up to itself."""
    keys = torch.arange(past + q, device=device)
    return keys[None, :] <= (past + torch.arange(q, device=device))[:, None]


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise InputError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    return mode


def default_mode(device: torch.device | str) -> str:
    """graph on a GPU (what deployed engines do), eager elsewhere (no capture to gain from)."""
    return "graph" if torch.device(device).type == "cuda" else "eager"


def make_cache(config, batch: int, capacity: int, *, dtype, device, mode: str = "eager",
               runner=None) -> KVCache:
    """The KV cache of a mode: eager (growing) or static (fixed, with the graph runner of the mode)."""
    if check_mode(mode) == "eager":
        return KVCache(config, batch, capacity, dtype=dtype, device=device)
    return StaticKVCache(config, batch, capacity, dtype=dtype, device=device, runner=runner)


@dataclass
class Window:
    """The device tensors of one padded forward: `width` query rows, of which the first `q` are real."""

    q: int
    width: int
    mask: torch.Tensor        # [batch or 1, 1, width, buffer] bool, True = may attend
    slots: torch.Tensor       # [width] long, where the rows' keys/values are written
    positions: torch.Tensor   # [batch, width] long


class StaticKVCache(KVCache):
    """Fixed-capacity KV cache; `append` writes at `slots` and returns the whole buffer."""

    static = True

    def __init__(self, config, batch: int = 1, capacity: int = 256, dtype=torch.float32,
                 device="cpu", runner=None):
        super().__init__(config, batch, capacity + HEADROOM, dtype=dtype, device=device)
        self.capacity = capacity
        self.runner = runner
        self.slots: torch.Tensor | None = None
        self.buffer = self.keys[0].shape[2]
        self.key_index = torch.arange(self.buffer, device=self.device)

    def reset(self) -> None:
        """Empty the cache for a new sequence (buffers, and graphs captured on them, are kept)."""
        self.lengths = [0] * len(self.lengths)

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write k/v at the current window's slots (no host bookkeeping: `settle` does it)."""
        self.keys[layer].index_copy_(2, self.slots, k)
        self.values[layer].index_copy_(2, self.slots, v)
        return self.keys[layer], self.values[layer]

    def _grow(self, layer: int, needed: int) -> None:
        raise InputError(f"static KV cache is full: {needed} entries asked, capacity {self.capacity}")

    def settle(self, layers: range, length: int) -> None:
        """Record that `layers` now hold `length` valid entries (after a forward wrote them)."""
        for layer in layers:
            self.lengths[layer] = length

    def window(self, past: int, q: int, width: int, mask: torch.Tensor | None,
               position_ids: torch.Tensor | None, batch: int) -> Window:
        """Mask, slots and positions of a forward of q new tokens after `past`, padded to `width` rows.

        Real rows see what the eager mask lets them see (default causal) and nothing past
        `past + q`; padded rows see the prefix and the window up to themselves (never NaN) and
        their outputs are dropped, so padding does not change the real rows' results.
        """
        if past + q > self.capacity:
            raise InputError(f"static KV cache is full: {past + q} entries asked, capacity {self.capacity}")
        if width - q > HEADROOM:
            raise ValueError(f"padding of {width - q} rows exceeds the cache headroom {HEADROOM}")
        dev = self.device
        slots = past + torch.arange(width, device=dev)
        causal = self.key_index[None, :] <= slots[:, None]                      # [width, buffer]
        if mask is None:
            full = causal[None, None]
        else:
            m = mask.to(device=dev, dtype=torch.bool)
            if m.shape[-1] != past + q or m.shape[-2] != q:
                raise ValueError(f"attention mask of shape {tuple(m.shape)} does not cover {q} queries x {past + q} keys")
            while m.dim() < 4:
                m = m.unsqueeze(0) if m.dim() == 2 else m.unsqueeze(1)
            full = torch.zeros(m.shape[0], 1, width, self.buffer, dtype=torch.bool, device=dev)
            full[:, :, :q, : past + q] = m
            full[:, :, q:] = causal[q:]
        if position_ids is None:
            positions = slots[None].expand(batch, width)
        else:
            pos = position_ids.to(dev)
            pos = pos[None].expand(batch, q) if pos.dim() == 1 else pos
            positions = torch.cat([pos, slots[q:][None].expand(pos.shape[0], width - q)], dim=1)
        return Window(q, width, full, slots, positions)

    def visible_keys(self, length: int) -> torch.Tensor:
        """[buffer] bool: the entries another module may read (the first `length`)."""
        return self.key_index < length
