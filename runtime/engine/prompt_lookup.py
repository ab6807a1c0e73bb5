"""The engine decoder of `prompt_lookup` (methods/prompt_lookup.py): n-gram matching in the context.

The proposal follows vLLM's `ngram` proposer: the longest n in n_min..n_max whose last n committed
tokens occurred earlier in the context (prompt and generated tokens), at its earliest occurrence;
the up to gamma tokens that followed it are verified as one chain. They are one-hot drafts (no q),
so sampling verifies them with the rule for deterministic candidates and stays lossless.
"""
from __future__ import annotations

from typing import Callable, Sequence

from runtime.engine.base import Decoder, Proposal
from verification import rules


def earliest_match(tokens: Sequence[int], n: int) -> int | None:
    """Where the earliest earlier occurrence of the context's last `n` tokens starts; None: none did."""
    size = len(tokens)
    suffix = list(tokens[size - n:])
    for start in range(size - n):                          # earlier than the suffix itself
        if list(tokens[start:start + n]) == suffix:
            return start
    return None


def match_continuation(tokens: Sequence[int], n_min: int, n_max: int, gamma: int,
                       match: Callable[[int], int | None] | None = None) -> list[int]:
    """The up to `gamma` tokens after the earliest earlier occurrence of the context's longest
    suffix of n_min..n_max tokens; [] when none occurred. `match(n)`: `earliest_match(tokens, n)`,
    or a replay's cache of it."""
    match = match or (lambda n: earliest_match(tokens, n))
    for n in range(min(n_max, len(tokens) - 1), n_min - 1, -1):
        start = match(n)
        if start is not None:
            return list(tokens[start + n:start + n + gamma])
    return []


class PromptLookup(Decoder):
    method = "prompt_lookup"
    batchable = True

    def propose(self) -> Proposal:
        c = self.config
        drafts = match_continuation(self.tokens, c.n_min, c.n_max, c.gamma)
        tree = rules.TokenTree.chain(drafts) if drafts else rules.TokenTree((-1,), (-1,))
        return Proposal(tree, naive=True)
