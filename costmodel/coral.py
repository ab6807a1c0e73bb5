"""CORAL (2025) speedup estimates and the LM-head router, in closed form.

Eq. 1: SR ~ tau * L_t / (gamma L_d + L_t'), where L_t' is the target's latency for verifying the
whole draft tree at once. (The extracted equation prints L_t' in the numerator; the paper's own
worked example in Sec. 4.2.3 — ratio tau/SR of 1.6 with L_t' = L_t rising to 1.8 with
L_t' = 1.19 L_t — needs it in the denominator, which is the form used here.)
Eq. 5: L_d / L_t ~ W_d / W_t (parameters without embeddings). Eq. 6: SR ~ tau W_t / (gamma W_d + W_t).
tau is the acceptance length per drafting-verification cycle (bonus included); gamma the tree depth.
"""
from __future__ import annotations

import numpy as np

from costmodel.leviathan import (alpha_from_expected_tokens, check_nonnegative, check_positive_int,
                                 check_probability, expected_tokens)


def speedup_eq1(tau, gamma, draft_latency, target_latency, verify_latency=None):
    """Eq. 1 with L_t' = verify_latency (defaults to target_latency, the paper's ideal case)."""
    l_t = check_nonnegative("target latency", target_latency)
    l_v = l_t if verify_latency is None else check_nonnegative("verify latency", verify_latency)
    g = check_positive_int("gamma", gamma)
    return np.asarray(tau, dtype=float) * l_t / (g * check_nonnegative("draft latency", draft_latency) + l_v)


def latency_ratio_eq5(draft_params, target_params):
    """Eq. 5: L_d / L_t ~ W_d / W_t (non-embedding parameter counts, memory-bound decoding)."""
    w_t = check_nonnegative("target params", target_params)
    if np.any(w_t <= 0):
        raise ValueError("target params must be > 0")
    return check_nonnegative("draft params", draft_params) / w_t


def speedup_eq6(tau, gamma, draft_params, target_params, verify_factor=1.0):
    """Eq. 6 SR ~ tau W_t / (gamma W_d + W_t), with L_t' = verify_factor * L_t (Eq. 6 has 1)."""
    ratio = latency_ratio_eq5(draft_params, target_params)
    return speedup_eq1(tau, gamma, ratio, 1.0, check_nonnegative("verify factor", verify_factor))


def router_head_params(hidden, vocab, n_groups, top_n):
    """Activated LM-head parameters with the router: top_n / N of the head (hidden x vocab) plus the
    router's own W1 (hidden x hidden) and W2 (N x hidden) of CORAL Eq. 7."""
    d = check_positive_int("hidden", hidden)
    v = check_positive_int("vocab", vocab)
    n = check_positive_int("router groups N", n_groups)
    k = check_positive_int("top-n", top_n)
    if np.any(k > n):
        raise ValueError("top-n must not exceed the number of router groups N")
    return k / n * (d * v) + d * d + n * d


def draft_params_with_router(draft_params, hidden, vocab, n_groups, top_n):
    """Draft parameters read per drafting step when the full LM head is replaced by the routed one."""
    full_head = check_positive_int("hidden", hidden) * check_positive_int("vocab", vocab)
    return check_nonnegative("draft params", draft_params) - full_head + router_head_params(hidden, vocab, n_groups, top_n)


def tau_with_router(tau, gamma, recall):
    """Acceptance length after routing: each drafted token also needs the target's token inside the
    top-n groups (probability `recall`, independent per token), so the per-token alpha implied by
    tau at depth gamma becomes alpha * recall. A chain approximation of the draft tree."""
    r = check_probability("router recall", recall)
    alpha = alpha_from_expected_tokens(tau, gamma)
    return expected_tokens(alpha * r, gamma)


def drafter_arch(t, base: dict, **options) -> dict:
    """`costmodel.params.drafter_arch("coral", ...)`: the EAGLE feature drafter, one decoder layer plus
    an fc from 2h to h on the target's LM head; options `groups`, `top_n` add CORAL's router, which
    activates top_n / groups of the head plus its own hidden x groups weights. EAGLE-3 (`eagle3=True`)
    fuses three of the target's layers (fc from 3h to h), feeds its layer the embedding and the
    feature together (q, k, v projected from 2h) and drafts over a reduced vocabulary of its own
    (`draft_vocab`, its LM head's rows; the checkpoint maps them to the target's), the embedding
    table still the target's."""
    top_n, groups = options.get("top_n"), options.get("groups")
    eagle3, draft_vocab = bool(options.get("eagle3")), options.get("draft_vocab")
    fused = 3 if eagle3 else 2
    extra = fused * t.hidden * t.hidden + t.hidden
    if eagle3:                # q, k, v read 2h: a second h of inputs to every projection
        extra += t.hidden * (t.n_heads + 2 * t.n_kv_heads) * t.dim_head
    fraction = 1.0
    if groups:
        if not top_n or not 1 <= top_n <= groups:
            raise ValueError(f"router top_n {top_n!r} must lie in 1..groups ({groups})")
        fraction = top_n / groups
        extra += t.hidden * groups
    vocab = int(draft_vocab) if draft_vocab else base["vocab"]
    if not 1 <= vocab <= t.vocab:
        raise ValueError(f"draft vocabulary {vocab} must lie in 1..{t.vocab} (the target's)")
    head = "EAGLE-3 head: fc 3h->h, 1 decoder layer on 2h inputs" if eagle3 else "EAGLE head: fc 2h->h + 1 decoder layer"
    return dict(base, n_layers=1, extra_params=extra, lm_head_fraction=fraction, shared_embeddings=True, vocab=vocab,
                source=head + (f", LM head over a draft vocabulary of {vocab}" if vocab != t.vocab else ", target LM head")
                + (f"; CORAL router top-{top_n} of {groups} groups" if groups else ""))
