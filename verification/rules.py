"""Verification rules of speculative decoding, written once, over plain probability vectors.

Every rule here takes probability vectors as plain sequences of numbers (Python floats, numpy
floats, `fractions.Fraction` or ints) and draws all of its randomness from an injected random
source, so the very same code runs in the engine's reference path (floats), under exact
enumeration by `verification.exact` (symbolic uniforms and Fractions) and in the tests that
check `verification.rules_torch` against it.

Random source protocol (`RandomSource`):
    uniform() -> number in [0, 1)
    categorical(weights) -> index i drawn with probability weights[i] / sum(weights)
                            (weights >= 0, positive sum; normalised or not)
    memo(key) -> None       optional: "the rest of this run depends only on key"; exact mode
                            (`verification.exact`, memo=True) reuses the law below a key, the
                            other sources ignore it (call it as getattr(rng, "memo", None))
`NumpySource(seed)` is the seeded implementation; `ScriptedSource(uniforms, draws)` replays
given uniforms (categorical draws by inverse CDF, `inverse_cdf`), as the batched torch rules do.

Token tree (`TokenTree`): node 0 is the root (the last committed token, token -1), nodes 1..N are
drafted tokens; `parents[i]` is the parent node of node i with 0 <= parents[i] < i; `tokens[i]`
the drafted token. A node's children are verified in increasing node index (candidate order).
`p_rows[i]` / `q_rows[i]` are the target / draft distributions of the token FOLLOWING node i's
path (row 0: after the committed context), so a tree of N drafted nodes takes N + 1 rows. An MCSD
k-configuration `k1 x k2 x ...` is the tree whose depth-d nodes each have k_{d+1} children; a
CAPE expansion set is any tree with a variable number of children per node; a chain of gamma
drafts is `TokenTree.chain(drafts)`.

Rules (all raise `InputError` naming the vector or token on bad input):
    mcss(candidates, p, q, rng, replacement=True) -> Step
        Multi-candidate speculative sampling at one position (MCSD Alg. 1 with replacement,
        Alg. 2 without). Candidate i is accepted with probability min(1, p^(x)/q^(x)); after a
        rejection p^ := norm(max(0, p^ - q^)), and without replacement q^ also loses the rejected
        token and is renormalised (q^ is what the candidate was drawn from). If all candidates
        are rejected the endpoint token is drawn from the final p^. k = 1 is speculative sampling.
    mcns(candidates, p, rng) -> Step
        Naive multi-candidate sampling: x ~ p; accept the first candidate equal to x, else return x.
    mcss_one_hot(candidates, p, rng) -> Step
        Deterministic candidates (one-hot drafts: CAPE sets, n-gram candidates), see below.
    verify_tree(tree, p_rows, q_rows, rng, replacement=True) -> Verdict
        MCSS over each node's children, walking down the accepted path; the bonus token after a
        fully accepted path is drawn from p at the leaf.
    verify_tree_one_hot(tree, p_rows, rng) -> Verdict
        `mcss_one_hot` over each node's children, walking down the accepted path (no q rows).
    speculative_chain(drafts, p_rows, q_rows, rng) -> Verdict
        Speculative sampling of one chain (gamma drafts, gamma + 1 p rows, gamma q rows).
    greedy_tree(tree, p_rows) -> Verdict; greedy_chain(drafts, p_rows) -> Verdict
        Longest prefix whose tokens equal the target's argmax (ties: lowest index), then the
        target's argmax as the correction or bonus token.
    draft_candidates(q, k, rng, replacement=True) -> list[int]
        The drafting side: k i.i.d. draws from q, or k sequential draws without replacement
        (fewer when q's support has fewer than k tokens). `iter_candidates` draws them on demand.

Deterministic candidates (`mcss_one_hot`): candidates fixed before verification and drawn from
no q (top-k drafter ranks, pool n-grams) are one-hot drafts, q_i = delta(x_i). MCSS without
replacement with those q: accept x_i when u < p^(x_i) (min(1, p^/q) = p^), else p^ := p^ with
x_i zeroed and renormalised (= norm(max(0, p^ - delta(x_i)))); all rejected: endpoint ~ p^.
Lossless: before x_i is tested, p^ is p restricted to the tokens outside R = {x_1..x_{i-1}} and
renormalised, and the walk reaches x_i with probability 1 - p(R); so x_i (first occurrence) is
emitted with probability (1 - p(R)) p(x_i) / (1 - p(R)) = p(x_i), a repeat with probability 0,
and a token t outside all candidates with (1 - p(R_k)) p(t) / (1 - p(R_k)) = p(t). Any token is
emitted with probability p(token), and P(accept) = p(set of candidates), the most any lossless
rule reaches with one-hot drafts. `u < p^` (not <=) never accepts a token with p^ = 0.

All-zero residual: max(0, p^ - q^) has no mass only when p^ = q^, where rejection has
probability zero; a float rejection there comes from rounding. The rule then keeps p^ as the
distribution of the endpoint token (`residual` returns p^ unchanged). It never falls back to
an index default such as token 0, and never produces NaN.

Vector validation (`check_distribution`): entries must be numbers >= 0 (no NaN), the length must
match, and the sum must be 1: exactly for int/Fraction vectors, within SUM_TOLERANCE for floats.
Nothing is ever renormalised silently.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Callable, Iterator, Protocol, Sequence

import numpy as np

from common.errors import InputError

SUM_TOLERANCE = 1e-4  # |sum(vector) - 1| allowed for float vectors; int/Fraction vectors must sum to exactly 1

Number = Any  # float, numpy float, int or Fraction


class RandomSource(Protocol):
    """Where a rule gets its randomness; see the module docstring."""

    def uniform(self) -> Number: ...

    def categorical(self, weights: Sequence[Number]) -> int: ...


def inverse_cdf(weights: Sequence[Number], u: Number) -> int:
    """First index i with u * total < cumsum(weights)[i]; total is the last cumulative sum.

    Zero-weight indices are never returned. Summation is sequential, as `torch.cumsum` on CPU.
    """
    cumulative = []
    running = 0
    for w in weights:
        running = running + w
        cumulative.append(running)
    if not cumulative or not running > 0:
        raise InputError("categorical weights have no positive mass")
    threshold = u * running
    for i, c in enumerate(cumulative):
        if threshold < c:
            return i
    return max(i for i, w in enumerate(weights) if w > 0)  # u * total rounded up to total


class NumpySource:
    """Seeded random source: numpy `default_rng(seed)` uniforms, categorical by inverse CDF."""

    def __init__(self, seed: int | None = 0):
        self.rng = np.random.default_rng(seed)

    def uniform(self) -> float:
        return float(self.rng.random())

    def categorical(self, weights: Sequence[Number]) -> int:
        return inverse_cdf(weights, float(self.rng.random()))

    def memo(self, key: Any) -> None:
        """No-op: only exact mode memoises sub-states (`verification.exact`)."""


class ScriptedSource:
    """Replays given uniforms: `uniforms` feed uniform(), `draws` feed categorical() by inverse CDF."""

    def __init__(self, uniforms: Sequence[Number], draws: Sequence[Number]):
        self._uniforms = list(uniforms)
        self._draws = list(draws)
        self.used_uniforms = 0
        self.used_draws = 0

    def uniform(self) -> Number:
        if self.used_uniforms >= len(self._uniforms):
            raise InputError(f"scripted source ran out of uniforms after {self.used_uniforms}")
        self.used_uniforms += 1
        return self._uniforms[self.used_uniforms - 1]

    def categorical(self, weights: Sequence[Number]) -> int:
        if self.used_draws >= len(self._draws):
            raise InputError(f"scripted source ran out of categorical draws after {self.used_draws}")
        self.used_draws += 1
        return inverse_cdf(weights, self._draws[self.used_draws - 1])

    def memo(self, key: Any) -> None:
        """No-op: only exact mode memoises sub-states (`verification.exact`)."""


# --- validation -------------------------------------------------------------------------------

def _is_exact(x: Number) -> bool:
    return isinstance(x, (int, Fraction)) and not isinstance(x, bool)


def check_distribution(vec: Sequence[Number], name: str, size: int | None = None,
                       tol: float = SUM_TOLERANCE) -> list:
    """Return `vec` as a list after checking it is a probability vector; InputError names `name`."""
    try:
        values = list(vec)
    except TypeError:
        raise InputError(f"{name} is not a sequence of probabilities") from None
    if not values:
        raise InputError(f"{name} is empty")
    if size is not None and len(values) != size:
        raise InputError(f"{name} has length {len(values)}, expected {size}")
    exact = True
    for i, x in enumerate(values):
        if isinstance(x, (bool, str)) or not isinstance(x, (int, float, Fraction, np.number)):
            raise InputError(f"{name}[{i}] is not a number ({x!r})")
        if x != x:
            raise InputError(f"{name}[{i}] is NaN")
        if x < 0:
            raise InputError(f"{name}[{i}] is negative ({x})")
        if math.isinf(x):
            raise InputError(f"{name}[{i}] is infinite")
        exact = exact and _is_exact(x)
    total = sum(values)
    if exact:
        if total != 1:
            raise InputError(f"{name} sums to {total}, not exactly 1")
    elif abs(float(total) - 1.0) > tol:
        raise InputError(f"{name} sums to {float(total):.9g}, off from 1 by more than {tol:g}")
    return values


def _check_token(token: Any, vocab: int, name: str) -> int:
    if isinstance(token, bool) or not isinstance(token, (int, np.integer)) or not 0 <= token < vocab:
        raise InputError(f"{name} is {token!r}, not a token id in [0, {vocab})")
    return int(token)


# --- distribution updates ---------------------------------------------------------------------

def argmax(vec: Sequence[Number]) -> int:
    """Index of the largest entry; ties go to the lowest index."""
    best = 0
    for i in range(1, len(vec)):
        if vec[i] > vec[best]:
            best = i
    return best


def residual(p: Sequence[Number], q: Sequence[Number]) -> list:
    """norm(max(0, p - q)); when it has no mass (p = q up to rounding) `p` itself, see module doc."""
    diff = [pi - qi if pi > qi else 0 * pi for pi, qi in zip(p, q)]
    total = 0
    for d in diff:  # sequential, as the batched rules' cumsum
        total = total + d
    if not total > 0:
        return list(p)
    return [d / total for d in diff]


def remove_token(q: Sequence[Number], token: int) -> list:
    """q with `token` set to 0 and renormalised (all zeros when nothing is left)."""
    out = list(q)
    out[token] = 0 * out[token]
    total = 0
    for x in out:
        total = total + x
    if not total > 0:
        return out
    return [x / total for x in out]


# --- results ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Step:
    """One multi-candidate position: the accepted candidate, or the endpoint token on rejection."""

    accepted: bool
    token: int
    candidate: int | None  # index into the candidates of the accepted one; None when all rejected


@dataclass(frozen=True)
class Verdict:
    """A verified chain or tree: the committed tokens are the accepted drafts then one more token."""

    tokens: tuple[int, ...]  # accepted drafted tokens, then the correction (or bonus) token
    n_accepted: int          # drafted tokens accepted (len(tokens) - 1)
    path: tuple[int, ...]    # accepted tree nodes (chain: node i + 1 is draft i), root excluded
    bonus: bool              # True when every token on a root-to-leaf path was accepted


@dataclass(frozen=True)
class TokenTree:
    """Draft token tree as a parent array; see the module docstring for the conventions."""

    parents: tuple[int, ...]
    tokens: tuple[int, ...]
    _children: tuple[tuple[int, ...], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        parents, tokens = tuple(int(x) for x in self.parents), tuple(int(x) for x in self.tokens)
        if not parents or parents[0] != -1:
            raise InputError("tree parents[0] must be -1 (node 0 is the root)")
        if len(tokens) != len(parents):
            raise InputError(f"tree has {len(parents)} parents but {len(tokens)} tokens")
        children: list[list[int]] = [[] for _ in parents]
        for i in range(1, len(parents)):
            if not 0 <= parents[i] < i:
                raise InputError(f"tree parents[{i}] is {parents[i]}, must lie in [0, {i})")
            children[parents[i]].append(i)
        object.__setattr__(self, "parents", parents)
        object.__setattr__(self, "tokens", tokens)
        object.__setattr__(self, "_children", tuple(tuple(c) for c in children))

    @classmethod
    def chain(cls, drafts: Sequence[int]) -> "TokenTree":
        return cls(tuple(range(-1, len(drafts))), (-1, *drafts))

    @property
    def size(self) -> int:
        """Nodes including the root (= number of p rows the tree needs)."""
        return len(self.parents)

    def children(self, node: int) -> tuple[int, ...]:
        return self._children[node]


# --- the rules --------------------------------------------------------------------------------

def mcss(candidates: Sequence[int], p: Sequence[Number], q: Sequence[Number], rng: RandomSource,
         replacement: bool = True, name: str = "") -> Step:
    """Multi-candidate speculative sampling at one position (MCSD Alg. 1 / Alg. 2)."""
    where = f" at {name}" if name else ""
    p_hat = check_distribution(p, f"p{where}")
    q_bar = check_distribution(q, f"q{where}", size=len(p_hat))
    for i, raw in enumerate(candidates):
        x = _check_token(raw, len(p_hat), f"candidate {i}{where}")
        if not q_bar[x] > 0:
            raise InputError(f"candidate {i}{where} (token {x}) has draft probability 0; "
                             "candidates must be drawn from q" + ("" if replacement else " without replacement"))
        if rng.uniform() <= p_hat[x] / q_bar[x]:
            return Step(True, x, i)
        p_hat = residual(p_hat, q_bar)
        if not replacement:
            q_bar = remove_token(q_bar, x)
    return Step(False, rng.categorical(p_hat), None)


def mcns(candidates: Sequence[int], p: Sequence[Number], rng: RandomSource, name: str = "") -> Step:
    """Naive multi-candidate sampling: draw x from p, accept the first candidate equal to x."""
    where = f" at {name}" if name else ""
    p_vec = check_distribution(p, f"p{where}")
    tokens = [_check_token(c, len(p_vec), f"candidate {i}{where}") for i, c in enumerate(candidates)]
    x = rng.categorical(p_vec)
    if x in tokens:
        return Step(True, x, tokens.index(x))
    return Step(False, x, None)


def _check_rows(rows: Sequence, tree: TokenTree, name: str, leaves_optional: bool) -> None:
    if len(rows) != tree.size:
        raise InputError(f"{name} has {len(rows)} rows, the tree needs {tree.size} (one per node incl. the root)")
    if not leaves_optional:
        return
    for node in range(tree.size):
        if tree.children(node) and rows[node] is None:
            raise InputError(f"{name}[{node}] is missing but node {node} has children")


def _walk_tree(tree: TokenTree, p_rows: Sequence[Sequence[Number]], rng: RandomSource,
               decide: Callable[[int, list[int]], Step]) -> Verdict:
    """Walk down the accepted path: `decide(node, child tokens)` at inner nodes, bonus from p at the leaf."""
    node, tokens, path = 0, [], []
    while True:
        children = tree.children(node)
        if not children:
            bonus = rng.categorical(check_distribution(p_rows[node], f"p_rows[{node}]"))
            return Verdict(tuple(tokens + [bonus]), len(path), tuple(path), True)
        step = decide(node, [tree.tokens[c] for c in children])
        if not step.accepted:
            return Verdict(tuple(tokens + [step.token]), len(path), tuple(path), False)
        node = children[step.candidate]
        tokens.append(step.token)
        path.append(node)


def verify_tree(tree: TokenTree, p_rows: Sequence[Sequence[Number]], q_rows: Sequence[Sequence[Number] | None],
                rng: RandomSource, replacement: bool = True) -> Verdict:
    """MCSS over each node's children, walking down the accepted path; bonus from p at the leaf."""
    _check_rows(p_rows, tree, "p_rows", leaves_optional=False)
    _check_rows(q_rows, tree, "q_rows", leaves_optional=True)
    return _walk_tree(tree, p_rows, rng, lambda node, kids: mcss(
        kids, p_rows[node], q_rows[node], rng, replacement=replacement, name=f"tree node {node}"))


def mcss_one_hot(candidates: Sequence[int], p: Sequence[Number], rng: RandomSource, name: str = "") -> Step:
    """MCSS without replacement for deterministic candidates (one-hot drafts); see the module doc."""
    where = f" at {name}" if name else ""
    p_hat = check_distribution(p, f"p{where}")
    for i, raw in enumerate(candidates):
        x = _check_token(raw, len(p_hat), f"candidate {i}{where}")
        if rng.uniform() < p_hat[x]:
            return Step(True, x, i)
        p_hat = remove_token(p_hat, x)
    return Step(False, rng.categorical(p_hat), None)


def verify_tree_one_hot(tree: TokenTree, p_rows: Sequence[Sequence[Number]], rng: RandomSource) -> Verdict:
    """`mcss_one_hot` over each node's children (CAPE sets, n-gram tries), walking down the accepted path."""
    _check_rows(p_rows, tree, "p_rows", leaves_optional=False)
    return _walk_tree(tree, p_rows, rng, lambda node, kids: mcss_one_hot(
        kids, p_rows[node], rng, name=f"tree node {node}"))


def speculative_chain(drafts: Sequence[int], p_rows: Sequence[Sequence[Number]],
                      q_rows: Sequence[Sequence[Number]], rng: RandomSource) -> Verdict:
    """Speculative sampling of one chain: gamma drafts, gamma + 1 p rows, gamma (or gamma + 1) q rows."""
    if len(q_rows) not in (len(drafts), len(drafts) + 1):
        raise InputError(f"q_rows has {len(q_rows)} rows for {len(drafts)} drafts")
    return verify_tree(TokenTree.chain(drafts), p_rows, list(q_rows[:len(drafts)]) + [None], rng)


def greedy_tree(tree: TokenTree, p_rows: Sequence[Sequence[Number]]) -> Verdict:
    """Walk down children equal to the target's argmax; then the argmax as correction or bonus."""
    _check_rows(p_rows, tree, "p_rows", leaves_optional=False)
    node, tokens, path = 0, [], []
    while True:
        target = argmax(check_distribution(p_rows[node], f"p_rows[{node}]"))
        children = tree.children(node)
        match = next((c for c in children if tree.tokens[c] == target), None)
        if match is None:
            return Verdict(tuple(tokens + [target]), len(path), tuple(path), not children)
        node = match
        tokens.append(target)
        path.append(node)


def greedy_chain(drafts: Sequence[int], p_rows: Sequence[Sequence[Number]]) -> Verdict:
    """Greedy longest-prefix match of a chain of drafts against gamma + 1 target rows."""
    return greedy_tree(TokenTree.chain(drafts), p_rows)


def iter_candidates(q: Sequence[Number], k: int, rng: RandomSource, replacement: bool = True) -> Iterator[int]:
    """`draft_candidates` drawn on demand: candidate i is drawn when the consumer asks for it. The
    joint law of the candidates consumed is the same, so a rule that stops at the first acceptance
    (`mcss`) gives the same law; exact mode then enumerates no draws that are never verified."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise InputError(f"k is {k!r}, must be a positive integer")
    q_bar = check_distribution(q, "q")

    def draws() -> Iterator[int]:
        nonlocal q_bar
        for _ in range(k):
            if not any(x > 0 for x in q_bar):
                return
            x = rng.categorical(q_bar)
            yield x
            if not replacement:
                q_bar = remove_token(q_bar, x)
    return draws()


def draft_candidates(q: Sequence[Number], k: int, rng: RandomSource, replacement: bool = True) -> list[int]:
    """k candidates from q: i.i.d., or sequentially without replacement (fewer if q's support is smaller)."""
    return list(iter_candidates(q, k, rng, replacement))
