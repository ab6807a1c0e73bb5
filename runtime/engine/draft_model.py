"""What every decoder that drafts with a draft model shares: the draft model's cache kept in step
with the committed tokens (`DrafterState`) and drawing k drafts from its logits (`DraftModelDecoder`).

A proposal asks for the drafter's forwards as `Feed`s (`catch_up`, `feed` are generators: `yield
from` them): alone a feed runs on the state's own cache (`DrafterState.run`), in a batch the feeds of
every row run as one forward over the batch's drafter cache (`runtime.engine.batch`). Either way the
model is called by `DrafterState.forward`, the one place a drafter kind says how it runs.
"""
from __future__ import annotations

from collections.abc import Generator

import torch

from runtime.engine.base import Decoder, Feed
from runtime.engine.tree import with_prefix
from runtime.engine.verify import uniforms
from runtime.llama import Llama
from verification import rules_torch

Feeding = Generator[Feed, torch.Tensor, torch.Tensor]   # yields feeds, returns the last one's logits


class DrafterState:
    """A draft model's cache kept in step with the committed tokens (crop to the common prefix)."""

    def __init__(self, model: Llama, cache):
        self.model = model
        self.cache = cache          # its own cache alone, its row of the batch's (`runtime.ragged.RowCache`)
        self.seq: list[int] = []   # tokens whose K/V sit in the cache, in order

    def catch_up(self, committed: list[int]) -> Feeding:
        """Feed the committed tokens the cache lacks (at least the last); logits after the last [vocab]."""
        keep = 0
        limit = min(len(self.seq), len(committed) - 1)
        while keep < limit and self.seq[keep] == committed[keep]:
            keep += 1
        self.cache.crop(keep)
        self.seq = list(committed)
        return (yield from self.feed(committed[keep:]))[-1]

    def feed(self, tokens: list[int], positions: torch.Tensor | None = None,
             tail: torch.Tensor | None = None) -> Feeding:
        """The drafter's logits [len(tokens), vocab] after `tokens` (a `Feed`: positions and tail mask there)."""
        return (yield Feed(tokens, positions, tail, state=self))

    @property
    def target_cache(self):
        """The target cache the drafter reads besides its own (None: a draft model reads none)."""
        return None

    def forward(self, ids: torch.Tensor, cache, positions: torch.Tensor | None, mask: torch.Tensor | None,
                target_cache) -> torch.Tensor:
        """The drafter's logits [b, q, vocab] for ids [b, q] over `cache` (the target's `target_cache`)."""
        return self.model(ids, cache, position_ids=positions, mask=mask).logits

    def run(self, feed: Feed) -> torch.Tensor:
        """A feed alone, on this state's own cache: logits [n, vocab]."""
        ids = torch.tensor([feed.tokens], dtype=torch.long, device=self.cache.device)
        mask = None
        if feed.tail is not None:
            mask = with_prefix(self.cache.length + len(feed.tokens) - feed.tail.shape[1], feed.tail)
        with torch.no_grad():
            return self.forward(ids, self.cache, feed.positions, mask, self.target_cache)[0]

    def rollback(self, length: int) -> None:
        """Drop everything after the first `length` entries (speculative entries of the last step)."""
        self.cache.crop(min(length, self.cache.length))
        self.seq = self.seq[: self.cache.length]


class DraftModelDecoder(Decoder):
    needs_drafter = True
    batchable = True

    def start_drafter(self, prompt: list[int]) -> None:
        self.draft = DrafterState(self.drafter, self.new_cache("drafter", self.drafter, len(prompt)))

    def after_commit(self, proposal, verdict) -> None:
        self.draft.rollback(len(self.tokens) - 1)

    def drafter_logits(self, ids: list[int]) -> torch.Tensor:
        tensor = torch.tensor([ids], dtype=torch.long, device=self.drafter.device)
        with torch.no_grad():
            return self.drafter(tensor).logits[0].to(self.target.device)

    def draw(self, logits: torch.Tensor, k: int, replacement: bool) -> tuple[list[int], torch.Tensor]:
        """k draft tokens from the drafter's logits (top-k when greedy; when sampling, the torch twin
        of `rules.draft_candidates`) and the processed distribution q they come from."""
        q = self.sampling.probs(logits)
        if self.sampling.greedy:
            return q.topk(min(k, q.numel())).indices.tolist(), q
        return rules_torch.draft_candidates(q, k, uniforms(self.rng, k, q.device), replacement).tolist(), q
