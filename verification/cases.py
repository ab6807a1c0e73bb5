"""Verification cases and the built-in samplers of the correct rules (for exact mode).

A case is what a sampler `(case, rng) -> outcome` is run on:
    PositionCase(p, q, k): one position; outcome = the token the rule commits; target law = p.
    SequenceCase(vocab, length, shape, seed, ...): a multi-step process over context-dependent
        p and q tables (integer weights hashed from (seed, context)); outcome = the first
        `length` committed tokens; target law = the autoregressive law of p (or its argmax
        sequence for greedy). Off-by-one rows and stale contexts change this law.
`shape` is an MCSD k-configuration (children per depth); (1,) * gamma is a chain.

Samplers (built on `verification.rules`, used by the verifier, the CLI and the tests):
    RULES: name -> Rule(sampler, kind, target) for single_draft, mcss_with, mcss_without, mcns, one_hot
    (position) and chain, tree_with, tree_without, greedy_chain, tree_one_hot (sequence);
    one_hot / tree_one_hot verify deterministic candidates (`ranked_candidates`) with
    `rules.mcss_one_hot` / `rules.verify_tree_one_hot`. The MCSS position samplers draw their
    candidates on demand (`on_demand`: the same law as drawing all k first, and a path stops at
    the first acceptance); every sampler marks its sub-states with `rng.memo` (rejections so far;
    the committed tokens of a decode loop) for exact mode's memo=True.
A PositionCase given float p or q converts them to exact Fractions (an ExactConversionWarning
says so), so exact mode judges the rule, not float rounding.
"""
from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable, Hashable, Sequence

import numpy as np

from verification import rules
from common.errors import InputError
from verification.exact import exact_law
from verification.inputs import ExactConversionWarning, to_exact


def _as_list(values: Any) -> Any:
    """A numpy vector as a list (so its floats convert as one probability vector); anything else as is."""
    return values.tolist() if isinstance(values, np.ndarray) else values


def _memo(rng, key: Hashable) -> None:
    """Tell exact mode (memo=True) that the rest of the run depends only on `key`; other sources may lack it."""
    memo = getattr(rng, "memo", None)
    if memo is not None:
        memo(key)


def normalise_weights(weights: Sequence[int], name: str) -> tuple[Fraction, ...]:
    """Integer weights -> exact probability vector (InputError on negative or all-zero weights)."""
    if any(w < 0 for w in weights):
        raise InputError(f"{name} weights must be >= 0")
    total = sum(weights)
    if total <= 0:
        raise InputError(f"{name} weights have no positive entry")
    return tuple(Fraction(int(w), int(total)) for w in weights)


@dataclass(frozen=True)
class PositionCase:
    """One position: target p, draft q, k candidates."""

    p: tuple
    q: tuple
    k: int = 1
    name: str = "case"

    def __post_init__(self):
        notes: list = []
        for role in ("p", "q"):  # floats become exact Fractions, so rounding cannot fail exact mode
            object.__setattr__(self, role, to_exact(_as_list(getattr(self, role)), f"{role} of {self.name}",
                                                    "convert", notes))
        for note in notes:
            warnings.warn(f"PositionCase: {note}", ExactConversionWarning, stacklevel=3)
        object.__setattr__(self, "p", tuple(rules.check_distribution(self.p, f"p of {self.name}")))
        object.__setattr__(self, "q", tuple(rules.check_distribution(self.q, f"q of {self.name}", size=len(self.p))))
        if self.k < 1:
            raise InputError(f"k of {self.name} is {self.k}, must be >= 1")

    @property
    def vocab(self) -> int:
        return len(self.p)

    def target(self) -> dict:
        return {i: pi for i, pi in enumerate(self.p) if pi > 0}


def random_weights(rng: np.random.Generator, vocab: int, max_weight: int) -> list[int]:
    weights = [int(w) for w in rng.integers(0, max_weight + 1, size=vocab)]
    if sum(weights) == 0:
        weights[int(rng.integers(vocab))] = 1
    return weights


def random_position_case(rng: np.random.Generator, vocab: int, k: int, max_weight: int = 3,
                         name: str = "case") -> PositionCase:
    """Small-integer-weight case; a share of q = p, one-hot q and disjoint supports on purpose."""
    p_w = random_weights(rng, vocab, max_weight)
    kind = int(rng.integers(6))
    if kind == 0:
        q_w = list(p_w)
    elif kind == 1:
        q_w = [0] * vocab
        q_w[int(rng.integers(vocab))] = 1
    elif kind == 2 and vocab > 1:
        q_w = [1 if w == 0 else 0 for w in p_w] if 0 in p_w else [0] * vocab
        if sum(q_w) == 0:
            q_w = random_weights(rng, vocab, max_weight)
    else:
        q_w = random_weights(rng, vocab, max_weight)
    return PositionCase(normalise_weights(p_w, "p"), normalise_weights(q_w, "q"), k, name)


@dataclass(frozen=True)
class SequenceCase:
    """Context-dependent p and q tables; the sampler commits tokens until `length` are out."""

    vocab: int
    length: int
    shape: tuple = (1, 1)
    seed: int = 0
    max_weight: int = 3
    name: str = "sequence"

    def __post_init__(self):
        if self.vocab < 1 or self.length < 1 or not self.shape or min(self.shape) < 1:
            raise InputError(f"{self.name}: vocab, length and every entry of shape must be >= 1")

    def _row(self, role: int, context: tuple) -> tuple:
        rng = np.random.default_rng([self.seed, role, len(context), *context])
        return normalise_weights(random_weights(rng, self.vocab, self.max_weight), "table row")

    def p_at(self, context: tuple) -> tuple:
        return _cached_row(self, 0, tuple(context))

    def q_at(self, context: tuple) -> tuple:
        return _cached_row(self, 1, tuple(context))

    def target(self) -> dict:
        return _cached_target(self)

    def greedy_target(self) -> dict:
        context: tuple = ()
        for _ in range(self.length):
            context += (rules.argmax(self.p_at(context)),)
        return {context: Fraction(1)}


@functools.lru_cache(maxsize=200_000)
def _cached_row(case: SequenceCase, role: int, context: tuple) -> tuple:
    return case._row(role, context)


def autoregressive(case: SequenceCase, rng) -> tuple:
    """The target process itself: each token from p at its context."""
    context: tuple = ()
    for _ in range(case.length):
        context += (rng.categorical(case.p_at(context)),)
    return context


@functools.lru_cache(maxsize=64)
def _cached_target(case: SequenceCase) -> dict:
    return exact_law(autoregressive, case)[0]


def node_contexts(parents: Sequence[int], tokens: Sequence[int], base: tuple) -> list[tuple]:
    """Context (committed tokens + path) after each node of a tree."""
    contexts = [base]
    for i in range(1, len(parents)):
        contexts.append(contexts[parents[i]] + (tokens[i],))
    return contexts


def draft_tree(case: SequenceCase, rng, base: tuple, replacement: bool,
               draft_context: Callable[[tuple, tuple], tuple] = lambda node_ctx, base: node_ctx) -> rules.TokenTree:
    """Draft a k-configuration tree from q, depth by depth (without replacement a node gets fewer
    children when q's support is smaller); `draft_context` lets a mutant read a stale context."""
    parents, tokens, contexts, frontier = [-1], [-1], [base], [0]
    for width in case.shape:
        nxt = []
        for node in frontier:
            for token in rules.draft_candidates(case.q_at(draft_context(contexts[node], base)), width, rng, replacement):
                parents.append(node)
                tokens.append(token)
                contexts.append(contexts[node] + (token,))
                nxt.append(len(parents) - 1)
        frontier = nxt
    return rules.TokenTree(tuple(parents), tuple(tokens))


def tree_rows(case: SequenceCase, tree: rules.TokenTree, base: tuple) -> tuple[list, list]:
    contexts = node_contexts(tree.parents, tree.tokens, base)
    return [case.p_at(c) for c in contexts], [case.q_at(c) if tree.children(i) else None for i, c in enumerate(contexts)]


def decode_sequence(case: SequenceCase, rng, replacement: bool = True, rows=tree_rows,
                    verify=rules.verify_tree, draft_context=None) -> tuple:
    """Draft a tree, verify it, commit; repeat until `length` tokens. Hooks serve the mutants."""
    committed: tuple = ()
    while len(committed) < case.length:
        _memo(rng, committed)  # the rest of the decode depends only on the committed tokens
        tree = draft_tree(case, rng, committed, replacement, *(() if draft_context is None else (draft_context,)))
        p_rows, q_rows = rows(case, tree, committed)
        committed += verify(tree, p_rows, q_rows, rng, replacement=replacement).tokens
    return committed[: case.length]


# --- the correct rules as samplers ----------------------------------------------------------

def on_demand(q: Sequence, k: int, rng, replacement: bool = True):
    """The k candidates drawn as MCSS asks for them (`rules.iter_candidates`), with a memo point after
    each rejection: with replacement the state after j rejections is j (p^ is the j-th residual and
    q is unchanged); without replacement it is the ordered list of rejected tokens."""
    rejected: list = []
    for x in rules.iter_candidates(q, k, rng, replacement):
        yield x
        rejected.append(x)  # resumed: x was rejected
        _memo(rng, ("rejected", len(rejected)) if replacement else ("rejected", *rejected))


def sample_sd(case: PositionCase, rng) -> int:
    return rules.mcss(on_demand(case.q, 1, rng), case.p, case.q, rng).token


def sample_mcss_with(case: PositionCase, rng) -> int:
    return rules.mcss(on_demand(case.q, case.k, rng), case.p, case.q, rng).token


def sample_mcss_without(case: PositionCase, rng) -> int:
    return rules.mcss(on_demand(case.q, case.k, rng, replacement=False), case.p, case.q, rng, replacement=False).token


def sample_mcns(case: PositionCase, rng) -> int:
    return rules.mcns(rules.draft_candidates(case.q, case.k, rng), case.p, rng).token


def sample_chain(case: SequenceCase, rng) -> tuple:
    return decode_sequence(SequenceCase(case.vocab, case.length, (1,) * len(case.shape), case.seed,
                                        case.max_weight, case.name), rng)


def sample_tree_with(case: SequenceCase, rng) -> tuple:
    return decode_sequence(case, rng, replacement=True)


def sample_tree_without(case: SequenceCase, rng) -> tuple:
    return decode_sequence(case, rng, replacement=False)


def sample_greedy_chain(case: SequenceCase, rng) -> tuple:
    def greedy(tree, p_rows, q_rows, rng, replacement=True):
        return rules.greedy_tree(tree, p_rows)
    chain = SequenceCase(case.vocab, case.length, (1,) * len(case.shape), case.seed, case.max_weight, case.name)
    return decode_sequence(chain, rng, verify=greedy)


def ranked_candidates(q: Sequence, k: int) -> list[int]:
    """Deterministic candidates (one-hot drafts): the k highest-q tokens, ties to the lowest id;
    past q's support they include tokens with q = 0 (and possibly p = 0), as top-k expansions do."""
    return sorted(range(len(q)), key=lambda t: (-q[t], t))[:k]


def sample_one_hot(case: PositionCase, rng) -> int:
    return rules.mcss_one_hot(ranked_candidates(case.q, case.k), case.p, rng).token


def sample_tree_one_hot(case: SequenceCase, rng) -> tuple:
    """expansion-set / n-gram-trie style: a k-configuration tree of ranked candidates, `verify_tree_one_hot`."""
    committed: tuple = ()
    while len(committed) < case.length:
        _memo(rng, committed)
        parents, tokens, contexts, frontier = [-1], [-1], [committed], [0]
        for width in case.shape:
            nxt = []
            for node in frontier:
                for token in ranked_candidates(case.q_at(contexts[node]), width):
                    parents.append(node)
                    tokens.append(token)
                    contexts.append(contexts[node] + (token,))
                    nxt.append(len(parents) - 1)
            frontier = nxt
        tree = rules.TokenTree(tuple(parents), tuple(tokens))
        committed += rules.verify_tree_one_hot(tree, [case.p_at(c) for c in contexts], rng).tokens
    return committed[: case.length]


@dataclass(frozen=True)
class Rule:
    """A sampler with the kind of case it runs on and how its target law is read from the case."""

    sampler: Callable[[Any, Any], Hashable]
    kind: str                                   # "position" | "sequence"
    target: Callable[[Any], dict] = lambda case: case.target()


RULES: dict[str, Rule] = {
    "single_draft": Rule(sample_sd, "position"),
    "mcss_with": Rule(sample_mcss_with, "position"),
    "mcss_without": Rule(sample_mcss_without, "position"),
    "mcns": Rule(sample_mcns, "position"),
    "chain": Rule(sample_chain, "sequence"),
    "tree_with": Rule(sample_tree_with, "sequence"),
    "tree_without": Rule(sample_tree_without, "sequence"),
    "greedy_chain": Rule(sample_greedy_chain, "sequence", target=lambda case: case.greedy_target()),
    "one_hot": Rule(sample_one_hot, "position"),
    "tree_one_hot": Rule(sample_tree_one_hot, "sequence"),
}
