"""The sweep's estimate before it builds anything (experiments.sweep.estimate): counts equal to the
spaces the sweep builds, a one-line refusal of what will not fit in memory, progress only when asked
or on a terminal."""
import pytest

import methods
from calibrate.profile import Profile
from common.errors import InputError
from experiments.sweep import estimate
from experiments.sweep import cli
from experiments.sweep import run as sweep
from experiments.sweep.executor import LocalExecutor, progress_enabled
from methods.mcsd import count_k_configurations, k_configurations

MCSD_PROFILE = "data/profiles/mcsd-llama-13b-a6000.json"


@pytest.mark.parametrize("budget, choices, depth", [(1, (1, 2), 12), (7, (1, 2, 4), 3), (64, (1, 2, 4, 8, 16, 32), 12),
                                                    (300, (1, 3, 5, 7), 6), (10, (2, 3), 12)])
def test_counting_the_trees_equals_enumerating_them(budget, choices, depth):
    assert count_k_configurations(budget, choices, depth) == len(k_configurations(budget, choices, depth))


def test_a_huge_budget_is_counted_without_enumerating():
    assert count_k_configurations(10 ** 8) > 10 ** 8          # milliseconds; enumerating would not finish


def test_estimate_counts_what_the_sweep_scores():
    profile = Profile.load(MCSD_PROFILE)
    opts = sweep.SweepOptions(methods=["sd", "mcsd", "glide"], space={"budget": 8})
    est = estimate.estimate([profile], opts, sweep.space_of, sweep.setting_of)
    tables = sweep._score_tables([profile], opts, LocalExecutor(workers=1, progress=False), opts.batch, [])
    assert est.configurations == sum(len(t) for t in tables.values()) > 0
    by_method = est.table.set_index("method")["configurations"].to_dict()
    assert by_method == {m: len(t) for m, t in tables.items()}        # glide: no setup, not estimated
    assert est.bytes > est.base_bytes


def test_mcsd_space_size_is_the_space_length_with_both_replacement_modes():
    profile = Profile.load(MCSD_PROFILE)
    spec = methods.get("mcsd")
    for setup in spec.setups(profile):
        assert spec.space_size(setup, budget=16) == len(spec.space(setup, budget=16))


def test_a_sweep_that_will_not_fit_is_refused_in_one_line():
    profile = Profile.load(MCSD_PROFILE)
    est = estimate.estimate([profile], sweep.SweepOptions(methods=["mcsd"], space={"budget": 64}), sweep.space_of, sweep.setting_of)
    estimate.check_fits(est, {"budget": 64}, available=est.bytes + 1)
    with pytest.raises(InputError) as refused:
        estimate.check_fits(est, {"budget": 64}, available=est.bytes - 1)
    message = str(refused.value)
    assert "\n" not in message and message.startswith("--budget 64") and f"{est.configurations:,}" in message


def test_progress_is_quiet_off_a_terminal_unless_asked(tmp_path, capsys):
    assert progress_enabled(True) and not progress_enabled(False)
    argv = ["--methods", "sd", "--budget", "1", "--rescore", "0", "--profile", MCSD_PROFILE, "--workers", "1",
            "--sim-tokens", "16", "--sim-repeats", "1"]
    assert cli.main([*argv, "--out", str(tmp_path / "quiet")]) == 0
    assert "estimate:" not in capsys.readouterr().err          # pytest's stderr is no terminal
    assert cli.main([*argv, "--progress", "--out", str(tmp_path / "asked")]) == 0
    assert "estimate: 48 configurations" in capsys.readouterr().err


def test_estimate_only_prints_per_profile_and_method_and_builds_nothing(tmp_path, capsys):
    code = cli.main(["--estimate-only", "--methods", "mcsd", "--budget", "100000000", "--profile", MCSD_PROFILE,
                       "--out", str(tmp_path / "o")])
    out = capsys.readouterr().out
    assert code == 0 and "mcsd-llama-13b-a6000 / mcsd" in out and "total:" in out
    assert not (tmp_path / "o").exists()
