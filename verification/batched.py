"""Batched samplers for statistical mode: the engine's rules (`verification.rules_torch`) and fast mutants.

Sampler signature `(case, rng: np.random.Generator, n) -> (outcomes, accepted)` (int64 / bool
numpy arrays). Cases (fixed for a whole check, so everything that depends only on p and q is
computed once):
    TorchPositionCase(p, q, k): one position; outcome = the committed token; target law = p.
    BigramCase(p_table, q_table, start, position): chain SD with gamma = 1 over tables whose row
        is the previous token; outcome = the committed token at `position` (1 or 2), whose
        target law is p[start] (position 1) or p[start] @ p_table (position 2).
Both draw q as a draft model would: the top `support` tokens of a noisy copy of p, tempered, so
acceptance is realistic and residuals carry mass where the candidates are (see `CaseSpec`).

The RULE samplers call the real batched rule (`rules_torch.mcss`, `rules_torch.speculative_chain`)
on chunks of `RULE_CHUNK` / vocab rows whose p / q rows are broadcast views of the case's vectors; only
drafting is done outside (inverse CDF by `searchsorted` on a cumulative sum computed once). The
MUTANT samplers are vectorised over the whole sample: for a fixed case a mutant's state after j
rejections is fixed (it never renormalises q, or its candidate is fixed), so its p^ sequence is
precomputed with `laws` (the same update functions that give its exact law) and each sample
costs O(k). CHECKS maps a name (as in `cases.RULES` / `mutants.MUTANTS`) to a `Check`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from verification import rules_torch
from common.errors import InputError
from verification import laws

RULE_CHUNK = 1 << 20  # rows x vocab per call of the real rule (1,024 rows at vocab 1,000: cache-sized)
FAST_CHUNK = 1 << 18
MUTANT_MIN_TV = 0.05  # statistical cases put every mutant at least this far (exact TV) from its target
GUMBEL_SUPPORT = 64   # draft without replacement by Gumbel top-k when q has at most this many tokens
DTYPE = torch.float32
TABLE_CELL_BYTES = 64  # peak bytes per cell of a BigramCase's vocab x vocab tables while the case, its
                       # law and its row sampler are built (float64 work copies; bounds the memory first)


def bigram_bytes(vocab: int) -> int:
    """Peak bytes of building and checking one BigramCase at `vocab` (its tables are vocab x vocab)."""
    return TABLE_CELL_BYTES * int(vocab) ** 2


@dataclass(frozen=True)
class CaseSpec:
    """How a case is drawn: p is Zipf(`exponent`) over a random permutation times U(0.5, 1.5)
    noise; q keeps the top `support` tokens of log p + N(0, `noise`^2), softmax at `temperature`."""

    k: int = 1
    exponent: float = 1.2
    support: int = 8
    noise: float = 1.0
    temperature: float = 1.0


@dataclass
class TorchPositionCase:
    p: torch.Tensor
    q: torch.Tensor
    k: int = 1

    def target(self) -> np.ndarray:
        p = self.p.double().numpy()
        return p / p.sum()

    def accept_rate(self) -> float:
        """P(accept) of single-draft speculative sampling: sum(min(p, q))."""
        return float(np.minimum(self.target(), _normalised(self.q)).sum())


@dataclass
class BigramCase:
    p_table: torch.Tensor
    q_table: torch.Tensor
    start: int = 0
    position: int = 2

    def target(self) -> np.ndarray:
        return laws.chain_law(_normalised(self.p_table), _normalised(self.q_table), self.start, self.position)

    def accept_rate(self) -> float:
        return float(np.minimum(_normalised(self.p_table[self.start]), _normalised(self.q_table[self.start])).sum())


def _normalised(t: torch.Tensor) -> np.ndarray:
    a = t.double().numpy()
    return a / a.sum(-1, keepdims=True)


def _peaked(gen: torch.Generator, rows: int, vocab: int, exponent: float) -> torch.Tensor:
    ranks = torch.arange(1, vocab + 1, dtype=torch.float64) ** -exponent
    order = torch.argsort(torch.rand(rows, vocab, generator=gen), dim=-1)
    out = ranks[order] * (torch.rand(rows, vocab, generator=gen, dtype=torch.float64) + 0.5)
    return out / out.sum(-1, keepdim=True)


def _draft_of(gen: torch.Generator, p: torch.Tensor, spec: CaseSpec) -> torch.Tensor:
    scores = p.log() + spec.noise * torch.randn(p.shape, generator=gen, dtype=torch.float64)
    top = scores.topk(min(spec.support, p.shape[-1]), -1).indices
    kept = (scores.gather(-1, top) / spec.temperature).softmax(-1)
    return torch.zeros_like(p).scatter(-1, top, kept)


def make_position_case(vocab: int, seed: int, spec: CaseSpec) -> TorchPositionCase:
    gen = torch.Generator().manual_seed(seed)
    p = _peaked(gen, 1, vocab, spec.exponent)
    return TorchPositionCase(p[0].to(DTYPE), _draft_of(gen, p, spec)[0].to(DTYPE), spec.k)


def make_bigram_case(vocab: int, seed: int, spec: CaseSpec, position: int = 2) -> BigramCase:
    gen = torch.Generator().manual_seed(seed)
    p = _peaked(gen, vocab, vocab, spec.exponent)
    return BigramCase(p.to(DTYPE), _draft_of(gen, p, spec).to(DTYPE), 0, position)


# --- drawing by inverse CDF on cumulative sums computed once -------------------------------------

class RowSampler:
    """Inverse-CDF draws from the rows of a [R, V] weight table (or one [V] vector), all rows in
    one sorted array: row r occupies (r, r + 1], so one `searchsorted` serves any mix of rows."""

    def __init__(self, weights):
        w = torch.as_tensor(np.atleast_2d(np.asarray(weights, np.float64)))
        self.vocab = w.shape[-1]
        cdf = w.cumsum(-1) / w.sum(-1, keepdim=True)
        offsets = torch.arange(w.shape[0], dtype=torch.float64).unsqueeze(1)
        self.flat = (cdf + offsets).reshape(-1).contiguous()
        self.last = self.vocab - 1 - torch.argmax((w > 0).flip(-1).to(torch.int8), -1)  # last positive per row
        self.support = torch.nonzero(w[0] > 0).squeeze(1)   # of row 0 (drafting uses one-row samplers)
        self.log_support = torch.log(w[0, self.support] / w[0].sum())

    def draw(self, u: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
        r = torch.zeros(u.shape, dtype=torch.long) if rows is None else rows.long()
        idx = torch.searchsorted(self.flat, (u + r).contiguous(), right=True) - r * self.vocab
        return torch.where(idx >= self.vocab, self.last[r], idx)   # u rounded up to the row's end


def _generator(rng: np.random.Generator) -> torch.Generator:
    return torch.Generator().manual_seed(int(rng.integers(1 << 62)))


def _uniforms(gen: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.rand(*shape, generator=gen, dtype=torch.float64)


def draft(sampler: RowSampler, n: int, k: int, gen: torch.Generator, replacement: bool = True) -> torch.Tensor:
    """[n, k] candidates from one draft law (a one-row RowSampler). Without replacement over a
    small support: Gumbel top-k of log q (its order is the law of sequential draws without
    replacement); over a large support a candidate equal to an earlier one is redrawn (a draw
    conditioned on not repeating, the same law)."""
    if not replacement and len(sampler.support) <= GUMBEL_SUPPORT:
        keys = sampler.log_support - torch.log(-torch.log(_uniforms(gen, n, len(sampler.support))))
        return sampler.support[keys.topk(k, -1).indices]
    cands = torch.empty(n, k, dtype=torch.long)
    for j in range(k):
        x = sampler.draw(_uniforms(gen, n))
        if not replacement:
            clash = (cands[:, :j] == x.unsqueeze(1)).any(1)
            while clash.any():
                x[clash] = sampler.draw(_uniforms(gen, int(clash.sum())))
                clash = (cands[:, :j] == x.unsqueeze(1)).any(1)
        cands[:, j] = x
    return cands


def _chunks(n: int, size: int):
    done = 0
    while done < n:
        yield min(size, n - done)
        done += min(size, n - done)


def _rule_rows(vocab: int) -> int:
    return max(16, RULE_CHUNK // vocab)


def _collect(n: int, size: int, one_chunk: Callable[[int], tuple]) -> tuple[np.ndarray, np.ndarray]:
    parts = [one_chunk(m) for m in _chunks(n, size)]
    return (np.concatenate([t.numpy() for t, _ in parts]).astype(np.int64),
            np.concatenate([a.numpy() for _, a in parts]).astype(bool))


# --- the rules: the engine's batched code on broadcast rows --------------------------------------

def mcss_rule(replacement: bool):
    """rules_torch.mcss on chunks whose rows share the case's p and q (expand, no copies)."""
    def sampler(case: TorchPositionCase, rng: np.random.Generator, n: int):
        gen, draws = _generator(rng), RowSampler(case.q.double().numpy())

        def one_chunk(m):
            cands = draft(draws, m, case.k, gen, replacement)
            out = rules_torch.mcss(cands, case.p.expand(m, -1), case.q.expand(m, -1), _uniforms(gen, m, case.k),
                                   _uniforms(gen, m), replacement=replacement)
            return out.token, out.accepted
        return _collect(n, _rule_rows(case.p.shape[-1]), one_chunk)
    return sampler


def chain_rule(case: BigramCase, rng: np.random.Generator, n: int):
    """rules_torch.speculative_chain (gamma = 1) from `start`; rows whose round ended in a
    correction after one token run a second round from that token (position 2)."""
    gen, q_rows = _generator(rng), RowSampler(case.q_table.double().numpy())

    def one_round(ctx, first: bool):
        m = ctx.shape[0]
        x1 = q_rows.draw(_uniforms(gen, m), ctx)
        p_rows = torch.empty(m, 2, case.p_table.shape[1], dtype=case.p_table.dtype)
        p_rows[:, 0] = case.p_table[case.start] if first else case.p_table[ctx]
        torch.index_select(case.p_table, 0, x1, out=p_rows[:, 1])
        q = (case.q_table[case.start].expand(m, 2, -1) if first   # broadcast; the leaf's q row is never read
             else case.q_table[ctx].unsqueeze(1))
        out = rules_torch.speculative_chain(x1.unsqueeze(1), p_rows, q, _uniforms(gen, m, 1), _uniforms(gen, m))
        return out.tokens, out.n_accepted > 0

    def one_chunk(m):
        tokens, accepted = one_round(torch.full((m,), case.start, dtype=torch.long), True)
        if case.position == 1:
            return tokens[:, 0], accepted
        second = tokens[:, 1].clone()
        redo = second < 0
        if redo.any():
            second[redo] = one_round(tokens[redo, 0], False)[0][:, 0]
        return second, accepted
    return _collect(n, _rule_rows(case.p_table.shape[-1]), one_chunk)


# --- the mutants: fixed-state MCSS variants, vectorised ------------------------------------------

def fixed_state_mcss(p_hats: list, q: np.ndarray, cands: torch.Tensor, gen: torch.Generator):
    """Candidate j accepted when u <= p_hats[j][x] / q[x]; the first accepted is committed, else a
    draw from p_hats[k]. Rows share the state sequence, so each costs O(k)."""
    m, k = cands.shape
    ratio = torch.as_tensor(np.stack([np.where(q > 0, ph / np.where(q > 0, q, 1), np.inf) for ph in p_hats[:k]]))
    ok = _uniforms(gen, m, k) <= ratio[torch.arange(k), cands]
    first = torch.argmax(ok.to(torch.int8), 1)
    accepted = ok.any(1)
    endpoint = RowSampler(p_hats[k]).draw(_uniforms(gen, m))
    return torch.where(accepted, cands.gather(1, first.unsqueeze(1)).squeeze(1), endpoint), accepted


def state_sequence(p: np.ndarray, q: np.ndarray, k: int, update: str) -> list:
    """p^ after 0..k rejections when q^ stays q (the mutant's update, from `laws`)."""
    out = [p]
    for _ in range(k):
        out.append(laws._update(update, out[-1], q, p))
    return out


def fixed_state_mutant(update: str = "residual", draft_replacement: bool = True, candidates: str = "q"):
    """candidates: "q" (drawn from q), "argmax" (argmax q, k = 1), "top2" (from top-2 of q, k = 1)."""
    def sampler(case: TorchPositionCase, rng: np.random.Generator, n: int):
        gen = _generator(rng)
        p, q = case.target(), _normalised(case.q)
        p_hats = state_sequence(p, q, case.k, update)
        draws = RowSampler(_candidate_law(q, candidates))

        def one_chunk(m):
            cands = draft(draws, m, case.k, gen, draft_replacement)
            return fixed_state_mcss(p_hats, q, cands, gen)
        return _collect(n, FAST_CHUNK, one_chunk)
    return sampler


def _candidate_law(q: np.ndarray, candidates: str) -> np.ndarray:
    if candidates == "q":
        return q
    kept = np.zeros_like(q)
    top = [int(np.argmax(q))] if candidates == "argmax" else list(np.argsort(-q, kind="stable")[:2])
    kept[top] = q[top]
    return kept / kept.sum()


def bonus_from_q(case: BigramCase, rng: np.random.Generator, n: int):
    """Chain SD whose bonus token after an accepted draft comes from q_table[x] (position 2)."""
    gen = _generator(rng)
    P, Q = _normalised(case.p_table), _normalised(case.q_table)
    p0, q0 = P[case.start], Q[case.start]
    first, p_rows, q_rows = RowSampler(q0), RowSampler(P), RowSampler(Q)
    correction = RowSampler(laws.residual(p0, q0))
    ratio = torch.as_tensor(np.where(q0 > 0, p0 / np.where(q0 > 0, q0, 1), 0.0))

    def one_chunk(m):
        x1 = first.draw(_uniforms(gen, m))
        accepted = _uniforms(gen, m) <= ratio[x1]
        token1 = torch.where(accepted, x1, correction.draw(_uniforms(gen, m)))
        u = _uniforms(gen, m)
        return torch.where(accepted, q_rows.draw(u, token1), p_rows.draw(u, token1)), accepted
    return _collect(n, FAST_CHUNK, one_chunk)


def p_wrong_position(case: BigramCase, rng: np.random.Generator, n: int):
    """Chain SD that verifies the draft x with p_table[x] (the next position's p); position 1."""
    gen = _generator(rng)
    P, Q = _normalised(case.p_table), _normalised(case.q_table)
    q0 = Q[case.start]
    first = RowSampler(q0)
    support = np.flatnonzero(q0 > 0)
    slot = torch.zeros(len(q0), dtype=torch.long)
    slot[support] = torch.arange(len(support))
    corrections = RowSampler(np.stack([laws.residual(P[x], q0) for x in support]))
    ratio = torch.as_tensor(np.where(q0 > 0, np.diag(P) / np.where(q0 > 0, q0, 1), 0.0))

    def one_chunk(m):
        x1 = first.draw(_uniforms(gen, m))
        accepted = _uniforms(gen, m) <= ratio[x1]
        return torch.where(accepted, x1, corrections.draw(_uniforms(gen, m), slot[x1])), accepted
    return _collect(n, FAST_CHUNK, one_chunk)


# --- the registry ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Check:
    """A batched sampler, how its case is built, and its exact law on that case (None = the target)."""

    sampler: Callable
    make_case: Callable[[int, int], object]    # (vocab, seed) -> case
    law: Callable[[object], np.ndarray] | None = None
    single_draft: bool = False                 # test P(accept) = sum(min(p, q)) too

    def true_law(self, case) -> np.ndarray:
        return case.target() if self.law is None else self.law(case)

    def build(self, vocab: int, seed: int, min_tv: float = 0.0, tries: int = 50):
        """(case, exact TV of the sampler's law from the target). With min_tv (mutants), the first
        of seeds seed, seed + 1, ... whose case puts the mutant at least min_tv from the target."""
        for attempt in range(tries):
            case = self.make_case(vocab, seed + attempt)
            true_tv = laws.tv(self.true_law(case), case.target())
            if true_tv >= min_tv:
                return case, true_tv
        raise InputError(f"no case among seeds {seed}..{seed + tries - 1} puts this sampler {min_tv} from its target")


def _position(spec: CaseSpec):
    return lambda vocab, seed: make_position_case(vocab, seed, spec)


def _bigram(spec: CaseSpec, position: int):
    return lambda vocab, seed: make_bigram_case(vocab, seed, spec, position)


def _position_law(candidates: str = "q", **kw):
    def law(case):
        q = _normalised(case.q)
        return laws.position_law(case.target(), q, case.k, draw=_candidate_law(q, candidates), **kw)
    return law


# Specs: rules on draft-like q with about half the candidates rejected (residuals with mass on the
# candidates); mutants on the spec where their bug shows; `Check.build(..., MUTANT_MIN_TV)` then
# picks a seed whose exact TV is at least MUTANT_MIN_TV.
SD = CaseSpec(k=1, exponent=1.2, support=8, noise=1.0, temperature=1.0)
MULTI = CaseSpec(k=4, exponent=1.2, support=8, noise=1.0, temperature=1.0)
SHARP = CaseSpec(k=4, exponent=1.2, support=8, noise=0.5, temperature=0.5)
BIGRAM = CaseSpec(k=1, exponent=1.2, support=8, noise=1.0, temperature=1.0)

RULE_CHECKS = {
    "single_draft": Check(mcss_rule(True), _position(SD), single_draft=True),
    "mcss_with": Check(mcss_rule(True), _position(MULTI)),
    "mcss_without": Check(mcss_rule(False), _position(MULTI)),
    "chain": Check(chain_rule, _bigram(BIGRAM, 2)),
}

MUTANT_CHECKS = {
    "q_not_updated": Check(fixed_state_mutant(draft_replacement=False), _position(SHARP),
                           _position_law(draft_replacement=False)),
    "argmax_draft": Check(fixed_state_mutant(candidates="argmax"), _position(SD),
                          _position_law(candidates="argmax"), single_draft=True),
    "topk_draft_raw_q": Check(fixed_state_mutant(candidates="top2"), _position(SD),
                              _position_law(candidates="top2"), single_draft=True),
    "residual_unnormalised": Check(fixed_state_mutant("unnormalised"), _position(MULTI),
                                   _position_law(update="unnormalised")),
    "tokenwise_residual": Check(fixed_state_mutant("tokenwise"), _position(MULTI), _position_law(update="tokenwise")),
    "bonus_from_q": Check(bonus_from_q, _bigram(BIGRAM, 2),
                          lambda case: laws.chain_law(_normalised(case.p_table), _normalised(case.q_table), case.start,
                                                      2, bonus_rows=_normalised(case.q_table))),
    "p_wrong_position": Check(p_wrong_position, _bigram(BIGRAM, 1),
                              lambda case: laws.chain_law(_normalised(case.p_table), _normalised(case.q_table),
                                                          case.start, 1, verify_rows="next")),
}
