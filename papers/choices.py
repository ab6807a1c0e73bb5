"""The sweep's best configurations beside the papers' own choices, with the differences explained.

Where a paper names the configuration it found best, `compare(tables, best)` finds that
configuration (by its canonical label, `methods`) in the sweep's ranked table of the matching
profile and reports: the paper's choice
and its published speedup, where the sweep ranks it and what it predicts for it, the sweep's own
best, and a sentence on why they differ, computed from the two rows (tokens per step, tokens
verified, draft cost) and from what the profile records.

Papers' choices (from `papers`): MCSD Tables 2-3 "Ours" rows (k-configuration per
drafter / target / dataset / temperature), Lookahead Table 4 (W, N, G = W per model size), CORAL
Sec. 4 (N = 16 groups, top-2, Table 4's best).
The same comparison, priced against the published speedups, is `papers.heldout.sweep_vs_paper`
(reproduce's report).
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

import methods
from calibrate.assumed import ASSUMED
from sweep.ranking import ranked
import papers

COLUMNS = ["method", "profile", "setting", "paper_choice", "paper_speedup", "sweep_rank_of_paper_choice",
           "predicted_for_paper_choice", "sweep_best", "predicted_best", "why"]
READ = ["profile", "target", "drafter", "dataset", "temperature", "config", "acceptance", "acceptance_source",
        "groups", "top_n", "speedup", "tokens_per_step", "verified_per_step", "draft_cost", "fits", "rank"]


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", str(text).lower())


def _why(paper_row: pd.Series, best_row: pd.Series, extra: str = "") -> str:
    if not bool(best_row.get("fits", True)):      # a comparison with the paper, not a recommendation
        extra += (" Neither configuration fits in one GPU of the profile's hardware (the report's answer for this "
                  "deployment gives the memory arithmetic): the comparison is with the paper's measured runs only.")
    if paper_row is None:
        return "the paper's configuration is outside the searched space. " + extra
    if paper_row["config"] == best_row["config"]:
        return "same choice. " + extra
    parts = [f"the sweep's best commits {best_row.tokens_per_step:.2f} tokens/step verifying "
             f"{best_row.verified_per_step:.0f} (draft cost {best_row.draft_cost:.2f} target forwards) against "
             f"{paper_row.tokens_per_step:.2f} verifying {paper_row.verified_per_step:.0f} (draft cost "
             f"{paper_row.draft_cost:.2f}) for the paper's; the predicted gap is "
             f"{100 * (best_row.speedup / paper_row.speedup - 1):.1f}%"]
    return "; ".join(parts) + ". " + extra


def _in_order(group: pd.DataFrame) -> pd.DataFrame:
    """One profile's rows in the sweep's order: a scored table's rows already are (their `rank`
    rises), anything else is ranked."""
    if "rank" in group and bool(np.all(np.diff(group["rank"].to_numpy()) > 0)):
        return group
    return ranked(group)


def _mcsd(table: pd.DataFrame, profiles: dict) -> list[dict]:
    out = []
    ours = [r for r in papers.records("mcsd") if r.row.endswith("/ Ours") and r.column == "speedup"]
    # the groups' rows are taken only where a paper row matches: a table of 10^6 rows has few of those
    groups = table.groupby(["profile", "drafter", "dataset", "temperature"]).indices
    for (profile, drafter, dataset, temp) in sorted(groups):
        target = profiles.get(profile, "")
        match = [r for r in ours if _norm(r.row.split("/")[0]) == _norm(drafter)
                 and _norm(r.row.split("/")[1]) == _norm(target) and _norm(r.row.split("/")[2]) == _norm(dataset)
                 and _norm(r.row.split("/")[3]) == _norm(f"T={temp:g}")]
        if not match or papers.k_config(match[0]) is None:
            continue
        label = methods.parse_config("mcsd", {"k": papers.k_config(match[0]), "replacement": True}).label
        group = _in_order(table.iloc[groups[profile, drafter, dataset, temp]]).reset_index(drop=True)
        hit = group.index[group.config == label]
        paper_row = group.loc[hit[0]] if len(hit) else None
        best = group.iloc[0]
        acc = sorted(group.acceptance.unique())
        out.append(dict(
            method="mcsd", profile=profile, setting=f"{drafter} / {dataset} / T={temp:g}", paper_choice=label,
            paper_speedup=match[0].value, sweep_rank_of_paper_choice=int(hit[0]) + 1 if len(hit) else None,
            predicted_for_paper_choice=None if paper_row is None else paper_row.speedup,
            sweep_best=best.config, predicted_best=best.speedup,
            why=_why(paper_row, best, "alpha@k for k the profile does not record is read on its curve "
                                      f"(profiles.acceptance.AlphaCurve) from the recorded k ({', '.join(acc)}).")))
    return out


def _lookahead(table: pd.DataFrame, profiles: dict) -> list[dict]:
    good = papers.table("lookahead", "4")
    out = []
    for profile, group in table.groupby("profile"):
        size = re.search(r"(\d+)b", profiles.get(profile, ""))
        key = f"{size.group(1)}B" if size else None
        if key not in good:
            continue
        label = methods.parse_config("lookahead", {c: int(good[key][c]) for c in ("W", "N", "G")}).label
        group = _in_order(group).reset_index(drop=True)
        hit = group.index[group.config == label]
        paper_row = group.loc[hit[0]] if len(hit) else None
        best = group.iloc[0]
        out.append(dict(
            method="lookahead", profile=profile, setting=f"{key} on {profile}", paper_choice=label,
            paper_speedup=None, sweep_rank_of_paper_choice=int(hit[0]) + 1 if len(hit) else None,
            predicted_for_paper_choice=None if paper_row is None else paper_row.speedup,
            sweep_best=best.config, predicted_best=best.speedup,
            why=_why(paper_row, best, "Table 4 is a 'good' configuration found on A100 with G = W; the closed form "
                                      "(Eq. 5 + Eq. 7 with one alpha and f) rewards any (W, G) whose forward stays "
                                      "memory-bound, so the optimum is flat across many (W, G).")))
    return out


def _coral(table: pd.DataFrame, profiles: dict) -> list[dict]:
    out = []
    for profile, group in table.groupby("profile"):
        group = _in_order(group).reset_index(drop=True)
        hit = group.index[(group.groups == 16) & (group.top_n == 2)]
        paper_row = group.loc[hit[0]] if len(hit) else None
        best = group.iloc[0]
        out.append(dict(
            method="coral", profile=profile, setting="LM-head router", paper_choice="N=16 top-2",
            paper_speedup=None, sweep_rank_of_paper_choice=int(hit[0]) + 1 if len(hit) else None,
            predicted_for_paper_choice=None if paper_row is None else paper_row.speedup,
            sweep_best=f"{best.drafter} {best.config}", predicted_best=best.speedup,
            why=_why(paper_row, best, "the (N, top-n) grid is scored only where the profile records the router's "
                                      "recall; the bundled CORAL profiles carry the N=16/top-2 drafter alone.")))
    return out


def compare(tables: dict[str, pd.DataFrame], best: pd.DataFrame) -> pd.DataFrame:
    """One row per (paper choice, profile) the sweep covered with recorded acceptance (a Profile whose
    acceptance for the method is ASSUMED has no measurement to set the paper's choice against);
    an empty frame when none."""
    profiles = {}
    for frame in tables.values():
        if "target" in frame:
            first = frame["rank"].to_numpy() == 1 if "rank" in frame else ~frame["profile"].duplicated().to_numpy()
            pairs = frame.loc[first, ["profile", "target"]]        # a profile has one target
            profiles.update(dict(zip(pairs.profile, pairs.target)))
    rows: list[dict] = []
    for method, fn in (("mcsd", _mcsd), ("lookahead", _lookahead), ("coral", _coral)):
        table = tables.get(method)
        if table is not None:
            table = table[[c for c in READ if c in table]]          # what is read: no copy of 10^6 rows' others
        if table is not None and "acceptance_source" in table:     # a paper's choice against what was measured
            assumed = (table["acceptance_source"] == ASSUMED).to_numpy(dtype=bool)
            table = table[~assumed] if assumed.any() else table
        if table is not None and not table.empty:
            rows += fn(table, profiles)
    return pd.DataFrame(rows, columns=COLUMNS)
