"""The engine decoder of `sd` (methods/sd.py): a draft model's chain of gamma tokens."""
from __future__ import annotations

import torch

from runtime.engine.base import Proposal, Proposing
from runtime.engine.draft_model import DraftModelDecoder
from verification import rules


class SD(DraftModelDecoder):
    """Speculative decoding with a draft-model chain of length gamma."""

    method = "sd"

    def propose(self) -> Proposing:
        gamma = self.config.gamma
        logits = yield from self.draft.catch_up(self.tokens)
        drafts, q_rows, conf = [], [], []
        for i in range(gamma):
            (token,), q = self.draw(logits, 1, True)
            drafts.append(token)
            q_rows.append(q)
            conf.append(float(q.max()))
            if i + 1 < gamma:
                logits = (yield from self.draft.feed([token]))[-1]
                self.draft.seq.append(token)
        q_rows.append(torch.zeros_like(q_rows[0]))  # the leaf has no q
        return Proposal(rules.TokenTree.chain(drafts), torch.stack(q_rows), conf, draft_forwards=gamma)
