"""The methods' search spaces (`spec.space`) enumerate exactly the design's catalogue, each
configuration once, within what the setup records."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import methods
from common.errors import InputError
from methods import cape, coral, kangaroo, mcsd
from tests.experiments.test_sweep import toy_profile


@pytest.fixture(scope="module")
def toy():
    return toy_profile()


def _setup(profile, method):
    return profile.setups_for(methods.get(method))[0]


@pytest.mark.parametrize("budget,depth", [(8, 4), (16, 3), (64, 5)])
def test_k_configurations_match_brute_force(budget, depth):
    got = mcsd.k_configurations(budget, max_depth=depth)
    brute = [k for g in range(1, depth + 1) for k in itertools.product(mcsd.K_CHOICES, repeat=g)
             if math.prod(k) <= budget]
    assert len(got) == len(set(got))
    assert [tuple(r[: len(k)]) for r, k in zip(mcsd.k_matrix(got), got)] == got
    assert set(got) == set(brute)


def test_mcsd_space_columns_and_both_replacement_modes(toy):
    frame = methods.get("mcsd").space(_setup(toy, "mcsd"), budget=16, max_depth=3)
    assert set(frame.replacement) == {True, False}
    assert (frame.budget <= 16).all()
    row = frame[frame.config == "mcsd k4x2 repl"].iloc[0]
    assert row.k == (4, 2) and row.gamma == 2 and row.budget == 8 and row.tree_tokens == 4 + 8 and row.monotone
    assert not frame[frame.config == "mcsd k2x4 norepl"].iloc[0].monotone
    assert (row.k1, row.k2, row.k3) == (4, 2, 0)
    np.testing.assert_array_equal(mcsd.level_matrix(frame[frame.k == (4, 2)]), [[4, 2]] * 2)
    with pytest.raises(InputError, match="budget"):
        methods.get("mcsd").space(_setup(toy, "mcsd"), budget=0)


def test_cape_arrays_are_every_nonincreasing_array(toy):
    arrays = cape.nonincreasing_arrays(11, cape.VALUES)
    m = len(cape.VALUES)
    assert len(arrays) == math.comb(11 + m - 1, m - 1)
    assert (np.diff(arrays, axis=1) <= 0).all()
    assert len({tuple(r) for r in arrays}) == len(arrays)
    frame = methods.get("cape").space(_setup(toy, "cape"))      # the toy records top-1, 2, 4, 8 hits
    assert len(frame) == math.comb(11 + 3, 3) * len(cape.GAMMAS)
    assert set(np.unique(np.stack(frame.bins))) == {1, 2, 4, 8}


def test_lookahead_kangaroo_coral_spaces(toy):
    la = methods.get("lookahead").space(_setup(toy, "lookahead"), prompt_ngrams=(False, True))
    assert {(15, 5, 15, False), (10, 5, 10, True)} <= set(map(tuple, la[["W", "N", "G", "prompt_ngrams"]].values.tolist()))
    assert not methods.get("lookahead").space(_setup(toy, "lookahead")).prompt_ngrams.any()
    assert (la.tokens_per_forward == (la.W + la.G) * (la.N - 1) + 1).all()
    ka = methods.get("kangaroo").space(_setup(toy, "kangaroo"))
    assert len(ka) == len(kangaroo.STEPS) * len(kangaroo.ETAS) and (ka.exit_layer == 2).all()
    co = methods.get("coral").space(_setup(toy, "coral"))
    assert (co.top_n <= co.groups // 2).all() and len(co) == 6 * len(coral.DEPTHS)
    assert ((co.groups == 16) & (co.top_n == 2)).any() and (co.groups == 0).any()


def test_parse_methods():
    assert methods.parse_methods(None) == methods.names(sweep_only=True)
    assert methods.parse_methods("mcsd, sd,mcsd") == ["mcsd", "sd"]
    with pytest.raises(InputError, match="unknown method 'medusa'"):
        methods.parse_methods("sd,medusa")
