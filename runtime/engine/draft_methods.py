"""Methods with a token tree from a draft model: ar (no drafter), sd (chain), mcsd (k-tree), cape.

Their configurations are the registry's (methods/sd.py, mcsd.py, cape.py), which exact replay
reads too, so a configuration means the same thing to the engine and to replay.
"""
from __future__ import annotations

import torch

from verification import rules, rules_torch
from runtime.engine import tree as tree_geo
from runtime.engine.base import Decoder, Proposal
from runtime.engine.verify import uniforms
from runtime.llama import Llama
from costmodel.cape import confidence_bin


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


class AR(Decoder):
    """Plain autoregressive decoding with the target: the reference of every identity test."""

    method = "ar"

    def propose(self) -> Proposal:
        return Proposal(rules.TokenTree((-1,), (-1,)))


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


class SD(DraftModelDecoder):
    """Speculative decoding with a draft-model chain of length gamma."""

    method = "sd"

    def propose(self) -> Proposal:
        gamma = self.config.gamma
        logits = self.draft.catch_up(self.tokens)
        drafts, q_rows, conf = [], [], []
        for i in range(gamma):
            (token,), q = self.draw(logits, 1, True)
            drafts.append(token)
            q_rows.append(q)
            conf.append(float(q.max()))
            if i + 1 < gamma:
                logits = self.draft.feed([token])[-1]
                self.draft.seq.append(token)
        q_rows.append(torch.zeros_like(q_rows[0]))  # the leaf has no q
        return Proposal(rules.TokenTree.chain(drafts), torch.stack(q_rows), conf, draft_forwards=gamma)


class MCSD(DraftModelDecoder):
    """Multi-candidate SD: a k-configuration tree drafted level by level with a tree mask."""

    method = "mcsd"

    @property
    def replacement(self) -> bool:
        return self.config.replacement

    def propose(self) -> Proposal:
        levels, replacement = self.config.k, self.config.replacement
        prefix = len(self.tokens)
        logits_rows = {0: self.draft.catch_up(self.tokens)}
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
                anc = tree_geo.ancestor_mask(parents)[frontier][:, 1:]
                base = prefix + depth  # positions: the root (pending) sits at prefix - 1
                positions = torch.full((len(frontier),), base, device=self.drafter.device)
                out = self.draft.feed([tokens[n] for n in frontier], positions, tree_geo.with_prefix(prefix, anc))
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


class CAPE(DraftModelDecoder):
    """GLIDE's CAPE: a greedy chain plus confidence-binned expansion sets (GLIDE Alg. 1-2).

    Position i's set holds drafter ranks 1 .. S[b]-1, b = costmodel.cape.confidence_bin(conf_i) (S counts the
    chain token, as `traces.replay`). Expansion tokens are leaves hanging off the chain node before
    them, so the ancestor mask is exactly CAPE's mask and the target's output at an accepted
    expansion token gives one more token.
    """

    method = "cape"

    def propose(self) -> Proposal:
        gamma, bins = self.config.gamma, self.config.bins
        logits = self.draft.catch_up(self.tokens)
        chain, expansions, conf = [], [], []
        for i in range(gamma):
            q = self.sampling.probs(logits)
            c = float(q.max())
            size = bins[int(confidence_bin(c))]
            ranked = q.topk(min(max(size, 1), q.numel())).indices.tolist()
            chain.append(int(q.argmax()))
            expansions.append([t for t in ranked if t != chain[-1]][: max(size - 1, 0)])
            conf.append(c)
            if i + 1 < gamma:
                logits = self.draft.feed([chain[-1]])[-1]
                self.draft.seq.append(chain[-1])
        parents, tokens = list(range(-1, gamma)), [-1, *chain]
        for i, extra in enumerate(expansions):
            for token in extra:
                parents.append(i)      # chain node i is the parent of position i + 1's set
                tokens.append(token)
        return Proposal(rules.TokenTree(tuple(parents), tuple(tokens)), None, conf, draft_forwards=gamma, naive=True)
