"""Per-step acceptance draws: how many tokens each speculation step commits.

Every sampler answers one question for a batch of `n` sequences at once: how many draft
positions were proposed this step, how many query tokens the verify forward carries, and how many
tokens the step commits (bonus token included). All draws are numpy-vectorised over sequences;
samplers with memory (the bursty Markov model) carry a per-sequence state array.

The acceptance numbers come from a Profile's acceptance entry (`calibrate/profile.py` layout).
Which numbers a method needs, and how they become a sampler's arguments, is decided in its module
(`methods/`, `MethodSpec.sampler`); this module only draws.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from common.errors import InputError
from costmodel.cape import N_BINS


@dataclass
class StepDraws:
    """One step's outcome for each of n sequences."""

    accepted: np.ndarray       # tokens committed, bonus included (>= 1)
    drafted: np.ndarray        # draft positions proposed (sequential draft forwards)
    verify_tokens: np.ndarray  # query tokens in the verify forward, per sequence


def _check_prob(value: float, what: str) -> float:
    value = float(value)
    if not (0.0 <= value <= 1.0) or not np.isfinite(value):
        raise InputError(f"{what} must lie in [0, 1], got {value!r}")
    return value


def first_failure(hits: np.ndarray) -> np.ndarray:
    """Per row, the number of leading True values of a (n, g) boolean array."""
    n, g = hits.shape
    if g == 0:
        return np.zeros(n, dtype=np.int64)
    misses = ~hits
    return np.where(misses.any(axis=1), misses.argmax(axis=1), g).astype(np.int64)


class ChainSampler:
    """Chain speculation of `gamma` positions, position i accepted independently with beta_i.

    With `alpha_by_position` the i-th draft position uses its own rate; otherwise all use alpha."""

    stateful = False

    def __init__(self, gamma: int, betas: np.ndarray):
        if gamma < 0:
            raise InputError(f"gamma must be >= 0, got {gamma}")
        self.gamma = int(gamma)
        self.betas = np.asarray(betas, dtype=float)[: self.gamma]
        if self.betas.size != self.gamma:
            raise InputError(f"need {self.gamma} per-position acceptance rates, got {self.betas.size}")
        self.iid = bool(self.gamma) and bool(np.all(self.betas == self.betas[0])) and 0 < self.betas[0] < 1
        self.fixed_shape = (self.gamma, self.gamma + 1)

    def draw(self, rng: np.random.Generator, n: int, state=None) -> tuple[StepDraws, None]:
        if self.iid:  # leading accepts of iid positions: a geometric count, capped at gamma
            accepted = np.minimum(rng.geometric(1.0 - self.betas[0], n), self.gamma + 1)
        else:
            accepted = first_failure(rng.random((n, self.gamma)) < self.betas) + 1
        drafted = np.full(n, self.gamma, dtype=np.int64)
        return StepDraws(accepted, drafted, drafted + 1), None


class TreeSampler:
    """Multi-candidate tree k1 x ... x kg (MCSD): level i accepted with probability alpha@k_i.

    The verify forward carries every tree node: sum_i prod(k_1..k_i) plus the root token."""

    stateful = False

    def __init__(self, ks: list[int], level_alpha: np.ndarray):
        self.ks = [int(k) for k in ks]
        self.level_alpha = np.asarray(level_alpha, dtype=float)
        self.nodes = int(sum(np.cumprod(self.ks))) if self.ks else 0
        self.fixed_shape = (len(self.ks), self.nodes + 1)

    def draw(self, rng, n, state=None):
        hits = rng.random((n, len(self.ks))) < self.level_alpha
        accepted = first_failure(hits) + 1
        drafted = np.full(n, len(self.ks), dtype=np.int64)
        return StepDraws(accepted, drafted, np.full(n, self.nodes + 1, dtype=np.int64)), None


class MarkovChainSampler:
    """Bursty acceptance: a two-state Markov chain over evaluated draft positions.

    p_aa = P(accept | previous evaluated position accepted), p_ra = P(accept | previous rejected).
    The state (last outcome accepted?) carries across steps, per sequence."""

    stateful = True

    def __init__(self, gamma: int, p_aa: float, p_ra: float):
        self.gamma = int(gamma)
        self.p_aa = _check_prob(p_aa, "markov p_aa")
        self.p_ra = _check_prob(p_ra, "markov p_ra")
        self.fixed_shape = (self.gamma, self.gamma + 1)

    def initial_state(self, n: int) -> np.ndarray:
        return np.ones(n, dtype=bool)

    def draw(self, rng, n, state=None):
        prev = self.initial_state(n) if state is None else np.asarray(state, dtype=bool).copy()
        alive = np.ones(n, dtype=bool)
        n_acc = np.zeros(n, dtype=np.int64)
        u = rng.random((n, self.gamma))
        for i in range(self.gamma):
            hit = u[:, i] < np.where(prev, self.p_aa, self.p_ra)
            prev = np.where(alive, hit, prev)      # only evaluated positions move the chain
            n_acc += alive & hit
            alive &= hit
        drafted = np.full(n, self.gamma, dtype=np.int64)
        return StepDraws(n_acc + 1, drafted, drafted + 1), prev

    def stream(self, rng: np.random.Generator, n_steps: int) -> StepDraws:
        """`n_steps` consecutive steps of one sequence, vectorised through run lengths.

        Accept runs have geometric length (1 - p_aa), reject runs geometric length p_ra; a step
        consumes evaluated positions up to its first reject or `gamma` accepts."""
        g = self.gamma
        if g == 0:
            ones = np.ones(n_steps, dtype=np.int64)
            return StepDraws(ones, ones * 0, ones)
        m = n_steps + 1  # every (accept run, reject run) pair yields at least one step
        acc_runs = rng.geometric(1 - self.p_aa, m) if self.p_aa < 1 else np.full(m, n_steps * g + 1)
        rej_runs = rng.geometric(self.p_ra, m) if self.p_ra > 0 else np.full(m, n_steps + 1)
        acc_runs = acc_runs.astype(np.int64)
        rej_runs = rej_runs.astype(np.int64)
        if not rng.random() < self.p_aa:  # the chain opens with a reject: an empty accept run
            acc_runs[0] = 0
        # every reject run of length r: first reject closes the step of the preceding accept run,
        # each further reject is a step of its own with 0 accepted
        full = acc_runs // g
        tail = acc_runs % g
        per_run_steps = full + 1 + (rej_runs - 1)
        ends = np.cumsum(per_run_steps)
        cut = int(np.searchsorted(ends, n_steps)) + 1
        full, tail, rej_runs = full[:cut], tail[:cut], rej_runs[:cut]
        counts = np.stack([full, np.ones_like(full), rej_runs - 1], axis=1).ravel()
        values = np.stack(
            [np.full_like(full, g + 1), tail + 1, np.ones_like(full)], axis=1
        ).ravel()
        accepted = np.repeat(values, counts)[:n_steps]
        drafted = np.full(accepted.size, g, dtype=np.int64)
        return StepDraws(accepted.astype(np.int64), drafted, drafted + 1)


class CapeSampler:
    """CAPE on a chain of gamma: each position's confidence bin b ~ freq sets an expansion set of
    S[b] top-ranked tokens. Top-1 hits continue the chain; a miss whose target token is inside the
    expansion set commits that token and ends the step; otherwise the step ends at the miss."""

    stateful = False

    def __init__(self, gamma: int, bins: list[int], freq, topk_hit: dict[int, np.ndarray]):
        self.gamma = int(gamma)
        self.bins = np.asarray(bins, dtype=np.int64)
        if self.bins.size != N_BINS or (self.bins < 1).any():
            raise InputError(f"CAPE bins need {N_BINS} entries >= 1, got {list(bins)}")
        self.freq = np.asarray(freq, dtype=float) / float(np.sum(freq))
        self.cum = np.cumsum(self.freq)
        hit1 = np.asarray(topk_hit[1], dtype=float)
        # P(target in top-S[b] | bin b), looked up per bin at the configured expansion size
        hit_s = np.array([_topk_hit_at(topk_hit, int(self.bins[b]), b) for b in range(N_BINS)])
        self.hit1 = hit1
        self.p_exp_given_miss = np.where(hit1 < 1, (hit_s - hit1) / np.maximum(1 - hit1, 1e-12), 0.0)

    def draw(self, rng, n, state=None):
        g = self.gamma
        b = np.minimum(np.searchsorted(self.cum, rng.random((n, g)), side="right"), N_BINS - 1)
        top1 = rng.random((n, g)) < self.hit1[b]
        k = first_failure(top1)
        miss_bin = b[np.arange(n), np.minimum(k, g - 1)]
        saved = (k < g) & (rng.random(n) < self.p_exp_given_miss[miss_bin])
        accepted = k + 1 + saved
        verify = 1 + (self.bins[b]).sum(axis=1)
        return StepDraws(accepted.astype(np.int64), np.full(n, g, dtype=np.int64), verify.astype(np.int64)), None


def _topk_hit_at(topk_hit: dict[int, np.ndarray], k: int, b: int) -> float:
    """P(target in the drafter's top-k | bin b); between recorded k, the largest recorded k <= k."""
    known = sorted(topk_hit)
    usable = [kk for kk in known if kk <= k]
    return float(np.asarray(topk_hit[usable[-1]])[b])


class EarlyExitSampler:
    """An early-exit chain: draft up to gamma positions, stop after the first one whose confidence
    falls below the threshold; the stopped position is still verified.

    A position's confidence bin b ~ freq (conf_bins); it goes on with probability cont[b] (the
    method's share of the bin above its threshold) and hits the target's top-1 with hit1[b]."""

    stateful = False

    def __init__(self, gamma: int, cont, freq, hit1):
        self.gamma = int(gamma)
        self.cum = np.cumsum(np.asarray(freq, dtype=float) / float(np.sum(freq)))
        self.hit1 = np.asarray(hit1, dtype=float)
        self.cont = np.asarray(cont, dtype=float)

    def draw(self, rng, n, state=None):
        g = self.gamma
        b = np.minimum(np.searchsorted(self.cum, rng.random((n, g)), side="right"), N_BINS - 1)
        confident = rng.random((n, g)) < self.cont[b]
        drafted = np.minimum(first_failure(confident) + 1, g)
        hits = rng.random((n, g)) < self.hit1[b]
        hits &= np.arange(g)[None, :] < drafted[:, None]
        accepted = first_failure(hits) + 1
        return StepDraws(accepted, drafted.astype(np.int64), drafted.astype(np.int64) + 1), None


class NgramSampler:
    """Candidate n-grams verified in one forward, no draft forward (Fu et al. Eq. 5 + Eq. 7): with
    probability 1/f a step holds `candidates` n-grams of `length` tokens, each token accepted with
    alpha independently, and commits 1 + the longest accepted prefix; otherwise it commits one
    token. The verify forward carries `verify_tokens` query tokens."""

    stateful = False

    def __init__(self, candidates: int, length: int, alpha: float, f: float, verify_tokens: int):
        self.candidates, self.length = int(candidates), int(length)
        self.alpha = _check_prob(alpha, "n-gram alpha")
        if not f >= 1:
            raise InputError(f"n-gram f must be >= 1, got {f!r}")
        self.f = float(f)
        self.verify = int(verify_tokens)
        self.fixed_shape = (0, self.verify)

    def draw(self, rng, n, state=None):
        g, k = self.length, self.candidates
        hits = rng.random((n, k, g)) < self.alpha
        longest = first_failure(hits.reshape(n * k, g)).reshape(n, k).max(axis=1) if g else np.zeros(n, dtype=np.int64)
        good = rng.random(n) < 1.0 / self.f
        accepted = 1 + np.where(good, longest, 0)
        return StepDraws(accepted.astype(np.int64), np.zeros(n, dtype=np.int64), np.full(n, self.verify, dtype=np.int64)), None


class PoolSampler:
    """Lookahead under the pool's growth (costmodel.lookahead): at a sequence's step t the pool
    holds W max(0, t - N + 2) n-grams, the step finds candidates with the hit probability they
    give, verifies K = min(G, 1 + Poisson(pool)) of them and commits 1 + the longest accepted
    prefix (alpha, then alpha_next per token; Eq. 5's tail with b = 1 + spread (K - 1)). The state is each sequence's step index;
    the query tokens follow the window's levels and the candidates."""

    stateful = True
    fixed_shape = None          # the verify forward grows with the window and the candidates

    def __init__(self, w: int, n: int, g: int, model):
        self.w, self.n, self.g, self.model = int(w), int(n), int(g), model

    def initial_state(self, n: int) -> np.ndarray:
        return np.zeros(n, dtype=np.int64)

    def draw(self, rng, n, state=None):
        step = self.initial_state(n) if state is None else np.asarray(state, dtype=np.int64)
        return self.at(rng, step), step + 1

    def at(self, rng: np.random.Generator, step: np.ndarray) -> StepDraws:
        """One draw per entry of `step` (the step index of a sequence)."""
        from costmodel.lookahead import collected_ngrams, hit_probability, prefix_tail

        m, size = self.model, step.size
        found = rng.random(size) < hit_probability(m.hit, m.fill, collected_ngrams(self.n, self.w, step))
        cands = np.where(found, np.minimum(self.g, 1 + rng.poisson(m.pool, size)), 0)
        tail = prefix_tail(m, self.n - 1, np.maximum(cands, 1))
        longest = np.where(found, (rng.random(size)[:, None] < tail).sum(axis=1), 0)
        verify = 1 + self.w * np.minimum(step + 1, self.n - 1) + cands * (self.n - 1)
        return StepDraws((1 + longest).astype(np.int64), np.zeros(size, dtype=np.int64), verify.astype(np.int64))


class AutoregressiveSampler:
    """Plain decoding: one token per step, no draft."""

    stateful = False
    fixed_shape = (0, 1)

    def draw(self, rng, n, state=None):
        ones = np.ones(n, dtype=np.int64)
        return StepDraws(ones, np.zeros(n, dtype=np.int64), ones), None


def draw_stream(sampler, rng: np.random.Generator, n_tokens: int) -> StepDraws:
    """Steps of one sequence until `n_tokens` are committed; the last step is clipped."""
    if n_tokens < 1:
        raise InputError(f"n_tokens must be >= 1, got {n_tokens}")
    parts: list[StepDraws] = []
    committed, state = 0, None
    while committed < n_tokens:
        m = max(16, int((n_tokens - committed) / 1.5) + 16)
        if isinstance(sampler, MarkovChainSampler):
            draws = sampler.stream(rng, m)
        elif isinstance(sampler, PoolSampler):          # the sequence's next m step indices
            done = sum(p.accepted.size for p in parts)
            draws = sampler.at(rng, np.arange(done, done + m, dtype=np.int64))
        else:
            draws, state = sampler.draw(rng, m, state)
        parts.append(draws)
        committed += int(draws.accepted.sum())
    accepted = np.concatenate([p.accepted for p in parts])
    ends = np.cumsum(accepted)
    n_steps = int(np.searchsorted(ends, n_tokens)) + 1
    accepted = accepted[:n_steps].copy()
    accepted[-1] -= int(ends[n_steps - 1]) - n_tokens
    return StepDraws(
        accepted,
        np.concatenate([p.drafted for p in parts])[:n_steps],
        np.concatenate([p.verify_tokens for p in parts])[:n_steps],
    )
