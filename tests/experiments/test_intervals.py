"""Every predicted speedup carries its 90% interval and the prompts a run needs to confirm it: the
fidelity judge says how often measurements fell inside, the sweep's best rows carry them."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from common.bundled import bundled
from costmodel import uncertainty
from experiments.bench import intervals
from fidelity import report as fidelity_report
from fidelity import run as fidelity
from profiles.profile import Profile
from sweep import run as sweep
from sweep.executor import LocalExecutor
from tests.experiments.test_fidelity import _runs


@pytest.fixture(scope="module")
def profile() -> Profile:
    return Profile.load(bundled("profiles", "smollm2-135m-cpu.json"))


def test_a_run_of_few_prompts_gets_a_wider_interval_and_the_judge_counts_the_hits(profile):
    pred = pd.DataFrame({"dataset": "lib-edit", "candidate": ["ar", "prompt_lookup g4", "sd g1"],
                         "method": ["ar", "prompt_lookup", "sd"], "predicted_speedup": [1.0, 1.5, 1.02],
                         "predicted_tokens_per_step": [1.0, 2.5, 1.3], "predicted_step_s": [0.1, 0.17, 0.13],
                         "simulated_speedup": [1.0, 1.5, 1.02], "ctx_len": 300.0})
    few, many = (fidelity.predictions_with_intervals(pred, profile, {"lib-edit": n}).set_index("candidate") for n in (2, 200))
    spread, calibrated = profile.prompt_spread("lib-edit", "prompt_lookup")
    half = uncertainty.half_width(profile.heldout_error(), spread * 1.5 / 2.5, 2, calibrated)
    assert few.loc["prompt_lookup g4", "predicted_lo"] == pytest.approx(1.5 / (1 + half))
    assert few.loc["prompt_lookup g4", "predicted_hi"] > many.loc["prompt_lookup g4", "predicted_hi"] > 1.5
    assert many.loc["sd g1", "prompts_to_confirm"] > many.loc["prompt_lookup g4", "prompts_to_confirm"] >= 1
    assert np.isnan(few.loc["ar", "prompts_to_confirm"])
    runs = _runs({"ar": 1.0, "prompt_lookup g4": 1.4, "sd g1": 0.5}, {"ar": 1.0, "prompt_lookup g4": 2.4, "sd g1": 1.2})
    fid = fidelity_report.compare(fidelity.predictions_with_intervals(pred.assign(dataset="mt-bench"), profile, {"mt-bench": 2}),
                                  runs, error=0.1).set_index("candidate")
    assert bool(fid.loc["prompt_lookup g4", "in_interval"]) and not bool(fid.loc["sd g1", "in_interval"])
    (line,) = fidelity_report.interval_lines(fid[fid["method"] != "ar"].reset_index())
    assert line.startswith("- within the predicted 90% interval") and ": 1/2;" in line
    # the prompts' share of the half-width: the same sum without the model's error, NaN where no spread
    alone = uncertainty.half_width(0.0, spread * 1.5 / 2.5, 2, calibrated)
    assert few.loc["prompt_lookup g4", "prompt_half"] == pytest.approx(alone) and alone < half
    assert np.isnan(few.loc["ar", "prompt_half"])
    assert f"{100 * fid.loc[['prompt_lookup g4', 'sd g1'], 'prompt_half'].median():.1f}% alone" in line


def test_the_sweeps_best_rows_carry_their_interval(profile):
    opts = sweep.SweepOptions(methods=["prompt_lookup", "lookahead"], rescore=0, dataset="lib-edit")
    best = sweep.run_sweep([profile], opts, LocalExecutor(workers=1, progress=False)).best.set_index("method")
    assert (best["speedup_lo"] < best["speedup"]).all() and (best["speedup"] < best["speedup_hi"]).all()
    pl = best.loc["prompt_lookup"]
    spread, calibrated = profile.prompt_spread("lib-edit", "prompt_lookup")
    sd = uncertainty.prompt_sd(pl["tokens_per_step"], spread)
    assert pl["speedup_lo"] == pytest.approx(pl["speedup"] / (1 + uncertainty.half_width(
        profile.heldout_error(), sd, None, calibrated)))
    assert pl["prompts_to_confirm"] == uncertainty.prompts_to_resolve(pl["speedup"], sd)


def _fidelity_run(folder, profile_path: str, measured: dict[str, float]) -> None:
    """A finished fidelity run's files: run.json naming its Profile, fidelity.csv, runs.csv of 4 prompts."""
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"argv": ["--profile", profile_path, "--prompts", "libedit:1-4"]}))
    pd.DataFrame({"dataset": "lib-edit", "candidate": ["ar", *measured], "method": ["ar", "prompt_lookup", "sd"],
                  "predicted_speedup": [1.0, 1.5, 1.1], "predicted_tokens_per_step": [1.0, 2.5, 1.3],
                  "measured_speedup": [1.0, *measured.values()]}).to_csv(folder / "fidelity.csv", index=False)
    pd.DataFrame({"dataset": "lib-edit", "prompt_id": [f"libedit/{i}" for i in range(4)]}).to_csv(
        folder / "runs.csv", index=False)


def test_the_interval_bench_prices_every_run_again_and_counts_the_hits(tmp_path, capsys, profile):
    """Two runs on the bundled Profile: one measured inside both intervals, one far outside; a run whose
    Profile is not in the checkout is named and left out."""
    path = str(bundled("profiles", "smollm2-135m-cpu.json"))
    _fidelity_run(tmp_path / "runs" / "good", path, {"prompt_lookup g4": 1.45, "sd g1": 1.08})
    _fidelity_run(tmp_path / "runs" / "bad", path, {"prompt_lookup g4": 4.0, "sd g1": 0.3})
    _fidelity_run(tmp_path / "runs" / "gone", str(tmp_path / "scratch.json"), {"prompt_lookup g4": 1.4, "sd g1": 1.0})
    out = tmp_path / "intervals.csv"
    assert intervals.main(["--runs", str(tmp_path / "runs"), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "good: 2/2 inside (100.0%)" in printed and "bad: 0/2 inside (0.0%)" in printed
    assert "all: 2/4 inside (50.0%)" in printed and "left out, their Profile not in this checkout: 1 run(s)" in printed
    rows = pd.read_csv(out).set_index(["run", "candidate"])
    expected = fidelity.predictions_with_intervals(pd.read_csv(tmp_path / "runs" / "good" / "fidelity.csv"), profile,
                                                   {"lib-edit": 4}).set_index("candidate")
    good = rows.loc[(str(tmp_path / "runs" / "good"), "sd g1")]
    assert good["lo"] == pytest.approx(expected.loc["sd g1", "predicted_lo"])
    assert intervals.main(["--runs", str(tmp_path / "none")]) == 2
