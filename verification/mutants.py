"""Built-in mutants: deliberately wrong verification samplers that the verifier must catch.

Each is a bug that real speculative-decoding code has shipped or could easily ship. They reuse
`verification.rules` and `verification.cases` wherever the bug is in the inputs (drafting, rows),
and re-state the MCSS loop only where the bug is inside it (`_mcss_variant`).

MUTANTS: name -> Rule (same shape as `cases.RULES`)
    q_not_updated        MCSS without replacement whose q keeps the rejected tokens (Alg. 2 without
                         the q update); candidates drawn without replacement.
    argmax_draft         the draft is argmax(q) but verified as if sampled from q (softmax q).
    topk_draft_raw_q     the draft is sampled from top-2-truncated q, verified with the raw q.
    residual_unnormalised  MCSS with replacement whose p^ := max(0, p^ - q) is not renormalised.
    tokenwise_residual   MCSS whose residual is taken from the original p at every rejection.
    bonus_from_q         chain SD whose bonus token after a fully accepted chain comes from q.
    p_wrong_position     chain SD that verifies draft i with the p row of position i + 1.
    stale_draft_context  drafts all sampled from q at the committed context, verified with the
                         q rows of their real contexts.
"""
from __future__ import annotations

from typing import Callable, Sequence

from verification import rules
from verification.cases import PositionCase, Rule, SequenceCase, decode_sequence, tree_rows

def _mcss_variant(candidates: Sequence[int], p, q, rng, update: Callable) -> int:
    """The MCSS loop with a replaceable update of (p^, q^) after a rejection."""
    p_hat, q_bar = list(p), list(q)
    for x in candidates:
        if rng.uniform() <= p_hat[x] / q_bar[x]:
            return x
        p_hat, q_bar = update(p_hat, q_bar, x, p)
    return rng.categorical(p_hat)

def q_not_updated(case: PositionCase, rng) -> int:
    drafts = rules.draft_candidates(case.q, case.k, rng, replacement=False)
    return _mcss_variant(drafts, case.p, case.q, rng, lambda p_hat, q_bar, x, p: (rules.residual(p_hat, q_bar), q_bar))

def residual_unnormalised(case: PositionCase, rng) -> int:
    def update(p_hat, q_bar, x, p):
        diff = [a - b if a > b else 0 * a for a, b in zip(p_hat, q_bar)]
        return (diff if any(d > 0 for d in diff) else p_hat), q_bar
    return _mcss_variant(rules.draft_candidates(case.q, case.k, rng), case.p, case.q, rng, update)

def tokenwise_residual(case: PositionCase, rng) -> int:
    def update(p_hat, q_bar, x, p):
        return rules.residual(p, q_bar), q_bar
    return _mcss_variant(rules.draft_candidates(case.q, case.k, rng), case.p, case.q, rng, update)

def argmax_draft(case: PositionCase, rng) -> int:
    return rules.mcss([rules.argmax(case.q)], case.p, case.q, rng).token

def top_k(q: Sequence, k: int) -> list:
    """q restricted to its k largest entries (ties to the lowest ids), renormalised."""
    keep = sorted(range(len(q)), key=lambda i: (-q[i], i))[:k]
    total = sum(q[i] for i in keep)
    return [q[i] / total if i in keep else 0 * q[i] for i in range(len(q))]

def topk_draft_raw_q(case: PositionCase, rng) -> int:
    draft = rules.draft_candidates(top_k(case.q, 2), 1, rng)
    return rules.mcss(draft, case.p, case.q, rng).token

def _chain(case: SequenceCase) -> SequenceCase:
    return SequenceCase(case.vocab, case.length, (1,) * len(case.shape), case.seed, case.max_weight, case.name)

def bonus_from_q(case: SequenceCase, rng) -> tuple:
    def rows(case, tree, base):
        p_rows, q_rows = tree_rows(case, tree, base)
        leaf_context = base + tuple(tree.tokens[1:])
        return p_rows[:-1] + [case.q_at(leaf_context)], q_rows
    return decode_sequence(_chain(case), rng, rows=rows)

def p_wrong_position(case: SequenceCase, rng) -> tuple:
    def rows(case, tree, base):
        p_rows, q_rows = tree_rows(case, tree, base)
        return p_rows[1:] + p_rows[-1:], q_rows
    return decode_sequence(_chain(case), rng, rows=rows)

def stale_draft_context(case: SequenceCase, rng) -> tuple:
    return decode_sequence(_chain(case), rng, draft_context=lambda node_context, base: base)

MUTANTS: dict[str, Rule] = {
    "q_not_updated": Rule(q_not_updated, "position"),
    "argmax_draft": Rule(argmax_draft, "position"),
    "topk_draft_raw_q": Rule(topk_draft_raw_q, "position"),
    "residual_unnormalised": Rule(residual_unnormalised, "position"),
    "tokenwise_residual": Rule(tokenwise_residual, "position"),
    "bonus_from_q": Rule(bonus_from_q, "sequence"),
    "p_wrong_position": Rule(p_wrong_position, "sequence"),
    "stale_draft_context": Rule(stale_draft_context, "sequence"),
}
