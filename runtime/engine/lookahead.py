"""Lookahead decoding: a 2-D Jacobi window and an n-gram pool, one target forward per step.

Window: up to N-1 levels of W guess tokens; token (l, j) sits at relative position l + j + 1 after
the pending token and sees the pending token, level-0 tokens of earlier columns and the tokens of
its own column up to level l, so column j is a chain whose last output extends an n-gram.
Verification branch: at most G pool n-grams that start with the pending token, merged into a trie
(shared prefixes verified once) and checked by the rules (greedy, or `verify_tree_one_hot`, the
rule for one-hot drafts, when sampling). The two branches do not see each other. New tokens of
the window are always the target's argmax (the paper's one-hot drafts), so sampling stays lossless.
"""
from __future__ import annotations

import numpy as np
import torch

from verification import rules
from runtime.engine import tree as tree_geo
from runtime.engine.base import Decoder, Proposal


def build_trie(candidates: list[tuple[int, ...]]) -> rules.TokenTree:
    """Merge n-gram continuations into a token tree rooted at the pending token."""
    parents, tokens = [-1], [-1]
    index: dict[tuple[int, int], int] = {}
    for cand in candidates:
        node = 0
        for token in cand:
            key = (node, token)
            if key not in index:
                parents.append(node)
                tokens.append(token)
                index[key] = len(parents) - 1
            node = index[key]
    return rules.TokenTree(tuple(parents), tuple(tokens))


class Lookahead(Decoder):
    method = "lookahead"

    def start_drafter(self, prompt: list[int]) -> None:
        W, N = self.config.W, self.config.N
        self.pool: dict[int, list[tuple[int, ...]]] = {}
        if self.config.prompt_ngrams:
            for i in range(len(prompt) - N + 1):
                self._remember(tuple(prompt[i : i + N]))
        choice = np.random.default_rng(self.seed).choice(np.asarray(prompt), size=W)
        self.levels: list[list[int]] = [[int(t) for t in choice]]

    def _remember(self, ngram: tuple[int, ...]) -> None:
        bucket = self.pool.setdefault(ngram[0], [])
        rest = ngram[1:]
        if rest in bucket:
            bucket.remove(rest)
        bucket.append(rest)
        if len(bucket) > self.config.G:
            bucket.pop(0)

    def propose(self) -> Proposal:
        candidates = list(reversed(self.pool.get(self.tokens[-1], [])))[: self.config.G]
        return Proposal(build_trie(candidates), naive=True)

    def verify(self, proposal: Proposal) -> tuple[rules.Verdict, int]:
        trie, W = proposal.tree, self.config.W
        past, n_trie = self.target_cache.length, proposal.tree.size
        levels = self.levels
        n_win = len(levels) * W
        local = torch.zeros(n_trie + n_win, n_trie + n_win, dtype=torch.bool)
        local[:n_trie, :n_trie] = tree_geo.ancestor_mask(trie.parents)
        positions = [past + d for d in tree_geo.depths(trie.parents)]
        for l in range(len(levels)):
            for j in range(W):
                row = n_trie + l * W + j
                local[row, 0] = True                                   # the pending token
                local[row, n_trie : n_trie + j] = True                 # level 0, earlier columns
                for lower in range(l + 1):
                    local[row, n_trie + lower * W + j] = True          # own column up to itself
                positions.append(past + l + j + 1)
        ids = [self.tokens[-1], *trie.tokens[1:], *(t for level in levels for t in level)]
        with self.timer.region("verify"), torch.no_grad():
            logits = self.target(self._ids(ids), self.target_cache,
                                 position_ids=torch.tensor(positions, device=self.target.device),
                                 mask=tree_geo.with_prefix(past, local)).logits[0]
        self._advance_window(logits[n_trie + (len(levels) - 1) * W :].argmax(-1).tolist())
        return self.decide(trie, logits[:n_trie], proposal), n_trie + n_win

    def _advance_window(self, guesses: list[int]) -> None:
        """Collect the window's n-grams into the pool and slide it one Jacobi step."""
        if len(self.levels) < self.config.N - 1:
            self.levels.append(guesses)
            return
        for j, new in enumerate(guesses):
            self._remember(tuple(level[j] for level in self.levels) + (new,))
        self.levels = self.levels[1:] + [guesses]
