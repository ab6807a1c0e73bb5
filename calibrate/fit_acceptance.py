"""Acceptance models fitted from traces, in the Profile's acceptance-entry form (profiles.acceptance).

- `fit_token_acceptance(frame, ...)` from a TokenTrace (teacher-forced, one row per output token):
  alpha = mean of the `alpha` column (E[sum min(p, q)]); greedy alpha@k = P(draft_rank < k), with
  the error of reading each k from the others on the curve `alpha_at` uses (`alpha_at_k_fit`,
  `leave_one_k_out`);
  per-position beta_i from an exact greedy chain replay (traces.replay) at draft length `gamma`;
  the confidence-bin table P(draft_rank < K | floor(10 * draft_conf)); a two-state Markov model of
  consecutive tokens.
- `fit_step_acceptance(frame)` from a StepTrace of chain steps: beta_i from `accept_mask` (per
  chain length where the steps come from chains of several), the Markov model from consecutive
  mask entries, top-1 confidence bins from `confidences`.

Each returns a plain dict that `AcceptanceModel.from_dict` validates; `fit` records sample counts.
"""
from __future__ import annotations

import json
from typing import Any, Iterable

import numpy as np
import pandas as pd

from common.errors import InputError
from costmodel.cape import N_BINS, confidence_bin
from methods.replay import TokenTable, chain_lengths
from profiles.acceptance import AcceptanceModel, AlphaCurve
from traces.replay import steps_of

DEFAULT_KS = (1, 2, 4, 8, 16, 32)
DEFAULT_CONF_KS = (1, 2, 4, 8)


def leave_one_k_out(table: dict[int, float]) -> dict[str, Any]:
    """Each measured k but the first predicted by `AlphaCurve` from the others (interpolated inside,
    extrapolated past the last): the error to expect at a k that was not measured. Needs 3 points."""
    ks = sorted(table)
    rows = []
    for k in ks[1:] if len(ks) >= 3 else []:
        rest = {j: v for j, v in table.items() if j != k}
        predicted = float(AlphaCurve.of(rest)(k))
        rows.append((k, table[k], predicted))
    if not rows:
        return {}
    err = np.array([p / a - 1.0 if a > 0 else (0.0 if p == 0 else np.inf) for _, a, p in rows])
    finite = np.abs(err[np.isfinite(err)])
    return {"family": AlphaCurve.FAMILY, "k": [int(k) for k, _, _ in rows],
            "rel_error": [round(float(e), 4) for e in err],
            "median": float(np.median(finite)) if finite.size else None,
            "max": float(finite.max()) if finite.size else None}


def conf_bin_table(conf: np.ndarray, hit_by_k: dict[int, np.ndarray]) -> dict[str, Any]:
    """freq per bin and P(hit within top K | bin); an empty bin takes the overall hit rate. Recorded
    confidences are clipped to [0, 1] first (float rounding of a softmax can step past 1)."""
    bins = confidence_bin(np.clip(np.asarray(conf, float), 0.0, 1.0))
    counts = np.bincount(bins, minlength=N_BINS).astype(float)
    table = {}
    for k, hit in hit_by_k.items():
        hits = np.bincount(bins, weights=np.asarray(hit, float), minlength=N_BINS)
        overall = float(np.mean(hit))
        table[str(k)] = np.where(counts > 0, hits / np.maximum(counts, 1), overall).tolist()
    return {"freq": (counts / counts.sum()).tolist(), "topk_hit": table, "counts": counts.astype(int).tolist()}


def markov_from_sequences(sequences: Iterable[np.ndarray]) -> dict[str, float]:
    """p_aa, p_ra over consecutive entries of each sequence (values in [0, 1]: expectations allowed)."""
    prev_acc = prev_rej = acc_after_acc = acc_after_rej = 0.0
    for seq in sequences:
        s = np.asarray(seq, float)
        if s.size < 2:
            continue
        prev, nxt = s[:-1], s[1:]
        prev_acc += prev.sum()
        prev_rej += (1.0 - prev).sum()
        acc_after_acc += (prev * nxt).sum()
        acc_after_rej += ((1.0 - prev) * nxt).sum()
    if prev_acc == 0 or prev_rej == 0:
        raise InputError("a Markov acceptance fit needs both accepted and rejected positions followed by another")
    return {"p_aa": float(acc_after_acc / prev_acc), "p_ra": float(acc_after_rej / prev_rej),
            "n_transitions": int(round(prev_acc + prev_rej))}


def betas_from_hit_counts(reached: np.ndarray, accepted: np.ndarray) -> list[float]:
    """beta_i = accepted_i / reached_i, stopping before the first position nobody reached."""
    out = []
    for r, a in zip(reached, accepted):
        if r == 0:
            break
        out.append(float(a / r))
    return out


def replayed_betas(table, gamma: int) -> list[float]:
    """beta_1..beta_gamma of the drafter's greedy chains of `gamma` drafts, replayed exactly along
    the recorded output (each prompt's last step, cut short by the output's end, left out)."""
    steps = steps_of(table, chain_lengths(table, (1,) * gamma))
    last = steps.groupby("prompt_id")["step"].transform("max") == steps["step"]
    hits = steps.loc[~last, "accepted"].to_numpy() - 1          # leading hits per full step, 0..gamma
    reached = np.array([(hits >= i - 1).sum() for i in range(1, gamma + 1)])
    accepted = np.array([(hits >= i).sum() for i in range(1, gamma + 1)])
    return betas_from_hit_counts(reached, accepted)


def evaluated_positions(mask: np.ndarray) -> int:
    """Drafted positions whose acceptance was decided: up to and including the first rejection."""
    return len(mask) if mask.all() else int(np.argmin(mask)) + 1


def fit_token_acceptance(frame: pd.DataFrame, drafter: str = "", dataset: str = "", temperature: float = 0.0,
                         gamma: int = 8, ks: Iterable[int] = DEFAULT_KS, conf_ks: Iterable[int] = DEFAULT_CONF_KS,
                         source: str = "token trace") -> dict[str, Any]:
    """The acceptance entry of a TokenTrace (columns as traces.schema.TOKEN_COLUMNS)."""
    if len(frame) == 0:
        raise InputError(f"{source}: token trace is empty")
    rank = frame["draft_rank"].to_numpy()
    ordered = frame.sort_values(["prompt_id", "pos"], kind="stable")
    entry: dict[str, Any] = {"drafter": drafter, "temperature": float(temperature), "dataset": dataset,
                             "alpha": float(frame["alpha"].mean()), "source": source}
    if temperature == 0:
        entry["alpha_at_k"] = {str(k): float(np.mean(rank < k)) for k in ks}
        entry["alpha_at_k_without_replacement"] = dict(entry["alpha_at_k"])  # greedy: candidates are the top-k
        entry["alpha_at_k_fit"] = leave_one_k_out({int(k): v for k, v in entry["alpha_at_k"].items()})
        table = TokenTable.from_frame(frame)
        by_gamma = {g: replayed_betas(table, g) for g in range(1, gamma + 1)}
        entry["alpha_by_position"] = by_gamma[gamma]
        entry["alpha_by_position_at_gamma"] = {str(g): b for g, b in by_gamma.items()}
    hit_by_k = {k: (rank < k) for k in conf_ks}
    entry["conf_bins"] = conf_bin_table(frame["draft_conf"].to_numpy(), hit_by_k)
    signal = "alpha" if temperature > 0 else None
    sequences = [(g["alpha"] if signal else (g["draft_rank"] == 0)).to_numpy(float)
                 for _, g in ordered.groupby("prompt_id", sort=False)]
    entry["markov"] = markov_from_sequences(sequences)
    entry["fit"] = {"n_tokens": int(len(frame)), "n_prompts": int(frame["prompt_id"].nunique()), "gamma": gamma}
    AcceptanceModel.from_dict(entry, name=drafter or "fitted")
    return entry


def fit_step_acceptance(frame: pd.DataFrame, drafter: str = "", dataset: str = "", temperature: float = 0.0,
                        method: str | None = None, source: str = "step trace") -> dict[str, Any]:
    """The acceptance entry of chain StepTrace rows (accept_mask / confidences per drafted position).
    Rows of chains of several lengths (their `config`'s gamma) also give beta_1..beta_g as measured
    in chains of each length g (`alpha_by_position_at_gamma`: acceptance runs in streaks, so it
    depends on g), and alpha_by_position is then the longest chains' own."""
    rows = frame if method is None else frame[frame["method"] == method]
    rows = rows[[len(m) > 0 for m in rows["accept_mask"]]]
    if not len(rows):
        raise InputError(f"{source}: no step with a drafted position to fit acceptance from")
    masks = [np.asarray(m, bool) for m in rows["accept_mask"]]
    reached, accepted = _hit_counts(masks)
    n_eval = [evaluated_positions(m) for m in masks]
    evaluated_masks = [m[:n] for m, n in zip(masks, n_eval)]
    evaluated_conf = [np.asarray(c, float)[:n] for c, n in zip(rows["confidences"], n_eval)]
    entry: dict[str, Any] = {"drafter": drafter, "temperature": float(temperature), "dataset": dataset,
                             "alpha": float(accepted.sum() / reached.sum()),
                             "alpha_by_position": betas_from_hit_counts(reached, accepted), "source": source}
    by_gamma = chain_betas_by_gamma(rows)
    if len(by_gamma) > 1:
        entry["alpha_by_position"] = by_gamma[max(by_gamma)]
        entry["alpha_by_position_at_gamma"] = {str(g): b for g, b in by_gamma.items()}
    with_conf = [(m[: len(c)], c) for m, c in zip(evaluated_masks, evaluated_conf) if len(c)]
    if with_conf:
        entry["conf_bins"] = conf_bin_table(np.concatenate([c for _, c in with_conf]),
                                            {1: np.concatenate([m for m, _ in with_conf])})
    try:
        entry["markov"] = markov_from_sequences(evaluated_masks)
    except InputError:
        pass  # every step accepted everything, or nothing: no transitions of both kinds
    entry["fit"] = {"n_steps": len(masks), "max_positions": int(reached.size)}
    if "prompt_id" in rows:
        entry["fit"]["n_prompts"] = int(rows["prompt_id"].nunique())
    AcceptanceModel.from_dict(entry, name=drafter or "fitted")
    return entry


def chain_betas_by_gamma(rows: pd.DataFrame) -> dict[int, list[float]]:
    """beta_1..beta_g measured in the chains of each length g (their `config`'s gamma) among StepTrace
    rows with an `accept_mask`; {} where a row's configuration states no chain length."""
    return {g: betas_from_hit_counts(*_hit_counts(masks)) for g, masks in _chain_masks(rows).items()}


def with_chains(entry: dict[str, Any], rows: pd.DataFrame, source: str) -> dict[str, Any]:
    """`entry` (a Profile acceptance entry) with the per-position acceptance of the chain lengths it
    holds no record of (`alpha_by_position_at_gamma`), measured in `rows` (chain steps of its own
    drafter, data and temperature: `accept_mask` and `config`); what it recorded is kept. Its source
    and fit say what was added, from how many steps."""
    have = {int(g) for g in entry.get("alpha_by_position_at_gamma") or {}}
    added = {g: masks for g, masks in _chain_masks(rows[chain_steps(rows)]).items() if g not in have}
    if not added:
        return entry
    at_gamma = {**(entry.get("alpha_by_position_at_gamma") or {}),
                **{str(g): betas_from_hit_counts(*_hit_counts(masks)) for g, masks in added.items()}}
    out = {**entry, "alpha_by_position_at_gamma": dict(sorted(at_gamma.items(), key=lambda kv: int(kv[0]))),
           "source": f"{entry.get('source', '')}; chains of {', '.join(map(str, added))} from {source}",
           "fit": {**entry.get("fit", {}), "chains_added": {str(g): len(masks) for g, masks in added.items()}}}
    AcceptanceModel.from_dict(out, name=entry.get("drafter") or "fitted")
    return out


def chain_steps(rows: pd.DataFrame) -> np.ndarray:
    """Which rows are steps of a plain chain: a draft length (`config`'s gamma), no confidence bins
    (CAPE widens a step by its draft's confidence: which steps stay chains depends on how sure the
    drafter was) and that many drafts verified with one more token (not a tree, not cut short)."""
    configs = rows["config"].map(_config_of)
    gammas = configs.map(lambda c: c.get("gamma"))
    binned = configs.map(lambda c: c.get("bins") is not None)
    return (gammas.notna() & ~binned & (rows["verify_tokens"] == gammas.fillna(-1) + 1)).to_numpy()


def _config_of(config) -> dict:
    """A StepTrace row's configuration (its `config` JSON), {} where it holds none."""
    return json.loads(config) if isinstance(config, str) and config.startswith("{") else {}


def _chain_masks(rows: pd.DataFrame) -> dict[int, list[np.ndarray]]:
    """Chain length -> the accept masks of the rows that drafted (none for a length that never did)."""
    gammas = _chain_gammas(rows)
    if gammas is None:
        return {}
    out: dict[int, list[np.ndarray]] = {}
    for mask, g in zip(rows["accept_mask"], gammas):
        if len(mask):
            out.setdefault(int(g), []).append(np.asarray(mask, bool))
    return dict(sorted(out.items()))


def _hit_counts(masks: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Per drafted position: how many steps decided it (reached it) and how many accepted it."""
    depth = max(len(m) for m in masks)
    reached, accepted = np.zeros(depth), np.zeros(depth)
    for mask in masks:
        n_eval = evaluated_positions(mask)
        reached[:n_eval] += 1
        accepted[:n_eval] += mask[:n_eval]
    return reached, accepted


def _chain_gammas(rows: pd.DataFrame) -> pd.Series | None:
    """Each row's configured chain length (its `config` JSON's gamma), or None where a row has none."""
    if "config" not in rows:
        return None
    gammas = rows["config"].map(lambda c: _config_of(c).get("gamma"))
    return None if gammas.isna().any() else gammas.astype(int)


