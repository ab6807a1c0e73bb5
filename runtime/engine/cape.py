"""The engine decoder of `cape` (methods/cape.py): a greedy chain plus confidence-binned expansion sets."""
from __future__ import annotations

from costmodel.cape import confidence_bin
from runtime.engine.base import Proposal, Proposing
from runtime.engine.draft_model import DraftModelDecoder
from verification import rules


class CAPE(DraftModelDecoder):
    """GLIDE's CAPE: a greedy chain plus confidence-binned expansion sets (GLIDE Alg. 1-2).

    Position i's set holds drafter ranks 1 .. S[b]-1, b = costmodel.cape.confidence_bin(conf_i) (S counts the
    chain token, as `traces.replay`). Expansion tokens are leaves hanging off the chain node before
    them, so the ancestor mask is exactly CAPE's mask and the target's output at an accepted
    expansion token gives one more token.
    """

    method = "cape"

    def propose(self) -> Proposing:
        gamma, bins = self.config.gamma, self.config.bins
        logits = yield from self.draft.catch_up(self.tokens)
        chain, expansions, conf = [], [], []
        for i in range(gamma):
            q = self.sampling.probs(logits)
            c = float(q.max())
            size = bins[int(confidence_bin(c))]
            ranked = q.topk(min(size, q.numel())).indices.tolist()
            chain.append(int(q.argmax()))
            expansions.append([t for t in ranked if t != chain[-1]][: size - 1])
            conf.append(c)
            if i + 1 < gamma:
                logits = (yield from self.draft.feed([chain[-1]]))[-1]
                self.draft.seq.append(chain[-1])
        parents, tokens = list(range(-1, gamma)), [-1, *chain]
        for i, extra in enumerate(expansions):
            for token in extra:
                parents.append(i)      # chain node i is the parent of position i + 1's set
                tokens.append(token)
        return Proposal(rules.TokenTree(tuple(parents), tuple(tokens)), None, conf, draft_forwards=gamma, naive=True)
