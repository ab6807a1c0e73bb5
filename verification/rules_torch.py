"""Batched torch versions of the verification rules in `verification.rules`, for the engine.

Same rules, same conventions (see `verification.rules`): rows on the first axis, vocabulary on the last.
All randomness comes in as tensors so that a run can be replayed by the reference with
`rules.ScriptedSource`: row b's j-th accept/reject comparison uses `accept_u[b, j]` (uniforms are
consumed in order, exactly as the reference calls `uniform()`), and its single categorical draw
(endpoint or bonus token) uses `draw_u[b]` by inverse CDF (first i with u * total < cumsum_i).
Sums are cumulative sums, as in the reference, so float64 runs round identically.

    mcss(candidates [B,K], p [B,V], q [B,V], accept_u [B,K], draw_u [B], replacement=True)
        -> StepBatch(accepted [B] bool, token [B] long, candidate [B] long, -1 when rejected)
        Candidates padded with -1 are absent (rows may have fewer than K).
    verify_tree(parents, tokens [B,N+1], p [B,N+1,V], q [B,N+1,V], accept_u [B,N], draw_u [B],
                replacement=True) -> VerdictBatch
        One tree shape (`parents`, as `rules.TokenTree`) shared by the rows; tokens per row.
        q rows of leaves are ignored.
    speculative_chain(drafts [B,G], p [B,G+1,V], q [B,G,V], accept_u [B,G], draw_u [B]) -> VerdictBatch
    greedy_tree(parents, tokens [B,N+1], p [B,N+1,V]) -> VerdictBatch;  greedy_chain(drafts, p)

VerdictBatch: tokens [B, D+1] (committed tokens, -1 padded; D = tree depth), n_accepted [B],
path [B, D] (accepted node ids, -1 padded), bonus [B] bool.

Bad input (NaN, negative, sums off by more than `tolerance(dtype)`, shapes, a candidate with
draft probability 0) raises `InputError` naming the tensor and the first offending row.
An all-zero residual keeps p^, never NaN and never token 0 (as in the reference).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from common.errors import InputError
from verification.rules import SUM_TOLERANCE, TokenTree

LOW_PRECISION_TOLERANCE = 1e-2  # bf16 / fp16 probability rows


def tolerance(dtype: torch.dtype) -> float:
    """Allowed |row sum - 1| for probability rows of this dtype."""
    return LOW_PRECISION_TOLERANCE if dtype in (torch.float16, torch.bfloat16) else SUM_TOLERANCE


def check_probs(t: torch.Tensor, name: str, rows: torch.Tensor | None = None) -> None:
    """InputError naming `name` unless every (selected) row of `t` is a probability vector."""
    if not isinstance(t, torch.Tensor) or not t.is_floating_point():
        raise InputError(f"{name} must be a floating-point tensor")
    if t.dim() >= 2 and t.stride(0) == 0:  # one block broadcast to every batch item: check it once
        t = t[:1]
        rows = None if rows is None else rows.any(0, keepdim=True)
    flat = t.reshape(-1, t.shape[-1])
    if rows is not None:
        flat = flat[rows.reshape(-1)]
    if flat.numel() == 0:
        return
    lowest = flat.amin(-1)                   # NaN when the row holds NaN
    sums = flat.sum(-1, dtype=torch.float64)  # inf when the row holds +inf (-inf is the lowest)
    bad_nan = torch.isnan(lowest)
    if bad_nan.any():
        raise InputError(f"{name} row {int(bad_nan.nonzero()[0])} holds NaN")
    bad_neg = (lowest < 0) | torch.isinf(sums)
    if bad_neg.any():
        raise InputError(f"{name} row {int(bad_neg.nonzero()[0])} holds a negative or infinite entry")
    off = (sums - 1).abs() > tolerance(t.dtype)
    if off.any():
        row = int(off.nonzero()[0])
        raise InputError(f"{name} row {row} sums to {float(sums[row]):.6g}, off from 1 by more than {tolerance(t.dtype):g}")


def _check_shape(t: torch.Tensor, name: str, shape: Sequence[int]) -> None:
    if tuple(t.shape) != tuple(shape):
        raise InputError(f"{name} has shape {tuple(t.shape)}, expected {tuple(shape)}")


# --- distribution updates (batched twins of rules.inverse_cdf / residual / remove_token) -------

def inverse_cdf(weights: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Per row: first index i with u * total < cumsum_i (total = last cumsum); never a zero weight."""
    cum = weights.cumsum(-1)
    threshold = (u.to(weights.dtype) * cum[..., -1]).unsqueeze(-1)
    idx = torch.searchsorted(cum.contiguous(), threshold.contiguous(), right=True).squeeze(-1)
    vocab = weights.shape[-1]
    over = idx >= vocab  # u * total rounded up to total: the last index with positive weight
    if over.any():
        last_positive = vocab - 1 - torch.argmax((weights[over] > 0).flip(-1).to(torch.int8), dim=-1)
        idx = idx.clone()
        idx[over] = last_positive
    return idx


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p - q)) per row; rows without residual mass keep p."""
    diff = (p - q).clamp_(min=0)
    total = diff.cumsum(-1)[..., -1:]
    has_mass = total > 0
    out = diff.div_(torch.where(has_mass, total, torch.ones_like(total)))
    return out if bool(has_mass.all()) else torch.where(has_mass, out, p)


def remove_token(q: torch.Tensor, token: torch.Tensor) -> torch.Tensor:
    """q with `token` zeroed per row and renormalised (all zeros when nothing is left)."""
    out = q.scatter(-1, token.unsqueeze(-1), 0.0)
    total = out.cumsum(-1)[..., -1:]
    return out.div_(torch.where(total > 0, total, torch.ones_like(total)))  # an all-zero row stays zero


# --- results ----------------------------------------------------------------------------------

@dataclass
class StepBatch:
    accepted: torch.Tensor   # [B] bool
    token: torch.Tensor      # [B] long: accepted candidate, or the endpoint token
    candidate: torch.Tensor  # [B] long: index of the accepted candidate, -1 when all rejected


@dataclass
class VerdictBatch:
    tokens: torch.Tensor      # [B, D+1] long, -1 padded: accepted drafts then correction/bonus
    n_accepted: torch.Tensor  # [B] long
    path: torch.Tensor        # [B, D] long, -1 padded: accepted node ids
    bonus: torch.Tensor       # [B] bool


# --- the rules --------------------------------------------------------------------------------

def _mcss_core(cands: torch.Tensor, p: torch.Tensor, q: torch.Tensor, accept_u: torch.Tensor,
               u_pos: torch.Tensor, replacement: bool, where: str):
    """MCSS on the rows with candidates (cands -1 = absent). Returns accepted, candidate, p^, u_pos."""
    rows, k = cands.shape
    accepted = torch.zeros(rows, dtype=torch.bool, device=p.device)
    chosen = torch.full((rows,), -1, dtype=torch.long, device=p.device)
    p_hat, q_bar = p, q
    for j in range(k):
        x = cands[:, j]
        active = (x >= 0) & ~accepted
        if not active.any():
            continue
        idx = active.nonzero().squeeze(-1)
        xa = x[idx]
        qx = q_bar[idx, xa]
        if not (qx > 0).all():
            row = int(idx[(qx <= 0).nonzero()[0]])
            raise InputError(f"candidate {j} of row {row}{where} has draft probability 0; candidates must be drawn from q"
                             + ("" if replacement else " without replacement"))
        u = accept_u[idx, u_pos[idx]]
        ok = u.to(p.dtype) <= p_hat[idx, xa] / qx
        accepted[idx[ok]] = True
        chosen[idx[ok]] = j
        rej = idx[~ok]
        if rej.numel():
            new_p = residual(p_hat[rej], q_bar[rej])
            p_hat = p_hat.clone() if p_hat is p else p_hat
            p_hat[rej] = new_p
            if not replacement:
                new_q = remove_token(q_bar[rej], x[rej])
                q_bar = q_bar.clone() if q_bar is q else q_bar
                q_bar[rej] = new_q
        u_pos = u_pos + active.long()
    return accepted, chosen, p_hat, u_pos


def _check_uniforms(t: torch.Tensor, name: str, shape: Sequence[int]) -> None:
    _check_shape(t, name, shape)
    if torch.isnan(t).any() or (t < 0).any() or (t >= 1).any():
        raise InputError(f"{name} must hold uniforms in [0, 1)")


def mcss(candidates: torch.Tensor, p: torch.Tensor, q: torch.Tensor, accept_u: torch.Tensor,
         draw_u: torch.Tensor, replacement: bool = True) -> StepBatch:
    """Batched `rules.mcss`: one position per row, up to K candidates (-1 padded)."""
    if p.dim() != 2:
        raise InputError(f"p must be [B, V], got shape {tuple(p.shape)}")
    rows, vocab = p.shape
    _check_shape(q, "q", (rows, vocab))
    if candidates.dim() != 2 or candidates.shape[0] != rows:
        raise InputError(f"candidates must be [B={rows}, K], got shape {tuple(candidates.shape)}")
    if ((candidates < -1) | (candidates >= vocab)).any():
        raise InputError(f"candidates hold a token id outside [0, {vocab}) (-1 marks an absent candidate)")
    _check_uniforms(accept_u, "accept_u", tuple(candidates.shape))
    _check_uniforms(draw_u, "draw_u", (rows,))
    check_probs(p, "p")
    check_probs(q, "q")
    accepted, chosen, p_hat, _ = _mcss_core(candidates.long(), p, q, accept_u,
                                            torch.zeros(rows, dtype=torch.long, device=p.device), replacement, "")
    token = candidates.long().gather(1, chosen.clamp(min=0).unsqueeze(1)).squeeze(1)
    rejected = ~accepted
    if rejected.any():
        token[rejected] = inverse_cdf(p_hat[rejected], draw_u[rejected])
    return StepBatch(accepted, token, chosen)


def _children_table(tree: TokenTree, device) -> torch.Tensor:
    width = max(1, max(len(tree.children(n)) for n in range(tree.size)))
    table = torch.full((tree.size, width), -1, dtype=torch.long)
    for node in range(tree.size):
        kids = tree.children(node)
        table[node, :len(kids)] = torch.tensor(kids, dtype=torch.long)
    return table.to(device)


def _tree_depth(tree: TokenTree) -> int:
    depth = [0] * tree.size
    for i in range(1, tree.size):
        depth[i] = depth[tree.parents[i]] + 1
    return max(depth)


def _walk(parents: Sequence[int], tokens: torch.Tensor, p: torch.Tensor, step_fn) -> VerdictBatch:
    """Walk every row down the shared tree; `step_fn(node, kid_nodes, kid_tokens, live)` decides per row."""
    tree = TokenTree(tuple(parents), (-1,) + (0,) * (len(parents) - 1))
    rows, size, vocab = p.shape
    if size != tree.size:
        raise InputError(f"p has {size} rows per batch item, the tree needs {tree.size}")
    _check_shape(tokens, "tokens", (rows, tree.size))
    drafted = tokens[:, 1:]
    if ((drafted < 0) | (drafted >= vocab)).any():
        raise InputError(f"tokens hold a drafted token id outside [0, {vocab})")
    depth = _tree_depth(tree)
    kids_of = _children_table(tree, p.device)
    arange = torch.arange(rows, device=p.device)
    node = torch.zeros(rows, dtype=torch.long, device=p.device)
    done = torch.zeros(rows, dtype=torch.bool, device=p.device)
    out_tokens = torch.full((rows, depth + 1), -1, dtype=torch.long, device=p.device)
    path = torch.full((rows, depth), -1, dtype=torch.long, device=p.device)
    bonus = torch.zeros(rows, dtype=torch.bool, device=p.device)
    n_acc = torch.zeros(rows, dtype=torch.long, device=p.device)
    while not done.all():
        kid_nodes = torch.where(done.unsqueeze(1), torch.full_like(kids_of[node], -1), kids_of[node])
        kid_tokens = torch.where(kid_nodes >= 0, tokens.long().gather(1, kid_nodes.clamp(min=0)), kid_nodes)
        leaf = ~done & (kid_nodes < 0).all(1)
        accepted, chosen, endpoint = step_fn(node, kid_nodes, kid_tokens, ~done & ~leaf)
        finishing = ~done & ~accepted
        out_tokens[arange[finishing], n_acc[finishing]] = endpoint[finishing]
        bonus |= leaf
        done |= finishing
        step = ~done
        if step.any():
            new_node = kid_nodes.gather(1, chosen.clamp(min=0).unsqueeze(1)).squeeze(1)
            out_tokens[arange[step], n_acc[step]] = kid_tokens.gather(1, chosen.clamp(min=0).unsqueeze(1)).squeeze(1)[step]
            path[arange[step], n_acc[step]] = new_node[step]
            n_acc = n_acc + step.long()
            node = torch.where(step, new_node, node)
    return VerdictBatch(out_tokens, n_acc, path, bonus)


def verify_tree(parents: Sequence[int], tokens: torch.Tensor, p: torch.Tensor, q: torch.Tensor,
                accept_u: torch.Tensor, draw_u: torch.Tensor, replacement: bool = True) -> VerdictBatch:
    """Batched `rules.verify_tree` over rows sharing one tree shape."""
    if p.dim() != 3:
        raise InputError(f"p must be [B, N+1, V], got shape {tuple(p.shape)}")
    rows, size, vocab = p.shape
    _check_shape(q, "q", (rows, size, vocab))
    _check_uniforms(accept_u, "accept_u", (rows, size - 1))
    _check_uniforms(draw_u, "draw_u", (rows,))
    if len(parents) != size:
        raise InputError(f"p has {size} rows per batch item, the tree of {len(parents)} nodes needs {len(parents)}")
    check_probs(p, "p")
    shape = TokenTree(tuple(parents), (-1,) * size)
    inner = torch.tensor([bool(shape.children(n)) for n in range(size)], device=p.device)
    check_probs(q, "q", rows=inner.unsqueeze(0).expand(rows, size))
    arange = torch.arange(rows, device=p.device)
    u_pos = torch.zeros(rows, dtype=torch.long, device=p.device)

    def step(node, kid_nodes, kid_tokens, live):
        nonlocal u_pos
        p_node, q_node = p[arange, node], q[arange, node]
        cands = torch.where(live.unsqueeze(1), kid_tokens, torch.full_like(kid_tokens, -1))
        accepted, chosen, p_hat, u_pos = _mcss_core(cands, p_node, q_node, accept_u, u_pos, replacement,
                                                    " at its tree node")
        endpoint = torch.full_like(chosen, -1)  # drawn only where the walk stops
        stop = ~accepted
        if stop.any():
            endpoint[stop] = inverse_cdf(p_hat[stop], draw_u[stop])
        return accepted, chosen, endpoint

    return _walk(parents, tokens, p, step)


def speculative_chain(drafts: torch.Tensor, p: torch.Tensor, q: torch.Tensor, accept_u: torch.Tensor,
                      draw_u: torch.Tensor) -> VerdictBatch:
    """Batched `rules.speculative_chain`: drafts [B,G], p [B,G+1,V], q [B,G,V] (or [B,G+1,V])."""
    rows, gamma = drafts.shape
    if q.dim() == 3 and q.shape[1] == gamma:
        q = torch.cat([q, p[:, -1:]], dim=1)  # the leaf's q row is never read
    parents = tuple(range(-1, gamma))
    tokens = torch.cat([torch.full((rows, 1), -1, dtype=torch.long, device=drafts.device), drafts.long()], 1)
    return verify_tree(parents, tokens, p, q, accept_u, draw_u)


def greedy_tree(parents: Sequence[int], tokens: torch.Tensor, p: torch.Tensor) -> VerdictBatch:
    """Batched `rules.greedy_tree`: follow children equal to the row's argmax (first maximum)."""
    if p.dim() != 3:
        raise InputError(f"p must be [B, N+1, V], got shape {tuple(p.shape)}")
    check_probs(p, "p")
    target = p.argmax(-1)  # [B, N+1]; torch returns the first maximal index
    arange = torch.arange(p.shape[0], device=p.device)

    def step(node, kid_nodes, kid_tokens, live):
        want = target[arange, node]
        match = (kid_tokens == want.unsqueeze(1)) & (kid_nodes >= 0) & live.unsqueeze(1)
        accepted = match.any(1)
        return accepted, torch.argmax(match.to(torch.int8), dim=1), want

    return _walk(parents, tokens, p, step)


def greedy_chain(drafts: torch.Tensor, p: torch.Tensor) -> VerdictBatch:
    rows, gamma = drafts.shape
    tokens = torch.cat([torch.full((rows, 1), -1, dtype=torch.long, device=drafts.device), drafts.long()], 1)
    return greedy_tree(tuple(range(-1, gamma)), tokens, p)


# --- deterministic candidates (one-hot drafts) and drafting -----------------------------------

def verify_tree_one_hot(parents: Sequence[int], tokens: torch.Tensor, p: torch.Tensor, accept_u: torch.Tensor,
                        draw_u: torch.Tensor) -> VerdictBatch:
    """Batched `rules.verify_tree_one_hot` (CAPE sets, n-gram tries): no q; per candidate one
    uniform, accepted when u < p^(x), else p^ loses x and is renormalised; uniforms as `verify_tree`."""
    if p.dim() != 3:
        raise InputError(f"p must be [B, N+1, V], got shape {tuple(p.shape)}")
    rows, size, _ = p.shape
    _check_uniforms(accept_u, "accept_u", (rows, size - 1))
    _check_uniforms(draw_u, "draw_u", (rows,))
    check_probs(p, "p")
    arange = torch.arange(rows, device=p.device)
    u_pos = torch.zeros(rows, dtype=torch.long, device=p.device)

    def step(node, kid_nodes, kid_tokens, live):
        nonlocal u_pos
        p_hat = p[arange, node]  # advanced indexing: a copy, edited in place below
        cands = torch.where(live.unsqueeze(1), kid_tokens, torch.full_like(kid_tokens, -1))
        accepted = torch.zeros(rows, dtype=torch.bool, device=p.device)
        chosen = torch.full((rows,), -1, dtype=torch.long, device=p.device)
        for j in range(cands.shape[1]):
            x = cands[:, j]
            active = (x >= 0) & ~accepted
            if not active.any():
                continue
            idx = active.nonzero().squeeze(-1)
            ok = accept_u[idx, u_pos[idx]].to(p.dtype) < p_hat[idx, x[idx]]
            accepted[idx[ok]] = True
            chosen[idx[ok]] = j
            rej = idx[~ok]
            if rej.numel():
                p_hat[rej] = remove_token(p_hat[rej], x[rej])
            u_pos = u_pos + active.long()
        endpoint = torch.full_like(chosen, -1)  # drawn only where the walk stops
        stop = ~accepted
        if stop.any():
            endpoint[stop] = inverse_cdf(p_hat[stop], draw_u[stop])
        return accepted, chosen, endpoint

    return _walk(parents, tokens, p, step)


def draft_candidates(q: torch.Tensor, k: int, draw_u: torch.Tensor, replacement: bool = True) -> torch.Tensor:
    """`rules.draft_candidates` on one row q [V]: draw j by inverse CDF with draw_u[j]; without
    replacement q loses each drawn token (fewer than k tokens when its support is smaller)."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise InputError(f"k is {k!r}, must be a positive integer")
    if q.dim() != 1:
        raise InputError(f"q must be [V], got shape {tuple(q.shape)}")
    _check_uniforms(draw_u, "draw_u", (k,))
    check_probs(q.unsqueeze(0), "q")
    if replacement:
        return inverse_cdf(q.unsqueeze(0).expand(k, -1), draw_u)
    drawn, q_bar = [], q.unsqueeze(0)
    for j in range(k):
        if not (q_bar > 0).any():
            break
        x = inverse_cdf(q_bar, draw_u[j:j + 1])
        drawn.append(x)
        q_bar = remove_token(q_bar, x)
    return torch.cat(drawn)
