"""Goodput at batch B: tokens per second for B concurrent requests under speculative decoding.

One step drafts gamma tokens for each of the B requests (gamma draft forwards of B tokens) and
verifies them in one target forward of B (gamma + 1) tokens; each request commits E tokens on
average. Latencies are callables n_tokens -> seconds or arrays indexed by n_tokens, so this module
does not depend on any particular latency model.
"""
from __future__ import annotations

import numpy as np

from costmodel.leviathan import check_nonnegative, check_positive_int, latency_at


def goodput(batch, gamma, tokens_per_step, draft_latency, target_latency, overhead_s=0.0):
    """Committed tokens per second for `batch` requests: B E / (gamma L_d(B) + L_t(B (gamma + 1)) + overhead)."""
    b = check_positive_int("batch", batch)
    g = check_positive_int("gamma", gamma)
    step = g * latency_at(draft_latency, b) + latency_at(target_latency, b * (g + 1)) + check_nonnegative(
        "overhead", overhead_s)
    return b * np.asarray(tokens_per_step, dtype=float) / step


def baseline_goodput(batch, target_latency):
    """Plain decoding: B / L_t(B) tokens per second."""
    b = check_positive_int("batch", batch)
    return b / latency_at(target_latency, b)


def speedup_at_batch(batch, gamma, tokens_per_step, draft_latency, target_latency, overhead_s=0.0):
    """Goodput relative to plain decoding at the same batch size."""
    return goodput(batch, gamma, tokens_per_step, draft_latency, target_latency, overhead_s) / baseline_goodput(
        batch, target_latency)
