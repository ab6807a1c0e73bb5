"""The engine decoder of `mcsd` (methods/mcsd.py): a k1 x ... x kg tree drafted level by level."""
from __future__ import annotations

import torch

from runtime.engine import tree as tree_geo
from runtime.engine.base import Proposal, Proposing
from runtime.engine.draft_model import DraftModelDecoder
from verification import rules


class MCSD(DraftModelDecoder):
    """Multi-candidate SD: a k-configuration tree drafted level by level with a tree mask."""

    method = "mcsd"

    @property
    def replacement(self) -> bool:
        return self.config.replacement

    def propose(self) -> Proposing:
        levels, replacement = self.config.k, self.config.replacement
        prefix = len(self.tokens)
        logits_rows = {0: (yield from self.draft.catch_up(self.tokens))}
        parents, tokens = [-1], [-1]
        q_rows: dict[int, torch.Tensor] = {}
        frontier = [0]
        forwards = 1
        for depth, k in enumerate(levels):
            new_nodes = []
            for node in frontier:
                drafts, q_rows[node] = self.draw(logits_rows[node], k, replacement)
                for token in drafts:
                    parents.append(node)
                    tokens.append(token)
                    new_nodes.append(len(parents) - 1)
            frontier = new_nodes
            if depth + 1 < len(levels) and frontier:
                anc = tree_geo.ancestor_mask(parents)[frontier][:, 1:]   # over the tree nodes fed so far
                base = prefix + depth  # positions: the root (pending) sits at prefix - 1
                positions = torch.full((len(frontier),), base, device=self.drafter.device)
                out = yield from self.draft.feed([tokens[n] for n in frontier], positions, anc)
                logits_rows.update({n: out[i] for i, n in enumerate(frontier)})
                forwards += 1
        vocab = self.drafter.config.vocab_size
        zeros = torch.zeros(vocab, dtype=torch.float64, device=self.drafter.device)
        q = torch.stack([q_rows.get(n, zeros) for n in range(len(parents))])
        self._q_rows = q_rows
        return Proposal(rules.TokenTree(tuple(parents), tuple(tokens)), q, [float(q_rows[0].max())],
                        draft_forwards=forwards)

    def after_commit(self, proposal, verdict) -> None:
        proposal.confidences = [float(self._q_rows[0].max())] + [
            float(self._q_rows[n].max()) for n in verdict.path if n in self._q_rows]
        self.draft.rollback(len(self.tokens) - len(verdict.tokens))  # the tree nodes never stay
