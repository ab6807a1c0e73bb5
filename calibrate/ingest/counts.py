"""Acceptance from spec-decode counts (vLLM's counters, `vllm bench serve`'s spec-decode fields).

The counts: D drafts, T draft tokens, A accepted draft tokens and c_i, the drafts whose first i
draft tokens were all accepted (vLLM's `num_accepted_tokens_per_pos`, 0-based position i - 1),
i = 1..K, K the positions counted (the server's num_speculative_tokens). vLLM's per-position
rate c_i / D is P(positions 1..i all accepted); the mean accepted tokens per step, bonus
included, is 1 + A / D whatever the drafts' lengths.

When every draft proposed K tokens (T = D x K), position i is evaluated in the c_(i-1) drafts
whose earlier positions were all accepted (c_0 = D), so beta_i = c_i / c_(i-1) and alpha is
accepted tokens over evaluated positions, sum c_i / (D + sum_(i<K) c_i): the estimate
`calibrate.fit_acceptance.fit_step_acceptance` makes from a StepTrace.

Drafts of varying length (T < D x K: vLLM's batch-size schedule, an n-gram drafter without a
match of full length) make that estimate wrong: a draft that ended after position i - 1 and one
rejected at position i look alike in the counts, so beta_i beyond the first position cannot be
told from the drafts' lengths. Every counted draft proposes a first token, so beta_1 = c_1 / D
stays exact. With one acceptance rate at every position the counts determine it: alpha = c_1 / D,
and the drafts reaching position i are then n_i = c_i / alpha^i, which must add up to T. That is
checked (`one_rate_z`: the gap between sum c_i / alpha^i and T in standard errors, by the delta
method over independent drafts); within `Z_LIMIT` the entry holds alpha = c_1 / D and no beta_i,
beyond it the counts are refused in one line (positions accept at different rates and the lengths
hide which).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from common.errors import InputError

Z_LIMIT = 4.0          # standard errors within which the counts are taken as one rate at every position


def finite(value: float, what: str, where: str) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise InputError(f"{where}: {what} is {value!r}, not a finite count")
    return float(value)


def chain_acceptance(drafts: float, accepted: float, per_position: list[float], where: str,
                     draft_tokens: float | None = None) -> dict[str, Any]:
    """Profile quantities from spec-decode counts (module docstring); InputError naming `where`
    for counts that cannot come from one server's drafts, or varying lengths it cannot resolve."""
    drafts, accepted = finite(drafts, "the number of drafts", where), finite(accepted, "the accepted tokens", where)
    per_position = [finite(c, f"the accepted count at position {i}", where) for i, c in enumerate(per_position)]
    if draft_tokens is not None:
        draft_tokens = finite(draft_tokens, "the number of draft tokens", where)
    if drafts <= 0:
        raise InputError(f"{where}: no drafts counted (the number of drafts is {drafts:g}); "
                         "was speculative decoding on while it was measured?")
    if accepted < 0 or any(c < 0 for c in per_position):
        raise InputError(f"{where}: negative accepted-token counts")
    rates = [c / drafts for c in per_position]
    if any(r > 1.0 + 1e-9 for r in rates):
        raise InputError(f"{where}: a position accepted more tokens than there were drafts")
    if any(later > earlier * (1 + 1e-9) + 1e-9 for earlier, later in zip(per_position, per_position[1:])):
        raise InputError(f"{where}: accepted counts rise with the position ({', '.join(f'{c:g}' for c in per_position)}); "
                         "a later position cannot be accepted more often than an earlier one")
    out: dict[str, Any] = {"per_position_acceptance": rates, "mean_accepted_tokens": 1.0 + accepted / drafts}
    if not per_position:
        return out
    if abs(sum(per_position) - accepted) > max(1.0, 0.01 * accepted):
        raise InputError(f"{where}: accepted tokens per position sum to {sum(per_position):g}, "
                         f"but {accepted:g} accepted tokens are counted")
    k = len(per_position)
    full = drafts * k
    if draft_tokens is not None and draft_tokens > full + 0.5:
        raise InputError(f"{where}: {draft_tokens:g} draft tokens over {drafts:g} drafts is more than the {k} "
                         "positions counted allow")
    if draft_tokens is None or draft_tokens >= full - 0.5:
        reached = [1.0] + rates[:-1]                      # P(position i evaluated) = P(1..i-1 accepted)
        out["alpha_by_position"] = [min(1.0, r / p) for r, p in zip(rates, reached) if p > 0]
        out["alpha"] = min(1.0, sum(rates) / sum(reached))
        out["draft_lengths"] = "full" if draft_tokens is not None else "assumed full"
        return out
    alpha = per_position[0] / drafts
    z = one_rate_z(drafts, draft_tokens, per_position)
    if abs(z) > Z_LIMIT:
        raise InputError(
            f"{where}: drafts of varying length ({draft_tokens:g} draft tokens over {drafts:g} drafts, not "
            f"{drafts:g} x {k}) and per-position counts that no single acceptance rate explains ({z:+.1f} "
            f"standard errors from it): beta_i beyond position 1 cannot be told from the drafts' lengths; "
            "measure a window in which every draft had the same length (one batch-size range of the schedule)")
    out.update(alpha=alpha, draft_lengths="varying", mean_draft_length=draft_tokens / drafts, one_rate_z=z)
    return out


def draft_length_note(quantities: dict, positions: int) -> list[str]:
    """The not_provided line on draft lengths (`calibrate.ingest.counts`), none when every draft was full."""
    lengths = quantities.get("draft_lengths")
    if lengths == "varying":
        return [f"drafts of varying length (mean {quantities['mean_draft_length']:.2f} of {positions} positions): "
                "beta_i beyond position 1 is not identifiable; alpha is position 1's acceptance, and the counts fit "
                f"one rate at every position ({quantities['one_rate_z']:+.1f} standard errors)"]
    if lengths == "assumed full":
        return [f"draft tokens: not counted; alpha assumes every draft proposed {positions} tokens"]
    return []


def one_rate_z(drafts: float, draft_tokens: float, per_position: list[float]) -> float:
    """(sum_i c_i / alpha^i - T) / its standard error, alpha = c_1 / D: how far the counts are from
    drafts of unknown lengths all accepting each position at one rate (0 when they fit exactly)."""
    c = np.asarray(per_position, dtype=float)
    alpha = c[0] / drafts
    if alpha <= 0.0:                                   # nothing accepted: every position agrees with rate 0
        return 0.0 if not c.any() else math.inf
    powers = alpha ** np.arange(1, len(c) + 1)
    implied = float((c / powers).sum())
    if alpha >= 1.0:
        return 0.0 if abs(implied - draft_tokens) < 0.5 else math.inf
    # drafts reaching position i (n_1 = D), never rising; m_k drafts of exactly k tokens
    reach = np.minimum.accumulate(np.minimum(np.concatenate([[drafts], c[1:] / powers[1:]]), drafts))
    lengths = reach - np.append(reach[1:], 0.0)
    slope = -float((np.arange(1, len(c) + 1) * c / (powers * alpha)).sum()) / drafts   # d implied / d alpha, per draft
    variance = 0.0
    for k, m in enumerate(lengths, start=1):
        if m <= 0:
            continue
        accepted = np.arange(k + 1)                                          # a draft of k tokens accepts 0..k
        prob = np.where(accepted < k, alpha ** accepted * (1 - alpha), alpha ** k)
        x = np.concatenate([[0.0], np.cumsum(1.0 / powers[:k])])            # its sum_(i<=a) alpha^-i
        y = x - k + slope * ((accepted >= 1) - alpha)
        variance += m * float((prob * y * y).sum())
    return (implied - draft_tokens) / math.sqrt(variance) if variance > 0 else 0.0
