"""The sweep's estimate before it builds anything (sweep.estimate): counts equal to the
spaces the sweep builds, a one-line refusal of what will not fit in memory, progress only when asked
or on a terminal."""
import random

import pandas as pd
import pytest

import methods
from profiles.profile import Profile
from common.errors import InputError
from sweep import estimate
from experiments import sweep as cli
from sweep import run as sweep
from common.progress import progress_enabled
from sweep.executor import LocalExecutor
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
    opts = sweep.SweepOptions(methods=["mcsd"], space={"budget": 64})
    est = estimate.estimate([profile], opts, sweep.space_of, sweep.setting_of)
    estimate.check_fits(est, opts, available=est.bytes + 1)
    with pytest.raises(InputError) as refused:
        estimate.check_fits(est, opts, available=est.bytes - 1)
    message = str(refused.value)
    assert "\n" not in message and message.startswith("--budget 64") and f"{est.configurations:,}" in message


def test_long_generations_are_estimated_without_being_priced():
    """--sim-tokens past SAMPLE_TOKENS is estimated from short samples (memory linear in tokens, a
    stream's working set from two sample streams), never priced at its own length."""
    profile = Profile.load(MCSD_PROFILE)
    base = estimate.estimate([profile], sweep.SweepOptions(methods=["sd"], sim_tokens=256), sweep.space_of,
                             sweep.setting_of)
    long = estimate.estimate([profile], sweep.SweepOptions(methods=["sd"], sim_tokens=10 ** 9), sweep.space_of,
                             sweep.setting_of)
    assert long.table["work_bytes"].iat[0] > 1000 * base.table["work_bytes"].iat[0]
    assert long.table["work"].iat[0] == "a simulated generation of"
    assert long.seconds > 1000 * base.seconds


def test_a_cost_per_token_hidden_in_the_noise_of_short_samples_is_still_found(monkeypatch):
    """The vectorised simulator costs ~0.25 us a token over a ~15 ms fixed cost: over STREAM_TOKENS
    the rise is within the timing noise, so the longer sample is lengthened until it shows."""
    noise = random.Random(0)
    fixed, per_token = 0.015, 2.5e-7

    def run(n):
        return lambda: fixed + per_token * n + noise.uniform(0.0, 0.004)   # a shared machine only adds

    monkeypatch.setattr(estimate, "_timed", lambda work: work())
    seconds, _ = estimate._linear_cost(run, estimate.STREAM_TOKENS, 10 ** 9)
    assert seconds == pytest.approx(fixed + per_token * 10 ** 9, rel=0.2)


def test_closed_form_times_flat_within_the_noise_are_not_grown():
    assert estimate._grown([1.0, 1.05, 1.12], list(estimate.LONG_TOKENS), 10 ** 9) == 1.12


def test_the_sweeps_estimate_of_a_long_generation_is_stable_across_measurements():
    """Each closed form is timed on the same rows at every length (rows differ in cost more than
    the lengths do): measured apart, one row set per length, MCSD at 10^9 tokens came out between
    6 s and 3e12 s."""
    profile = Profile.load(MCSD_PROFILE)
    opts = sweep.SweepOptions(methods=["mcsd"], space={"budget": 4}, sim_tokens=10 ** 9, rescore=0)
    seconds = [estimate.estimate([profile], opts, sweep.space_of, sweep.setting_of).table["score_s"].iat[0]
               for _ in range(4)]
    assert max(seconds) < 10 * min(seconds)


def test_a_sweep_past_max_hours_is_refused_with_its_estimate():
    profile = Profile.load(MCSD_PROFILE)
    opts = sweep.SweepOptions(methods=["sd"], sim_repeats=10 ** 9)
    est = estimate.estimate([profile], opts, sweep.space_of, sweep.setting_of, workers=2)
    assert est.phases()["the simulator's re-scores"] == max(est.phases().values())
    with pytest.raises(InputError) as refused:
        estimate.check_fits(est, opts, available=10 ** 15, max_hours=est.seconds / 3600 / 2)
    message = str(refused.value)
    assert message.startswith("--sim-tokens 256 --sim-repeats 1000000000 --rescore 2: the sweep would run ~")
    assert "on 2 worker(s)" in message and "raise --max-hours" in message
    estimate.check_fits(est, opts, available=10 ** 15, max_hours=est.seconds / 3600 * 2)


def test_the_time_estimate_is_shared_by_workers_but_not_below_the_longest_task():
    table = {"profile": ["p"], "method": ["sd"], "setups": [1], "configurations": [10], "bytes": [0],
             "work_bytes": [0], "work": ["-"], "score_s": [100.0], "simulate_s": [40.0], "serve_s": [10.0],
             "chunk_s": [100.0], "repeats_s": [4.0]}
    est = estimate.Estimate(pd.DataFrame(table), base_bytes=0, workers=4)
    assert est.phases() == {"the closed forms": 100.0, "the simulator's re-scores": 10.0, "serving the best": 2.5}
    assert est.seconds == 112.5


def test_growth_is_fitted_past_a_fixed_cost():
    # a + c * n^2 with a fixed cost as large as the growth at the shortest length: a quadratic, not n^0.8
    values = [0.016 + 1e-6 * n ** 2 for n in estimate.LONG_TOKENS]
    assert estimate._grown(values, list(estimate.LONG_TOKENS), 10 ** 5) == pytest.approx(0.016 + 1e-6 * 1e10)
    assert estimate._grown([3.0, 3.01, 3.0], list(estimate.LONG_TOKENS), 10 ** 9) == 3.0      # flat: its value
    assert estimate._linear([10.0, 40.0], [100, 400], 1000) == pytest.approx(100.0)


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
