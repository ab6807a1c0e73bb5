"""experiments.fidelity and campaigns.measure: held-out checks, the comparison, regret, prompt specs."""
from __future__ import annotations

import json

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import methods
from profiles.parts import EngineTerms, Provenance
from profiles.profile import Profile
from common.bundled import bundled
from common.errors import InputError
from experiments import fidelity as fidelity_cli
from fidelity import report as fidelity_report
from fidelity import run as fidelity
from calibrate.checks import dataset_of
from campaigns.measure import Candidate, parse_candidate, rates


@pytest.fixture(scope="module")
def profile() -> Profile:
    return Profile.load(bundled("profiles", "smollm2-135m-cpu.json"))


def test_candidates_parse_labels_with_drafters():
    cand = parse_candidate("mcsd k4x2 norepl @vanilla")
    assert cand.config == methods.parse_label("mcsd k4x2 norepl") and cand.drafter == "vanilla"
    assert cand.label == "mcsd k4x2 norepl @vanilla"
    assert parse_candidate("lookahead W5 N3 G5").drafter is None


def test_held_out_prompts_are_enforced(profile):
    calibrated = Profile.from_dict({**profile.to_dict(), "provenance": {"calibration_prompts": ["mtbench/81"]}})
    fidelity.check_held_out(calibrated, ["mtbench/82"])
    with pytest.raises(InputError, match="prompts mtbench/81 were used to calibrate"):
        fidelity.check_held_out(calibrated, ["mtbench/81", "mtbench/82"])
    with pytest.raises(InputError, match="does not list its calibration prompts"):
        fidelity.check_held_out(Profile.from_dict({**profile.to_dict(), "provenance": {}}), ["mtbench/82"])


def test_prompt_sets_map_to_profile_datasets(profile):
    assert dataset_of(profile, "mtbench") == "mt-bench"
    with pytest.raises(InputError, match="matches no dataset"):
        dataset_of(profile, "gsm8k")


def test_top_selection_measures_each_setups_predicted_best(profile):
    from sweep import scoring

    top = fidelity.default_candidates(profile, "code-edit", 200, 3, 32, select="top")
    spread = fidelity.default_candidates(profile, "code-edit", 200, 3, 32)
    assert top[0].method == spread[0].method == "ar" and len(top) == len(spread)
    setting = scoring.Setting(temperature=0.0, ctx_len=200, dataset="code-edit", new_tokens=32)
    spec = methods.get("prompt_lookup")
    setup = profile.setups_for(spec, temperature=0.0, dataset="code-edit")[0]
    ranked = scoring.score(setup, spec.name, spec.space(setup), setting).sort_values("speedup", ascending=False)
    distinct = ranked[~ranked[["speedup", "tokens_per_step"]].round(6).duplicated()]   # priced alike: measured once
    best3 = [c.label for c in spec.configs_of(distinct.iloc[:3])]
    assert [c.label for c in top if c.method == "prompt_lookup"] == best3
    assert [c.label for c in spread if c.method == "prompt_lookup"] != best3     # the spread reaches the worst
    assert len(distinct) < len(ranked)                                           # there were twins to skip
    with pytest.raises(InputError, match="unknown selection 'best'"):
        fidelity.default_candidates(profile, "code-edit", 200, 3, 32, select="best")


def _runs(speedups: dict[str, float], tokens_per_step: dict[str, float], repeats=3, prompts=2) -> pd.DataFrame:
    """Generations whose decode tokens/s over ar are `speedups` (ar: 10 tokens/s), with a 2% wobble by
    repeat, each after a 0.5 s prefill (the same for every method: speedups must leave it out)."""
    rows = []
    for r in range(repeats):
        for cand, speedup in speedups.items():
            for p in range(prompts):
                tokens = 40
                tps = 10 * speedup * (1 + 0.02 * (r - 1)) if cand != "ar" else 10.0
                rows.append({"candidate": cand, "method": cand.split()[0], "drafter": "-", "repeat": r,
                             "dataset": "mt-bench", "prompt_id": f"p{p}", "tokens": tokens, "seconds": 0.5 + tokens / tps,
                             "decode_s": tokens / tps, "steps": tokens / tokens_per_step[cand]})
    return pd.DataFrame(rows)


def test_compare_regret_and_verdicts():
    measured = {"ar": 1.0, "sd g4": 1.2, "sd g1": 0.9}
    per_step = {"ar": 1.0, "sd g4": 2.0, "sd g1": 1.2}
    runs = _runs(measured, per_step)
    per = rates(runs)
    assert per.loc[per["candidate"] == "sd g4", "speedup"].median() == pytest.approx(1.2)
    pred = pd.DataFrame({"dataset": "mt-bench", "candidate": ["ar", "sd g4", "sd g1"], "method": ["ar", "sd", "sd"],
                         "predicted_speedup": [1.0, 1.26, 1.02], "predicted_tokens_per_step": [1.0, 2.0, 1.2],
                         "predicted_step_s": [0.1, 0.1 * 2.0 / 1.26, 0.1 * 1.2 / 1.02],
                         "simulated_speedup": [1.0, 1.25, 1.0], "ctx_len": 100.0})
    fid = fidelity_report.compare(pred, runs, error=0.03)
    row = fid.set_index("candidate")
    assert row.loc["sd g4", "rel_error"] == pytest.approx(0.05)
    assert row.loc["sd g4", "acceptance_error"] == pytest.approx(0.0)
    assert row.loc["sd g4", "latency_error"] == pytest.approx(0.05)
    assert row.loc["sd g4", "spread"] == pytest.approx(0.02)
    assert row.loc["sd g4", "predicted_verdict"] == "speculate" and not row.loc["sd g4", "verdict_flip"]
    assert row.loc["sd g1", "predicted_verdict"] == "tie" and not row.loc["sd g1", "verdict_flip"]
    reg = fidelity_report.regret(fid)
    assert reg.loc[0, "picked"] == "sd g4" and reg.loc[0, "regret"] == pytest.approx(0.0)
    (line,) = fidelity_report.winners(fid[fid["method"] != "ar"])
    assert line.startswith("- measured above 1.05x: 1/2 (mt-bench 1/2 (best 1.20x)); closed form on those: "
                           "median |error| 5.0%, worst 5.0%"), line
    # a flip: predicted to gain 10% where the measurement loses
    pred.loc[2, "predicted_speedup"] = 1.10
    fid = fidelity_report.compare(pred, runs, error=0.03)
    assert bool(fid.set_index("candidate").loc["sd g1", "verdict_flip"])
    pred.loc[2, "predicted_speedup"] = 1.5                  # now the pick, measured 0.9 against 1.2
    assert fidelity_report.regret(fidelity_report.compare(pred, runs, 0.03)).loc[0, "regret"] == pytest.approx(0.25)
    # a tie does not speculate: within a 60% held-out error nothing is "speculate", so the verdicts pick ar
    tied = fidelity_report.regret(fidelity_report.compare(pred, runs, 0.6)).loc[0]
    assert tied["picked"] == "sd g1" and tied["verdict_pick"] == "ar"
    assert tied["verdict_regret"] == pytest.approx(1 - 1 / 1.2)
    # the baseline across windows: the Profile's calibration-window plain step beside this run's
    calibrated = type("P", (), {"engine": EngineTerms.of({"fit": {"reference": {"mt-bench": {"ar_step_s": 0.0688, "ctx_len": 90.0}}}})})
    [line] = fidelity_report.drift(fid, calibrated)
    assert "68.8 ms at context 90" in line and f"{1e3 * fid.iloc[0]['measured_step_s']:.1f} ms measured" in line


def test_pooled_runs_judge_each_prediction_against_the_spread_across_runs():
    """--pool: a second run of the same command, measured 10% faster, joins the first; the speedup
    is the median over both runs' repeats, the spread and run_spread span the runs, the report says
    so; a run of other prompts is refused."""
    per_step = {"ar": 1.0, "sd g4": 2.0}
    first, second = _runs({"ar": 1.0, "sd g4": 1.2}, per_step, repeats=2), _runs({"ar": 1.0, "sd g4": 1.32}, per_step, repeats=2)
    pred = pd.DataFrame({"dataset": "mt-bench", "candidate": ["ar", "sd g4"], "method": ["ar", "sd"],
                         "predicted_speedup": [1.0, 1.26], "predicted_tokens_per_step": [1.0, 2.0],
                         "predicted_step_s": [0.1, 0.1 * 2.0 / 1.26], "simulated_speedup": [1.0, 1.26], "ctx_len": 100.0})
    alone = fidelity_report.compare(pred, first, error=0.03).set_index("candidate").loc["sd g4"]
    assert alone["runs"] == 1 and alone["run_spread"] == 0.0 and alone["spread"] == pytest.approx(0.01, rel=0.02)
    both = fidelity_report.pool_runs(first, {"again": second})
    assert sorted(both["repeat"].unique()) == [0, 1, 2, 3] and set(both["run"]) == {0, 1}
    fid = fidelity_report.compare(pred, both, error=0.03)
    row = fid.set_index("candidate").loc["sd g4"]
    medians = np.array([1.2 * 0.99, 1.32 * 0.99])       # each run's median repeat (a 2% wobble, 2 repeats)
    assert row["runs"] == 2 and row["n"] == 4
    assert row["run_spread"] == pytest.approx((medians[1] - medians[0]) / 2 / medians.mean())
    assert row["measured_speedup"] == pytest.approx(np.median([1.2 * 0.98, 1.2, 1.32 * 0.98, 1.32]))
    assert row["spread"] > 4 * alone["spread"]                            # the runs' gap, not one run's wobble
    [line] = fidelity_report.pooled(fid[fid["method"] != "ar"], type("A", (), {"pool": [Path("again")]}))
    assert "Measured in 2 runs" in line and "--pool` again" in line and f"median {100 * row['run_spread']:.1f}%" in line
    assert fidelity_report.pooled(fidelity_report.compare(pred, first, 0.03), None) == []
    with pytest.raises(InputError, match="--pool elsewhere: measured other prompts than this run"):
        fidelity_report.pool_runs(first, {"elsewhere": second.assign(prompt_id=second["prompt_id"] + "x")})
    with pytest.raises(InputError, match="other configurations"):
        fidelity_report.pool_runs(first, {"elsewhere": second[second["candidate"] == "ar"]})


def test_simulator_agreement_is_judged_against_its_seed_noise():
    spec = pd.DataFrame({"sim_vs_closed": [0.004, -0.012, 0.03], "sim_se": [0.003, 0.007, 0.005]})
    line = fidelity_report.agreement(spec)
    assert "median |gap| 1.2%, max 3.0%" in line
    assert "within 1%: 1/3" in line and "within 2 seed standard errors (median 0.50%): 2/3" in line
    assert "within 1%" not in fidelity_report.agreement(spec.assign(sim_se=np.nan))   # predicted before sim_se existed


def test_the_pooled_ratio_standard_error_matches_its_spread_over_seeds():
    """The delta-method standard error of sum(ar) / sum(decode) against the ratio's spread over
    2000 independent sets of 50 streams; fails if it is computed on the per-stream ratios' spread
    alone or without the sqrt(n)."""
    from sweep.scoring import pooled_ratio_se

    rng = np.random.default_rng(0)
    def streams():
        decode = rng.gamma(20.0, 0.05, 50)                     # streams of varying length
        return decode * 0.4 * (1 + 0.15 * rng.standard_normal(50)), decode
    ratios = [a.sum() / d.sum() for a, d in (streams() for _ in range(2000))]
    predicted = np.median([pooled_ratio_se(*streams()) for _ in range(200)])
    assert predicted == pytest.approx(np.std(ratios) / np.mean(ratios), rel=0.1)
    assert np.isnan(pooled_ratio_se(np.ones(1), np.ones(1)))


def test_decode_seconds_come_from_the_step_traces():
    from campaigns.measure import decode_seconds

    runs = _runs({"ar": 1.0, "sd g4": 1.2}, {"ar": 1.0, "sd g4": 2.0}, repeats=1, prompts=1)
    steps = pd.DataFrame({"dataset": "mt-bench", "candidate": ["ar", "ar", "sd g4"], "run_id": ["ar#0", "ar#0", "sd g4#0"],
                          "prompt_id": "p0", "draft_s": [0.0, 0.0, 1.0], "verify_s": [1.5, 2.0, 1.0],
                          "overhead_s": [0.25, 0.25, 0.5]})
    got = decode_seconds(runs, steps).set_index("candidate")["decode_s"]
    assert got["ar"] == pytest.approx(4.0) and got["sd g4"] == pytest.approx(2.5)
    with pytest.raises(InputError, match="do not cover every measured generation"):
        decode_seconds(runs, steps[steps["candidate"] == "ar"])
    with pytest.raises(InputError, match="no decode_s"):
        rates(runs.drop(columns=["decode_s"]))


def test_rates_need_a_baseline():
    runs = _runs({"ar": 1.0, "sd g4": 1.2}, {"ar": 1.0, "sd g4": 2.0})
    with pytest.raises(InputError, match="no plain decoding"):
        rates(runs[runs["candidate"] != "ar"])


def test_fidelity_refuses_bad_options_before_loading_a_model(tmp_path, capsys, profile):
    path = tmp_path / "p.json"
    Profile.from_dict({**profile.to_dict(), "provenance": {"calibration_prompts": ["mtbench/81"]}}).save(path)
    argv = ["--profile", str(path), "--target", "smollm2", "--out", str(tmp_path / "o")]
    assert fidelity_cli.main(argv + ["--prompts", "mtbench:1"]) == 2
    assert "were used to calibrate" in capsys.readouterr().err
    assert fidelity_cli.main(argv + ["--prompts", "mtbench:2-3", "--repeats", "0"]) == 2
    assert "--repeats must be >= 1" in capsys.readouterr().err
    assert fidelity_cli.main(argv + ["--prompts", "mtbench:2-3", "--configs", str(tmp_path / "none.txt")]) == 2
    assert "--configs file not found" in capsys.readouterr().err


def test_every_generation_runs_beside_plain_decoding_of_its_prompt():
    """campaigns.measure on a tiny model: paired runs, ar first or second by turns, and rates
    dividing each generation by its own partner."""
    from campaigns.measure import Bench, decode_seconds

    bench = Bench("tiny", {}, ".", threads=1)
    cands = [Candidate(methods.get("ar").config()), Candidate(methods.parse_label("lookahead W3 N2 G2")),
             Candidate(methods.parse_label("lookahead W4 N3 G2"))]
    prompts = [("mtbench", "p0", [1, 2, 3, 4]), ("mtbench", "p1", [5, 6, 7])]
    runs, steps = bench.measure(cands, prompts, repeats=2, max_new_tokens=5, log=lambda _m: None)
    assert len(runs) == 2 * 2 * 2 * 2            # (2 speculative x 2 prompts) pairs x 2 generations x 2 repeats
    spec, plain = runs[runs["method"] != "ar"], runs[runs["method"] == "ar"]
    assert sorted(spec["pair"]) == sorted(plain["pair"]) == list(range(8))
    partner = plain.set_index("pair")["prompt_id"]
    assert (spec["prompt_id"].to_numpy() == spec["pair"].map(partner).to_numpy()).all()
    first = runs.groupby("pair")["method"].first()
    assert set(first) == {"ar", "lookahead"}      # ar first or second by turns
    assert set(steps["pair"]) == set(range(8)) and steps.loc[steps["method"] == "ar", "run_id"].nunique() == 8
    assert decode_seconds(runs, steps)["decode_s"].to_numpy() == pytest.approx(runs["decode_s"].to_numpy())
    # a partner that ran 1.5x slower halves nothing but its own pair's speedup
    slowed = runs.copy()
    slowed.loc[(slowed["method"] == "ar") & (slowed["pair"] == 0), "decode_s"] *= 1.5
    per, per_slow = rates(runs).set_index(["candidate", "repeat"]), rates(slowed).set_index(["candidate", "repeat"])
    moved = (per_slow["speedup"] / per["speedup"] - 1).abs() > 1e-9
    assert moved.sum() == 1 and per_slow.loc[("ar", 0), "speedup"] == pytest.approx(1.0)
    with pytest.raises(InputError, match="no plain-decoding partner"):
        rates(runs[~((runs["method"] == "ar") & (runs["pair"] == 3))])
    unpaired, _ = bench.measure(cands, prompts[:1], repeats=1, max_new_tokens=3, log=lambda _m: None, paired=False)
    assert list(unpaired["pair"]) == [-1, -1, -1] and list(unpaired["method"]) == ["ar", "lookahead", "lookahead"]
    # pair ids count per dataset (each dataset is measured by its own call)
    twice = pd.concat([runs, runs.assign(dataset="humaneval")], ignore_index=True)
    assert rates(twice).groupby("dataset")["speedup"].sum().to_numpy() == pytest.approx(
        [rates(runs)["speedup"].sum()] * 2)
    # the report states the drift the pairs saw within the run: plain steps of 10 ms everywhere
    # (this machine's own wander left out) but pair 0's, 1.5x slower
    steady = runs.copy()
    plain_rows = steady["method"] == "ar"
    steady.loc[plain_rows, "decode_s"] = 0.01 * steady.loc[plain_rows, "steps"] * np.where(steady.loc[plain_rows, "pair"] == 0, 1.5, 1.0)
    [line] = fidelity_report.drift(pd.DataFrame({"method": []}), type("P", (), {"engine": EngineTerms()}), steady)
    assert "over 8 pairs" in line and "worst 1.00-1.50x" in line


def test_repredict_judges_a_finished_run_again_and_keeps_its_first_predictions(tmp_path, capsys):
    """--report-only --repredict: the run's configurations predicted again from the Profile, the
    predictions made before the measurement kept once (predictions_first.csv), the report saying so."""
    run_dir = Path(__file__).resolve().parents[2] / "examples" / "smollm2_fidelity"
    recorded = json.loads((run_dir / "run.json").read_text())["argv"]
    prompts = recorded[recorded.index("--prompts") + 1]
    pred = pd.read_csv(run_dir / "predictions.csv")
    keep = ["ar", *[c for c in pred["candidate"].drop_duplicates() if c != "ar"][:2]]
    pred = pred[pred["candidate"].isin(keep)]
    runs = pd.read_csv(run_dir / "runs.csv")
    runs = runs[runs["candidate"].isin(keep)]
    out = tmp_path / "run"
    out.mkdir()
    pred.to_csv(out / "predictions.csv", index=False)
    runs.to_csv(out / "runs.csv", index=False)
    argv = ["--profile", str(bundled("profiles", "smollm2-135m-cpu.json")), "--target", "smollm2",
            "--prompts", prompts, "--out", str(out)]
    (out / "manifest.json").write_text(json.dumps({"cli": "experiments.fidelity", "status": "ok",
                                                   "files": ["predictions.csv", "runs.csv"]}))
    assert fidelity_cli.main(argv + ["--repredict"]) == 2
    assert "give --report-only too" in capsys.readouterr().err
    first = pred.copy()
    pred.assign(predicted_speedup=pred["predicted_speedup"] * 2).to_csv(out / "predictions.csv", index=False)
    assert fidelity_cli.main(argv + ["--report-only", "--repredict", "--sim-repeats", "20"]) == 0
    kept = pd.read_csv(out / "predictions_first.csv")
    assert kept["predicted_speedup"].to_numpy() == pytest.approx(2 * first["predicted_speedup"].to_numpy())
    again = pd.read_csv(out / "predictions.csv")
    assert list(again["candidate"]) == list(first["candidate"])
    assert not np.allclose(again["predicted_speedup"], 2 * first["predicted_speedup"])   # made again, not the doubled
    report = (out / "report.md").read_text()
    assert "Predictions made again after the measurement" in report
    # the header describes the run that measured, not this command's defaults (48 tokens, 3 repeats)
    assert f"; {runs['tokens'].max()} new tokens each" in report
    assert f"+ ar, {runs['repeat'].nunique()} interleaved repeats" in report
    assert fidelity_cli.main([*argv[:5], "mtbench:26-29,humaneval:26-29", *argv[6:], "--report-only"]) == 2  # not the run's
    assert "the run in" in capsys.readouterr().err
    assert fidelity_cli.main(argv + ["--report-only", "--repredict", "--sim-repeats", "20"]) == 0
    assert pd.read_csv(out / "predictions_first.csv").equals(kept)           # the first ones are never replaced
    assert "predictions_first.csv" in json.loads((out / "manifest.json").read_text())["files"]  # --overwrite clears it
    # a fresh run in the folder (run.json without "repredicted") does not take a left-over file for its own
    (out / "run.json").write_text(json.dumps({"minutes": 1.0}))
    assert fidelity_cli.main(argv + ["--report-only"]) == 0
    assert "Predictions made again" not in (out / "report.md").read_text()
    # --pool: another run of the same command joins this one's measurement
    again = tmp_path / "again"
    again.mkdir()
    runs.to_csv(again / "runs.csv", index=False)
    assert fidelity_cli.main(argv + ["--report-only", "--pool", str(again)]) == 2      # no predictions.csv there
    assert f"--pool {again}: needs predictions.csv" in capsys.readouterr().err
    first.to_csv(again / "predictions.csv", index=False)
    assert fidelity_cli.main(argv + ["--pool", str(again)]) == 2
    assert "--pool works on a finished run: give --report-only too" in capsys.readouterr().err
    assert fidelity_cli.main(argv + ["--report-only", "--pool", str(again)]) == 0
    pooled = pd.read_csv(out / "fidelity.csv")
    assert (pooled["runs"] == 2).all() and (pooled["n"] == 2 * runs["repeat"].nunique()).all()
    assert (pooled["run_spread"] < 1e-9).all()             # the same runs twice: no spread between them
    assert f"Measured in 2 runs of this command, pooled (`--pool` {again})" in (out / "report.md").read_text()


def test_a_prompt_built_from_a_calibration_prompts_source_is_not_held_out():
    class Calibrated:
        name = "p"
        provenance = Provenance(calibration_prompts=("HumanEval/0", "mtbench/81"))

    fidelity.check_held_out(Calibrated, ["codeedit/5", "mtbench/82"])
    with pytest.raises(InputError, match="codeedit/163 were used to calibrate 'p', or share their source"):
        fidelity.check_held_out(Calibrated, ["codeedit/163"])


def test_a_drafter_trained_with_another_vocabulary_than_its_profile_is_refused():
    import torch

    from campaigns.measure import check_draft_vocab
    from runtime.drafters.vanilla import build_vanilla
    from runtime.models import tiny_model

    target = tiny_model(0)
    reduced = build_vanilla(target, 1, torch.arange(16))
    check_draft_vocab("vanilla", {"draft_vocab": 16}, reduced, "v.safetensors")
    with pytest.raises(InputError, match="drafts over 16 token.s.; its Profile entry was calibrated with a draft "
                                         "vocabulary of every token"):
        check_draft_vocab("vanilla", {}, reduced, "v.safetensors")
    with pytest.raises(InputError, match="drafts over every token"):
        check_draft_vocab("vanilla", {"draft_vocab": 8}, build_vanilla(target, 1), "v.safetensors")


def test_the_report_says_when_answers_ended_before_the_length_priced():
    from types import SimpleNamespace

    runs = pd.DataFrame({"method": ["ar", "ar", "ar", "prompt_lookup"], "prompt_id": ["a", "b", "c", "a"],
                         "tokens": [256, 71, 189, 70]})
    (line,) = fidelity_report.length_lines(runs, SimpleNamespace(sim_tokens=256, max_new_tokens=256))
    assert line.startswith("- answers: 2 of 3 prompts' plain-decoding answers ended before the 256 tokens priced")
    assert "(71-189 tokens" in line
    assert fidelity_report.length_lines(runs, SimpleNamespace(sim_tokens=64, max_new_tokens=256)) == []
