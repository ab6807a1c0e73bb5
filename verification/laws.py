"""Exact output laws (float64) of the statistical-mode samplers at large vocabularies.

Statistical mode cannot enumerate uniforms over 1,000+ tokens, but for a fixed case the law of
an MCSS-style sampler is a finite sum: after j rejections the state is (p^, q^, what is left to
draft from), and with a draft distribution of small support the candidate sequences can be
enumerated. These laws give each mutant's TRUE TV distance on its statistical case (so a case is
chosen where it exceeds delta) and, for the correct rules, a check that the formula gives p.
They are validated against exact mode (`verification.exact`) on small siblings in the tests.

    position_law(p, q, k, draw=None, draft_replacement=True, verify_replacement=True,
                 update="residual") -> law [V]
        k candidates from `draw` (default q; with or without replacement), each accepted with
        probability min(1, p^(x) / q^(x)); after a rejection p^ := update(p^, q^, p) and, when
        verifying without replacement, q^ loses the candidate. Endpoint: norm(p^).
        update: "residual" (the rule), "unnormalised" (max(0, p^ - q^) kept unnormalised),
        "tokenwise" (residual of the ORIGINAL p every time).
    chain_law(p_table, q_table, start, position, bonus_rows=None, verify_rows="correct") -> law
        Chain SD with gamma = 1 over bigram tables; the committed token at `position` (1 or 2).
    tv(a, b) -> 0.5 * sum |a - b|
"""
from __future__ import annotations

import numpy as np

from common.errors import InputError


def tv(a: np.ndarray, b: np.ndarray) -> float:
    return 0.5 * float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).sum())


def residual(p_hat: np.ndarray, q_bar: np.ndarray) -> np.ndarray:
    """norm(max(0, p^ - q^)); p^ itself when there is no residual mass (as `rules.residual`)."""
    diff = np.maximum(p_hat - q_bar, 0.0)
    total = diff.sum()
    return diff / total if total > 0 else p_hat


def _update(kind: str, p_hat: np.ndarray, q_bar: np.ndarray, p: np.ndarray) -> np.ndarray:
    if kind == "residual":
        return residual(p_hat, q_bar)
    if kind == "unnormalised":
        diff = np.maximum(p_hat - q_bar, 0.0)
        return diff if diff.sum() > 0 else p_hat
    if kind == "tokenwise":
        return residual(p, q_bar)
    raise InputError(f"update is {kind!r}, expected residual, unnormalised or tokenwise")


def _without(w: np.ndarray, x: int) -> np.ndarray:
    out = w.copy()
    out[x] = 0.0
    total = out.sum()
    return out / total if total > 0 else out


def position_law(p, q, k: int, draw=None, draft_replacement: bool = True, verify_replacement: bool = True,
                 update: str = "residual", max_branches: int = 200_000) -> np.ndarray:
    """Exact law of the committed token of an MCSS-style sampler on one fixed position (see module doc)."""
    p = np.asarray(p, np.float64)
    q = np.asarray(q, np.float64)
    draw = q if draw is None else np.asarray(draw, np.float64)
    law = np.zeros_like(p)
    branches = 0

    def walk(mass: float, p_hat, q_bar, draw_w, j: int) -> None:
        nonlocal branches
        branches += 1
        if branches > max_branches:
            raise InputError(f"position_law needs more than {max_branches} branches; use a draft of smaller support")
        if mass == 0.0:
            return
        if j == k or draw_w.sum() <= 0:
            law[:] += mass * p_hat / p_hat.sum()
            return
        support = np.flatnonzero(draw_w > 0)
        w = draw_w[support] / draw_w.sum()
        with np.errstate(divide="ignore", invalid="ignore"):
            accept = np.minimum(1.0, np.where(q_bar[support] > 0, p_hat[support] / q_bar[support], np.inf))
        law[support] += mass * w * accept
        rejected = w * (1.0 - accept)
        nxt_p = _update(update, p_hat, q_bar, p)
        if draft_replacement and verify_replacement:  # the next state does not depend on the candidate
            walk(mass * float(rejected.sum()), nxt_p, q_bar, draw_w, j + 1)
            return
        for x, r in zip(support, rejected):
            if r > 0:
                walk(mass * float(r), nxt_p, q_bar if verify_replacement else _without(q_bar, x),
                     draw_w if draft_replacement else _without(draw_w, x), j + 1)

    walk(1.0, p, q, draw, 0)
    return law


def chain_law(p_table, q_table, start: int, position: int, bonus_rows=None, verify_rows: str = "correct") -> np.ndarray:
    """Law of the token at `position` (1 or 2) from chain SD with gamma = 1 over bigram tables.

    bonus_rows: the table the bonus token is drawn from after an accepted draft (default p_table;
    q_table is the bonus_from_q mutant). verify_rows="next" verifies the draft x with p_table[x]
    (the p of the wrong position; position 1 only)."""
    P = np.asarray(p_table, np.float64)
    Q = np.asarray(q_table, np.float64)
    p0, q0 = P[start], Q[start]
    if verify_rows == "next":
        if position != 1:
            raise InputError("verify_rows='next' is defined for position 1")
        law = np.zeros_like(p0)
        for x in np.flatnonzero(q0 > 0):
            accept = min(1.0, P[x, x] / q0[x])
            law[x] += q0[x] * accept
            law += q0[x] * (1 - accept) * residual(P[x], q0)
        return law
    if position == 1:
        return p0.copy()
    bonus = P if bonus_rows is None else np.asarray(bonus_rows, np.float64)
    accepted = np.minimum(p0, q0)        # P(first token = x and it was the accepted draft)
    corrected = p0 - accepted            # P(first token = x and it was the correction)
    return accepted @ bonus + corrected @ P
