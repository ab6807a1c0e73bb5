"""Batched torch samplers of the rules (`traces.rules_torch`) and of the mutants, for statistical mode.

Signature `(case, rng: np.random.Generator, n) -> (outcomes, accepted)`, drawn in chunks of
`CHUNK` rows. Cases:
    TorchPositionCase(p, q, k): one position at a large vocabulary; outcome = committed token.
    BigramCase(p_table, q_table, start, position): chain SD with gamma = 1 over tables whose row
        is the previous token; outcome = the committed token at `position` (1 or 2), whose
        target law is p[start] (position 1) or p[start] @ p_table (position 2).
`make_position_case(vocab, seed, k)` / `make_bigram_case(vocab, seed, position)` build peaked
random tables (so collisions, rejections and residuals all matter). BATCHED_RULES and
BATCHED_MUTANTS map names (as in `cases.RULES` / `mutants.MUTANTS`) to (sampler, case maker).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from traces import rules_torch

CHUNK = 16384
DTYPE = torch.float32


@dataclass
class TorchPositionCase:
    p: torch.Tensor
    q: torch.Tensor
    k: int = 1

    def target(self) -> np.ndarray:
        return self.p.double().numpy() / float(self.p.double().sum())

    def accept_rate(self) -> float:
        return float(torch.minimum(self.p.double(), self.q.double()).sum())


@dataclass
class BigramCase:
    p_table: torch.Tensor
    q_table: torch.Tensor
    start: int = 0
    position: int = 2

    def target(self) -> np.ndarray:
        first = self.p_table[self.start].double()
        law = first if self.position == 1 else first @ self.p_table.double()
        return (law / law.sum()).numpy()


def _peaked(gen: torch.Generator, rows: int, vocab: int, exponent: float = 1.1) -> torch.Tensor:
    """Rows of a Zipf-like law over a random permutation of the vocabulary."""
    ranks = torch.arange(1, vocab + 1, dtype=torch.float64) ** -exponent
    out = torch.stack([ranks[torch.randperm(vocab, generator=gen)] for _ in range(rows)])
    out[:, :] = out * (torch.rand(rows, vocab, generator=gen, dtype=torch.float64) + 0.5)
    return (out / out.sum(-1, keepdim=True)).to(DTYPE)


def make_position_case(vocab: int, seed: int, k: int = 1) -> TorchPositionCase:
    gen = torch.Generator().manual_seed(seed)
    p = _peaked(gen, 1, vocab)[0]
    q = _peaked(gen, 1, vocab, exponent=1.1 if k == 1 else 2.0)[0]  # sharp q: candidates collide
    return TorchPositionCase(p, q, k)


def make_bigram_case(vocab: int, seed: int, position: int = 2) -> BigramCase:
    gen = torch.Generator().manual_seed(seed)
    return BigramCase(_peaked(gen, vocab, vocab), _peaked(gen, vocab, vocab), 0, position)


def _uniforms(gen: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.rand(*shape, generator=gen, dtype=torch.float64)


def draft(q: torch.Tensor, k: int, gen: torch.Generator, replacement: bool = True) -> torch.Tensor:
    """k candidates per row from q [B, V] by inverse CDF; without replacement sequentially."""
    cands, q_bar = [], q
    for _ in range(k):
        x = rules_torch.inverse_cdf(q_bar, _uniforms(gen, q.shape[0]))
        cands.append(x)
        if not replacement:
            q_bar = rules_torch.remove_token(q_bar, x)
    return torch.stack(cands, 1)


def _chunks(n: int):
    done = 0
    while done < n:
        size = min(CHUNK, n - done)
        yield size
        done += size


def _position_sampler(step):
    """Wrap `step(p [B,V], q [B,V], k, gen) -> StepBatch-like (token, accepted)` into a sampler."""
    def sampler(case: TorchPositionCase, rng: np.random.Generator, n: int):
        gen = torch.Generator().manual_seed(int(rng.integers(1 << 62)))
        tokens, accepted = [], []
        for size in _chunks(n):
            p = case.p.unsqueeze(0).expand(size, -1)
            q = case.q.unsqueeze(0).expand(size, -1)
            token, acc = step(p, q, case.k, gen)
            tokens.append(token.numpy())
            accepted.append(acc.numpy())
        return np.concatenate(tokens), np.concatenate(accepted)
    return sampler


def _mcss(replacement_draft: bool, replacement_rule: bool, draft_from=None):
    def step(p, q, k, gen):
        cands = draft(q if draft_from is None else draft_from(q, k), k, gen, replacement_draft)
        out = rules_torch.mcss(cands, p, q, _uniforms(gen, *cands.shape), _uniforms(gen, p.shape[0]),
                               replacement=replacement_rule)
        return out.token, out.accepted
    return step


def _argmax_step(p, q, k, gen):
    cands = q.argmax(-1, keepdim=True)
    out = rules_torch.mcss(cands, p, q, _uniforms(gen, *cands.shape), _uniforms(gen, p.shape[0]))
    return out.token, out.accepted


def _top2(q, k):
    kept = torch.zeros_like(q).scatter(-1, q.topk(2, -1).indices, 1.0) * q
    return kept / kept.sum(-1, keepdim=True)


def _variant_step(update):
    """The MCSS loop with a replaceable residual update, batched (mutants only)."""
    def step(p, q, k, gen):
        cands = draft(q, k, gen)
        rows = torch.arange(p.shape[0])
        p_hat = p.clone()
        done = torch.zeros(p.shape[0], dtype=torch.bool)
        token = torch.full((p.shape[0],), -1, dtype=torch.long)
        for j in range(k):
            x = cands[:, j]
            ok = ~done & (_uniforms(gen, p.shape[0]).to(p.dtype) <= p_hat[rows, x] / q[rows, x])
            token[ok] = x[ok]
            done |= ok
            p_hat = torch.where(done.unsqueeze(1), p_hat, update(p_hat, q, p))
        endpoint = rules_torch.inverse_cdf(p_hat, _uniforms(gen, p.shape[0]))
        return torch.where(done, token, endpoint), done
    return step


def _unnormalised(p_hat, q, p):
    diff = torch.clamp(p_hat - q, min=0)
    return torch.where(diff.sum(-1, keepdim=True) > 0, diff, p_hat)


def _tokenwise(p_hat, q, p):
    return rules_torch.residual(p, q)


def _bigram_sampler(p_rows_for=None):
    """Chain SD (gamma = 1) over a BigramCase; `p_rows_for(case, ctx, x1)` lets mutants swap rows."""
    def rows_correct(case, ctx, x1):
        return torch.stack([case.p_table[ctx], case.p_table[x1]], 1)
    rows_of = p_rows_for or rows_correct

    def one_round(case, ctx, gen):
        q_row = case.q_table[ctx]
        x1 = rules_torch.inverse_cdf(q_row, _uniforms(gen, ctx.shape[0]))
        out = rules_torch.speculative_chain(x1.unsqueeze(1), rows_of(case, ctx, x1), q_row.unsqueeze(1),
                                            _uniforms(gen, ctx.shape[0], 1), _uniforms(gen, ctx.shape[0]))
        return out.tokens, out.n_accepted

    def sampler(case: BigramCase, rng: np.random.Generator, n: int):
        gen = torch.Generator().manual_seed(int(rng.integers(1 << 62)))
        outcomes, accepted = [], []
        for size in _chunks(n):
            ctx = torch.full((size,), case.start, dtype=torch.long)
            tokens, n_acc = one_round(case, ctx, gen)
            if case.position == 2:
                second = tokens[:, 1].clone()
                redo = second < 0
                if redo.any():
                    more, _ = one_round(case, tokens[redo, 0], gen)
                    second[redo] = more[:, 0]
                outcomes.append(second.numpy())
            else:
                outcomes.append(tokens[:, 0].numpy())
            accepted.append((n_acc > 0).numpy())
        return np.concatenate(outcomes), np.concatenate(accepted)
    return sampler


def _bonus_from_q_rows(case, ctx, x1):
    return torch.stack([case.p_table[ctx], case.q_table[x1]], 1)


def _wrong_position_rows(case, ctx, x1):
    return torch.stack([case.p_table[x1], case.p_table[x1]], 1)


BATCHED_RULES = {
    "sd": (_position_sampler(_mcss(True, True)), lambda vocab, seed: make_position_case(vocab, seed, 1)),
    "mcss_with": (_position_sampler(_mcss(True, True)), lambda vocab, seed: make_position_case(vocab, seed, 4)),
    "mcss_without": (_position_sampler(_mcss(False, False)), lambda vocab, seed: make_position_case(vocab, seed, 4)),
    "chain": (_bigram_sampler(), lambda vocab, seed: make_bigram_case(vocab, seed, 2)),
}

BATCHED_MUTANTS = {
    "q_not_updated": (_position_sampler(_mcss(False, True)), lambda vocab, seed: make_position_case(vocab, seed, 4)),
    "argmax_draft": (_position_sampler(_argmax_step), lambda vocab, seed: make_position_case(vocab, seed, 1)),
    "topk_draft_raw_q": (_position_sampler(_mcss(True, True, _top2)), lambda vocab, seed: make_position_case(vocab, seed, 1)),
    "residual_unnormalised": (_position_sampler(_variant_step(_unnormalised)), lambda vocab, seed: make_position_case(vocab, seed, 4)),
    "tokenwise_residual": (_position_sampler(_variant_step(_tokenwise)), lambda vocab, seed: make_position_case(vocab, seed, 4)),
    "bonus_from_q": (_bigram_sampler(_bonus_from_q_rows), lambda vocab, seed: make_bigram_case(vocab, seed, 2)),
    "p_wrong_position": (_bigram_sampler(_wrong_position_rows), lambda vocab, seed: make_bigram_case(vocab, seed, 1)),
}
