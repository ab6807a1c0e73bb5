"""What every decoder that drafts with a draft model shares: the draft model's cache kept in step
with the committed tokens (`DrafterState`) and drawing k drafts from its logits (`DraftModelDecoder`).
"""
from __future__ import annotations

import torch

from runtime.engine.base import Decoder
from runtime.engine.verify import uniforms
from runtime.llama import Llama
from verification import rules_torch


class DrafterState:
    """A draft model's cache kept in step with the committed tokens (crop to the common prefix)."""

    def __init__(self, model: Llama, cache):
        self.model = model
        self.cache = cache
        self.seq: list[int] = []   # tokens whose K/V sit in the cache, in order

    def catch_up(self, committed: list[int]) -> torch.Tensor:
        """Feed the committed tokens the cache lacks (at least the last); logits after the last [vocab]."""
        keep = 0
        limit = min(len(self.seq), len(committed) - 1)
        while keep < limit and self.seq[keep] == committed[keep]:
            keep += 1
        self.cache.crop(keep)
        self.seq = list(committed)
        return self.feed(committed[keep:])[-1]

    def feed(self, tokens: list[int], positions: torch.Tensor | None = None,
             mask: torch.Tensor | None = None) -> torch.Tensor:
        ids = torch.tensor([tokens], dtype=torch.long, device=self.model.device)
        with torch.no_grad():
            return self.model(ids, self.cache, position_ids=positions, mask=mask).logits[0]

    def rollback(self, length: int) -> None:
        """Drop everything after the first `length` entries (speculative entries of the last step)."""
        self.cache.crop(min(length, self.cache.length))
        self.seq = self.seq[: self.cache.length]


class DraftModelDecoder(Decoder):
    needs_drafter = True

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
