"""profiles.acceptance: the typed acceptance entry of a Profile and its validation."""
import numpy as np
import pytest

from calibrate.fit_acceptance import leave_one_k_out
from profiles.acceptance import AcceptanceModel, AlphaCurve, MarkovAcceptance
from common.errors import InputError

FULL = {
    "drafter": "llama-68m", "temperature": 0.0, "dataset": "alpaca",
    "alpha": 0.76,
    "alpha_by_position": [0.8, 0.75, 0.7],
    "alpha_at_k": {"1": 0.76, "2": 0.81, "4": 0.85, "8": 0.88},
    "alpha_at_k_without_replacement": {"1": 0.76, "2": 0.83},
    "conf_bins": {"freq": [0.0, 0.05, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.15, 0.1, 0.1],
                  "topk_hit": {"1": [0.1 * b for b in range(11)], "4": [min(1, 0.1 * b + 0.2) for b in range(11)]}},
    "markov": {"p_aa": 0.85, "p_ra": 0.4},
    "lookahead": {"alpha": 0.425, "f": 3.106},
    "source": "test",
}


def test_accessors():
    m = AcceptanceModel.from_dict(FULL, "k")
    assert m.alpha == 0.76
    assert np.allclose(m.beta(5), [0.8, 0.75, 0.7, 0.7, 0.7])
    assert np.allclose(m.beta(2), [0.8, 0.75])
    assert m.alpha_at(4) == 0.85
    assert m.alpha_at(32) > 0.88                       # not flat past the largest recorded k: the points rise
    logit = lambda p: np.log(p / (1 - p))              # noqa: E731
    assert logit(m.alpha_at(3)) == pytest.approx(logit(0.81) + (logit(0.85) - logit(0.81)) * np.log2(1.5))
    assert np.allclose(m.alpha_at(np.array([1, 2])), [0.76, 0.81])
    assert m.alpha_at(2, without_replacement=True) == 0.83
    assert m.conf_bins.table().shape == (2, 11)
    assert m.conf_bins.hit(4)[0] == pytest.approx(0.2)
    assert m.part("lookahead").f == 3.106
    assert m.markov.stationary_alpha == pytest.approx(0.4 / (1 - 0.85 + 0.4))


def test_alpha_curve_extrapolates_on_the_slope_of_its_points():
    """logit(alpha@k) linear in log k: through two points exactly, past the last on their slope; flat
    only where the points say so (equal values) or where one point says nothing."""
    logit = lambda p: np.log(p / (1 - p))              # noqa: E731
    two = AlphaCurve.of({1: 0.49, 4: 0.67})
    slope = (logit(0.67) - logit(0.49)) / np.log(4)
    assert two(np.array([1.0, 4.0])).tolist() == pytest.approx([0.49, 0.67])
    assert logit(float(two(32))) == pytest.approx(logit(0.67) + slope * np.log(8))
    assert float(AlphaCurve.of({1: 0.5, 4: 0.5})(32)) == pytest.approx(0.5)
    assert float(AlphaCurve.of({1: 0.5})(32)) == pytest.approx(0.5)
    assert float(AlphaCurve.of({1: 0.6, 4: 0.5})(32)) == pytest.approx(0.5)     # never falls with more candidates
    assert float(AlphaCurve.of({1: 0.0, 2: 0.0})(2)) == 0.0                      # a recorded 0 stays 0


def test_leave_one_k_out_reads_each_k_from_the_others():
    table = {1: 0.1, 2: 0.13, 4: 0.17, 8: 0.22, 16: 0.28, 32: 0.36}
    fit = leave_one_k_out(table)
    assert fit["k"] == [2, 4, 8, 16, 32] and len(fit["rel_error"]) == 5
    rest = {k: v for k, v in table.items() if k != 32}
    assert fit["rel_error"][-1] == pytest.approx(float(AlphaCurve.of(rest)(32)) / 0.36 - 1, abs=1e-4)
    assert fit["max"] == pytest.approx(max(abs(e) for e in fit["rel_error"]), abs=1e-4)
    assert leave_one_k_out({1: 0.5, 4: 0.7}) == {}


def test_persistence_shrinks_the_miss_with_depth():
    m = AcceptanceModel.from_dict({"temperature": 0.0, "alpha": 0.6, "persistence": 0.9})
    assert np.allclose(m.beta(3), [0.6, 1 - 0.4 * 0.9, 1 - 0.4 * 0.81])
    assert np.allclose(AcceptanceModel.from_dict({"temperature": 0.0, "alpha": 0.6}).beta(3), 0.6)
    assert AcceptanceModel.from_dict(m.to_dict()).persistence == 0.9
    with pytest.raises(InputError, match="persistence must be a positive number"):
        AcceptanceModel.from_dict({"temperature": 0.0, "alpha": 0.6, "persistence": 0})


def test_round_trip():
    m = AcceptanceModel.from_dict(FULL, "k")
    again = AcceptanceModel.from_dict(m.to_dict(), "k")
    assert again.to_dict() == m.to_dict()


def test_alpha_falls_back_to_alpha_at_1_then_markov_then_lookahead():
    assert AcceptanceModel.from_dict({"temperature": 0.0, "alpha_at_k": {"1": 0.6, "2": 0.7}}).alpha == 0.6
    assert AcceptanceModel.from_dict({"temperature": 0.0, "markov": {"p_aa": 0.5, "p_ra": 0.5}}).alpha == pytest.approx(0.5)
    assert AcceptanceModel.from_dict({"temperature": 0.0, "lookahead": {"alpha": 0.425, "f": 3.1}}).alpha == 0.425
    assert np.allclose(AcceptanceModel.from_dict({"temperature": 0.0, "alpha": 0.3}).beta(3), 0.3)


def test_markov_sampling_matches_stationary_alpha():
    chain = MarkovAcceptance(0.9, 0.2)
    draws = chain.sample(200_000, np.random.default_rng(0))
    p = chain.stationary_alpha
    assert abs(draws.mean() - p) < 5 * np.sqrt(p * (1 - p) / 200_000 * (1 + 0.7) / (1 - 0.7))  # lag-1 corr 0.7
    after_accept = draws[1:][draws[:-1]]
    assert after_accept.mean() == pytest.approx(0.9, abs=0.01)


@pytest.mark.parametrize("bad,message", [
    ({"alpha": 1.3}, "alpha = 1.3 is outside"),
    ({"alpha": -0.1}, "alpha = -0.1 is outside"),
    ({"alpha": "high"}, "alpha must be a number"),
    ({"alpha": 0.5, "alpha_by_position": [0.5, 2.0]}, r"alpha_by_position\[1\] = 2.0 is outside"),
    ({"alpha_at_k": {"1": 0.5, "2": 1.5}}, r"alpha_at_k\[2\] = 1.5 is outside"),
    ({"alpha_at_k": {"x": 0.5}}, "keys must be positive integers"),
    ({"alpha": 0.5, "conf_bins": {"freq": [0.1] * 10, "topk_hit": {"1": [0.5] * 11}}}, "must have 11 entries"),
    ({"alpha": 0.5, "conf_bins": {"freq": [1.0] + [0] * 10, "topk_hit": {"1": [0.5] * 10 + [1.1]}}},
     r"topk_hit\[1\]\[10\] = 1.1 is outside"),
    ({"markov": {"p_aa": 0.5}}, "markov needs"),
    ({"lookahead": {"alpha": 0.4, "f": 0.9}}, r"lookahead.f must be a number in \[1, inf\], got 0.9"),
    ({"lookahead": {"alpha": 1.4, "f": 2}}, r"lookahead.alpha must be a number in \[0, 1\], got 1.4"),
    ({"alpha": 0.5, "temperature": -1}, "temperature"),
    ({}, "has no alpha"),
    ({"alpha": 0.5, "alpha_by_position_at_gamma": {"0": [0.5]}}, "keys must be draft lengths >= 1"),
    ({"alpha": 0.5, "alpha_by_position_at_gamma": {"1": [0.5, 0.4]}}, r"\[1\] lists 2 positions for chains of 1"),
    ({"alpha": 0.5, "alpha_by_position_at_gamma": [0.5]}, "must map draft lengths"),
])
def test_bad_input_is_one_line_naming_the_field(bad, message):
    with pytest.raises(InputError, match=message) as info:
        AcceptanceModel.from_dict({"temperature": 0.0, **bad}, "m")
    assert "\n" not in str(info.value) and "'m'" in str(info.value)


def test_chains_of_a_recorded_length_use_their_own_positions():
    """beta(gamma) reads the chains of that gamma where recorded (the last position repeating where
    a chain's later positions were never reached), else the shortest longer chains recorded, else
    the general per-position record."""
    m = AcceptanceModel.from_dict({"temperature": 0.0, **FULL, "alpha_by_position_at_gamma": {"1": [0.9], "3": [0.85, 0.8]}}, "m")
    assert np.allclose(m.beta(1), [0.9])
    assert np.allclose(m.beta(3), [0.85, 0.8, 0.8])
    assert np.allclose(m.beta(2), [0.85, 0.8])                      # not recorded: the chains of 3
    assert np.allclose(m.beta(4), [0.8, 0.75, 0.7, 0.7])            # none longer: alpha_by_position
    again = AcceptanceModel.from_dict(m.to_dict(), "m")
    assert np.allclose(again.beta(3), m.beta(3)) and np.allclose(again.beta(1), [0.9])


def test_bad_queries():
    m = AcceptanceModel.from_dict({"temperature": 0.0, "alpha": 0.5, "alpha_at_k": {"2": 0.6, "4": 0.7}}, "m")
    with pytest.raises(InputError, match="gamma must be an integer >= 1"):
        m.beta(0)
    with pytest.raises(InputError, match="from k = 2"):
        m.alpha_at(1)
    with pytest.raises(InputError, match="no alpha_at_k_without_replacement"):
        m.alpha_at(2, without_replacement=True)


@pytest.mark.parametrize("raw, message", [
    ({"alpha_at_k": {"1": 0.6, "2": 0.5}}, r"alpha_at_k falls from 0.6 at 1 to 0.5 at 2; more candidates cannot"),
    ({"alpha": 0.5, "alpha_at_k_without_replacement": {"1": 0.5, "4": 0.4}}, "alpha_at_k_without_replacement falls"),
    ({"alpha": 0.5, "dataset": ["mt-bench"]}, r"dataset must be a string, got \['mt-bench'\]"),
    ({"alpha": 0.5, "drafter": 3}, "drafter must be a string, got 3"),
])
def test_physically_impossible_acceptance_is_refused(raw, message):
    with pytest.raises(InputError, match=message):
        AcceptanceModel.from_dict({"temperature": 0.0, **raw}, name="x")


def test_an_entry_without_a_temperature_is_refused_not_read_as_greedy():
    """GLIDE's T = 1 alphas once priced and labelled as greedy when an entry left its temperature out."""
    with pytest.raises(InputError, match="'glide' states no temperature: give the sampling temperature"):
        AcceptanceModel.from_dict({"alpha": 0.8, "drafter": "glide"}, name="glide")
    assert AcceptanceModel.from_dict({"alpha": 0.8, "temperature": 1.0}, name="glide").temperature == 1.0


def test_a_top_k_hit_that_falls_with_k_is_refused():
    freq = [1 / 11] * 11
    bins = {"freq": freq, "topk_hit": {"1": [0.5] * 11, "2": [0.6] * 10 + [0.4]}}
    with pytest.raises(InputError, match="conf_bins.topk_hit of bin 10 falls from 0.5 at 1 to 0.4 at 2"):
        AcceptanceModel.from_dict({"temperature": 0.0, "alpha": 0.5, "conf_bins": bins}, name="x")
    assert AcceptanceModel.from_dict({"temperature": 0.0, "alpha": 0.5, "dataset": None}, name="x").dataset == ""
