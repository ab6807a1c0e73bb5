"""The sweep's estimate before it builds anything (sweep.estimate): counts equal to the spaces the
sweep builds times costs measured once, a one-line refusal of what will not fit in memory or time,
the guard that stops a sweep past --max-hours, progress only when asked or on a terminal."""
import pandas as pd
import pytest

import methods
from profiles.profile import Profile
from common.errors import InputError
from sweep import estimate, scoring
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
    est = estimate.estimate([profile], opts, sweep.setting_of)
    tables, _ = sweep._score_tables([profile], opts, LocalExecutor(workers=1, progress=False), opts.batch, [])
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
    est = estimate.estimate([profile], opts, sweep.setting_of)
    estimate.check_fits(est, opts, available=est.bytes + 1)
    with pytest.raises(InputError) as refused:
        estimate.check_fits(est, opts, available=est.bytes - 1)
    message = str(refused.value)
    assert "\n" not in message and message.startswith("--budget 64") and f"{est.configurations:,}" in message


def test_long_generations_are_estimated_without_being_priced():
    """--sim-tokens is priced by the cost per token measured once: 10^9 tokens cost as much to estimate as 256."""
    profile = Profile.load(MCSD_PROFILE)
    base = estimate.estimate([profile], sweep.SweepOptions(methods=["sd"], sim_tokens=256), sweep.setting_of)
    long = estimate.estimate([profile], sweep.SweepOptions(methods=["sd"], sim_tokens=10 ** 9), sweep.setting_of)
    assert long.table["work_bytes"].iat[0] > 1000 * base.table["work_bytes"].iat[0]
    assert long.table["work"].iat[0] in ("a simulated generation of", "a served batch of generations of")
    assert long.seconds > 1000 * base.seconds


def test_the_cost_table_prices_every_swept_method_and_rows_times_it_is_the_estimate():
    costs = estimate.load_costs()
    assert set(methods.names(sweep_only=True)) <= set(costs)
    profile = Profile.load(MCSD_PROFILE)
    opts = sweep.SweepOptions(methods=["mcsd"], space={"budget": 16}, rescore=0)
    row = estimate.estimate([profile], opts, sweep.setting_of).table.iloc[0]
    setups = scoring.setups(profile, "mcsd", sweep.setting_of(profile, opts))
    calls = sum(-(-methods.get("mcsd").space_size(setup, budget=16) // estimate.CHUNK_ROWS) for setup in setups)
    assert calls >= row["setups"] >= 1 and costs["mcsd"].score_call_s > 0
    assert row["score_s"] == pytest.approx(row["configurations"] * costs["mcsd"].score_s
                                           + calls * costs["mcsd"].score_call_s)


def test_a_rows_cost_is_measured_apart_from_its_scoring_calls(monkeypatch):
    """A scoring call's fixed work (the method's arrays, the frame) is not charged to its rows: the
    measure recovers a call's and a row's seconds from a clock that charges 10 ms a call and 20 us a
    row (a cost per row alone, on a small sample, had priced MCSD's default space at 15x)."""
    calls = []
    real = scoring.score_task

    def counted(task):
        calls.append(len(task.configs))
        return real(task)

    def clock(work):
        before = len(calls)
        out = work()
        return out, 0, sum(0.010 + 20e-6 * rows for rows in calls[before:])

    monkeypatch.setattr(scoring, "score_task", counted)
    monkeypatch.setattr(estimate, "_measured", clock)
    profile = Profile.load(MCSD_PROFILE)
    opts = sweep.SweepOptions(methods=["mcsd"], space={"budget": 16}, rescore=0)
    setting = sweep.setting_of(profile, opts)
    setup = scoring.setups(profile, "mcsd", setting)[0]
    space = sweep.space_of(methods.get("mcsd"), setup, opts)
    cost = estimate.measure(profile, methods.get("mcsd"), setup, space, setting)
    assert cost.score_s == pytest.approx(20e-6) and cost.score_call_s == pytest.approx(0.010)


def test_a_method_the_table_lacks_is_priced_as_the_dearest(monkeypatch):
    costs = {m: c for m, c in estimate.load_costs().items() if m != "sd"}
    monkeypatch.setattr(estimate, "load_costs", lambda: costs)
    row = estimate.estimate([Profile.load(MCSD_PROFILE)], sweep.SweepOptions(methods=["sd"]), sweep.setting_of).table.iloc[0]
    dearest = max(costs.values(), key=lambda c: c.score_s)
    assert row["score_s"] == pytest.approx(row["configurations"] * dearest.score_s
                                           + row["setups"] * dearest.score_call_s)


def test_a_sweep_that_runs_past_max_hours_stops_in_one_line_before_writing(tmp_path, monkeypatch, capsys):
    """The estimate is only an estimate: the guard stops a sweep between two tasks once --max-hours has
    passed (here, a clock that jumps an hour at every look), nothing written."""
    clock = iter(range(0, 10 ** 6, 3600))
    monkeypatch.setattr(estimate.time, "monotonic", lambda: float(next(clock)))
    code = cli.main(["--methods", "sd", "--rescore", "0", "--profile", MCSD_PROFILE, "--workers", "1",
                     "--max-hours", "1.5", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("error: the sweep ran past --max-hours 1.5 (")
    assert not (tmp_path / "o" / "report.md").exists()


def test_a_sweep_past_max_hours_is_refused_with_its_estimate():
    profile = Profile.load(MCSD_PROFILE)
    opts = sweep.SweepOptions(methods=["sd"], sim_repeats=10 ** 9)
    est = estimate.estimate([profile], opts, sweep.setting_of, workers=2)
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
             "task_s": [100.0], "repeats_s": [4.0]}
    est = estimate.Estimate(pd.DataFrame(table), base_bytes=0, workers=4)
    assert est.phases() == {"the closed forms": 100.0, "the simulator's re-scores": 10.0, "serving the best": 2.5}
    assert est.seconds == 112.5


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
