"""The sweep's one order (`sweep.ranking.ranked`) is `DataFrame.sort_values` over its keys, stable,
missing values last, whatever the row order, ties on every number broken by the label."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sweep import ranking


def _by_pandas(frame: pd.DataFrame, key: str, by: list[str]) -> pd.DataFrame:
    """The order spelled out with pandas: the rule of `sweep.ranking`'s docstring."""
    cols = by + ["fits", "__merit"] + [c for c, _ in ranking.TIE_BREAK if c in frame and c != key]
    ascending = [True] * len(by) + [False, False] + [a for c, a in ranking.TIE_BREAK if c in frame and c != key]
    keyed = frame.assign(__merit=ranking._merit(frame[key]))
    return keyed.sort_values(cols, ascending=ascending, kind="stable", na_position="last").drop(columns="__merit")


def _table(seed: int, n: int = 3000) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    speed = rng.choice([0.9, 1.1, 1.1 + 1e-12, 1.25, np.nan], n)          # equal to 9 digits: one merit
    labels = np.array([f"m k{i % 97}" for i in range(n)], dtype=object)
    return pd.DataFrame({"profile": rng.choice(["b", "a", "c"], n), "fits": rng.random(n) < 0.8,
                         "speedup": speed, "verified_per_step": rng.choice([1.0, 2.0, np.nan], n),
                         "draft_cost": rng.choice([0.1, 0.2], n), "drafter": rng.choice(["x", "-", None], n),
                         "config": rng.permutation(labels)}, index=rng.permutation(n) + 100)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("by", [[], ["profile"]])
def test_ranked_is_the_stable_sort_its_rule_names(seed, by):
    frame = _table(seed)
    pd.testing.assert_frame_equal(ranking.ranked(frame, "speedup", by), _by_pandas(frame, "speedup", by))


def test_labels_break_only_the_ties_left_by_every_number():
    frame = pd.DataFrame({"fits": True, "speedup": [1.2, 1.2, 1.5, 1.2], "verified_per_step": 2.0,
                          "draft_cost": [0.1, 0.1, 0.3, 0.05], "drafter": "-", "config": ["b", "a", "z", "c"]})
    assert list(ranking.ranked(frame)["config"]) == ["z", "c", "a", "b"]


def _scored(seed: int) -> pd.DataFrame:
    """A table as the sweep keeps it: each profile's rows ranked, `rank` counting within the profile."""
    table = ranking.ranked(_table(seed), "speedup", ["profile"]).reset_index(drop=True)
    table["heldout_error"] = np.where(table["profile"] == "a", np.nan, 0.05)
    return table.assign(rank=table.groupby("profile").cumcount() + 1)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("n", [1, 2])
def test_best_of_a_ranked_table_reads_the_rank_as_ranking_would_sort(seed, n):
    table = _scored(seed)
    by = ["profile", "drafter"]
    pd.testing.assert_frame_equal(ranking.best_of_table(table, by, n), ranking.best_of(table, by, n=n))


@pytest.mark.parametrize("seed", [0, 1])
def test_ties_count_the_rows_within_the_error_of_their_groups_best(seed):
    table = _scored(seed)
    best = table.groupby("profile")["speedup"].transform("max")
    tied = ranking.within_error(table["speedup"], best, table["heldout_error"])
    spelled = pd.Series(tied, index=table.index).groupby(table["profile"]).transform("sum").astype(int) - 1
    pd.testing.assert_series_equal(ranking.ties_with_best(table, ["profile"]), spelled, check_names=False)
