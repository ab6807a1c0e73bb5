"""The search spaces enumerate exactly the design's catalogue, each configuration once."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from experiments import spaces
from common.errors import InputError


@pytest.mark.parametrize("budget,depth", [(8, 4), (16, 3), (64, 5)])
def test_k_configurations_match_brute_force(budget, depth):
    got = spaces.k_configurations(budget, max_depth=depth)
    brute = [
        k
        for g in range(1, depth + 1)
        for k in itertools.product(spaces.MCSD_K_CHOICES, repeat=g)
        if math.prod(k) <= budget
    ]
    assert len(got) == len(set(got))
    assert [tuple(r[: len(k)]) for r, k in zip(spaces.k_matrix(got), got)] == got
    assert set(got) == set(brute)


def test_mcsd_space_columns_and_both_replacement_modes():
    frame = spaces.mcsd_space(budget=16, max_depth=3)
    assert set(frame.replacement) == {True, False}
    assert (frame.budget <= 16).all()
    row = frame[frame.config == "4x2 w/ repl"].iloc[0]
    assert row.k == "4x2" and row.gamma == 2 and row.budget == 8 and row.tree_tokens == 4 + 8 and row.monotone
    assert not frame[frame.config == "2x4 w/o repl"].iloc[0].monotone
    assert (row.k1, row.k2, row.k3) == (4, 2, 0)
    np.testing.assert_array_equal(spaces.level_matrix(frame[frame.k == "4x2"]), [[4, 2]] * 2)
    with pytest.raises(InputError, match="budget"):
        spaces.mcsd_space(budget=0)


def test_cape_arrays_are_every_nonincreasing_array():
    arrays = spaces.nonincreasing_arrays(11, spaces.CAPE_VALUES)
    m = len(spaces.CAPE_VALUES)
    assert len(arrays) == math.comb(11 + m - 1, m - 1)
    assert (np.diff(arrays, axis=1) <= 0).all()
    assert len({tuple(r) for r in arrays}) == len(arrays)
    frame = spaces.cape_space()
    assert len(frame) == len(arrays) * len(spaces.CAPE_GAMMAS)


def test_lookahead_kangaroo_coral_spaces():
    la = spaces.lookahead_space(prompt_ngrams=(False, True))
    assert {(15, 5, 15, False), (10, 5, 10, True)} <= set(map(tuple, la[["W", "N", "G", "prompt_ngrams"]].values.tolist()))
    assert not spaces.lookahead_space().prompt_ngrams.any()
    assert (la.tokens_per_forward == (la.W + la.G) * (la.N - 1) + 1).all()
    ka = spaces.kangaroo_space(exit_layers=(2, 3))
    assert len(ka) == 2 * len(spaces.KANGAROO_STEPS) * len(spaces.KANGAROO_ETA)
    co = spaces.coral_space()
    assert (co.top_n <= co.groups // 2).all()
    assert ((co.groups == 16) & (co.top_n == 2)).any() and (co.groups == 0).any()


def test_parse_methods():
    assert spaces.parse_methods(None) == list(spaces.METHODS)
    assert spaces.parse_methods("mcsd, sd,mcsd") == ["mcsd", "sd"]
    with pytest.raises(InputError, match="unknown method 'medusa'"):
        spaces.parse_methods("sd,medusa")
