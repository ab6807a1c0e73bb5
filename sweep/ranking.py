"""One order for every table and plot of the sweep, and ties marked.

Configurations that fit in memory come first (`fits`, sweep.scoring), then they are
ranked by a figure of merit (the closed form's predicted speedup, or the simulator's served
throughput); configurations equal in it to SIGNIFICANT digits are put in one
order by the tie-break rule (`TIE_BREAK`): the cheaper step first (fewer tokens verified per step,
then less draft cost), then the drafter and the label in alphabetical order. Every table, the
answer per deployment, the plots' marked best and the papers' comparison take their best from
`ranked`, so they name the same configuration.

Two configurations *tie* when their figures differ by less than the Profile's held-out error (a
relative error: the model cannot tell them apart). `ties_with_best` counts, per group, the
configurations within that error of the group's best, which the report shows beside it.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

SIGNIFICANT = 9          # figures of merit equal to this many significant digits are equal
TIE_BREAK = [("verified_per_step", True), ("draft_cost", True), ("drafter", True), ("config", True)]


def _merit(values: pd.Series) -> np.ndarray:
    """The figure rounded to SIGNIFICANT digits (NaN last), so float noise does not decide an order."""
    v = values.to_numpy(dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = 10.0 ** (SIGNIFICANT - 1 - np.floor(np.log10(np.abs(v))))
    rounded = np.where(np.isfinite(v) & (v != 0), np.round(v * scale) / scale, v)
    return np.where(np.isnan(rounded), -np.inf, rounded)


def ranked(frame: pd.DataFrame, key: str = "speedup", by: Sequence[str] = ()) -> pd.DataFrame:
    """`frame` sorted by `by` (groups, ascending), those that fit first, then `key` descending, then
    the tie-break rule; rows equal in all of these keep their order (a stable sort)."""
    if frame.empty:
        return frame
    fit = ["fits"] if "fits" in frame else []
    cols, ascending = list(by) + fit, [True] * len(by) + [False] * len(fit)
    for col, asc in TIE_BREAK:
        if col in frame and col != key:
            cols.append(col)
            ascending.append(asc)
    columns = [frame[c] for c in cols]
    columns.insert(len(by) + len(fit), pd.Series(_merit(frame[key])))
    ascending.insert(len(by) + len(fit), False)
    return frame.iloc[_stable_order(columns, ascending)]


def _stable_order(columns: list[pd.Series], ascending: list[bool]) -> np.ndarray:
    """The stable lexicographic order of rows over `columns` (NaN last), as `DataFrame.sort_values`
    gives it. A text column that comes last (a configuration's label: one per row) is compared only
    among the rows tied on every column before it: sorting 10^6 labels is most of a sort."""
    last_text = columns[-1].dtype.kind not in "biuf"
    head = [k for col, asc in zip(columns[:-1] if last_text else columns, ascending) for k in _sort_keys(col, asc)]
    order = np.lexsort(head[::-1]) if head else np.arange(len(columns[0]))
    if not last_text:
        return order
    tied = np.zeros(len(order), bool)             # in sorted position: equal to the row before on every key
    tied[1:] = np.logical_and.reduce([k[order][1:] == k[order][:-1] for k in head])      # none: all tied
    run = np.cumsum(~tied)                        # the run of equal keys each sorted position belongs to
    in_tie = tied | np.append(tied[1:], False)
    if in_tie.any():
        at = np.flatnonzero(in_tie)
        text = columns[-1].iloc[order[at]].reset_index(drop=True)
        within = np.lexsort(_sort_keys(text, ascending[-1])[::-1] + [run[at]])
        order[at] = order[at][within]
    return order


def _sort_keys(values: pd.Series, ascending: bool) -> list[np.ndarray]:
    """Arrays whose lexicographic order is `values`' sort order (missing values last either way)."""
    if values.dtype.kind in "biuf":
        v = values.to_numpy(dtype=float)
        missing = np.isnan(v)
        v = np.where(missing, 0.0, v)
        return [missing, v if ascending else -v]
    codes, distinct = pd.factorize(values, sort=True)
    missing = codes < 0
    codes = codes if ascending else len(distinct) - 1 - codes
    return [missing, np.where(missing, 0, codes)]


def best_of(frame: pd.DataFrame, by: Sequence[str], key: str = "speedup", n: int = 1) -> pd.DataFrame:
    """The first `n` rows of each group of `by` in the ranked order."""
    if frame.empty:
        return frame
    return ranked(frame, key, by).groupby(list(by), sort=False, dropna=False).head(n)


def best_of_table(table: pd.DataFrame, by: Sequence[str], n: int = 1) -> pd.DataFrame:
    """`best_of(table, by, "speedup", n)` for a scored table, whose `rank` is already this order
    within each profile (`sweep.run` ranks once); `by` holds the profile, or the table is one
    profile's. The first `n` per group are read by rank instead of sorting 10^6 rows again."""
    if table.empty:
        return table
    order = np.argsort(table["rank"].to_numpy(), kind="stable")
    group = table.groupby(list(by), sort=False, dropna=False).ngroup().to_numpy()[order]
    first = pd.Series(group).groupby(group, sort=False).cumcount().to_numpy() < n
    return ranked(table.iloc[order[first]], "speedup", by)      # only the best rows taken, not 10^6


def top_of_table(table: pd.DataFrame, n: int) -> pd.DataFrame:
    """The first `n` rows of each profile of a scored table (its `rank` counts within the profile),
    in the table's order."""
    return table[table["rank"].to_numpy() <= n]


def within_error(value: np.ndarray | float, best: np.ndarray | float, error: np.ndarray | float | None):
    """Whether `value` ties with `best`: best / value - 1 <= error (no error known: equal only)."""
    err = np.nan_to_num(np.asarray(0.0 if error is None else error, dtype=float), nan=0.0)
    value, best = np.asarray(value, dtype=float), np.asarray(best, dtype=float)
    return value * (1.0 + err) >= best * (1.0 - 1e-12)


def ties_with_best(frame: pd.DataFrame, by: Sequence[str], key: str = "speedup",
                   error: str = "heldout_error") -> pd.Series:
    """Per row: how many other rows of its group tie with the group's best (within `error` of it)."""
    if frame.empty:
        return pd.Series(dtype=int)
    group = frame.groupby(list(by), sort=False, dropna=False).ngroup().to_numpy()
    value = frame[key].to_numpy(dtype=float)
    best = np.full(group.max() + 1, np.nan)
    np.fmax.at(best, group, value)              # each group's best, NaN ignored
    err = frame[error] if error in frame else None
    tied = within_error(value, best[group], err)
    return pd.Series(np.bincount(group[tied], minlength=len(best))[group] - 1, index=frame.index)
