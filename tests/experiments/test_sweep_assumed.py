"""The sweep prices every method an engine offers on every GPU Profile: rows on ASSUMED acceptance say
so in the tables, best.csv and the report; what a Profile measured is scored as before; bad input is one line."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import methods
from calibrate.assumed import ASSUMED, with_assumed
from experiments import sweep as cli
from common.bundled import bundled
from papers.choices import compare
from profiles.profile import Profile
from sweep import run as sweep_run, scoring
from sweep.executor import LocalExecutor
from sweep.run import bundled_profile_paths
from tests.calibrate.test_assumed import OFFERED, SETTING, gpu_profiles, scored

CORAL_8B = next(str(p) for p in bundled_profile_paths() if p.name.startswith("coral-llama-3-8b"))


def test_assumed_rows_say_so_and_measured_rows_are_untouched():
    priced = [(p, with_assumed(p, methods.names(sweep_only=True))) for p in gpu_profiles()]
    assumed_rows = 0
    for original, profile in priced:
        for method in OFFERED:
            for frame in scored(profile, method):
                entry = profile.acceptance_model(frame["acceptance"].iat[0])
                marked = entry.source.startswith(ASSUMED)
                assert set(frame["acceptance_source"]) == {ASSUMED if marked else "recorded"}
                assumed_rows += marked * len(frame)
                if not marked:           # measured before: the same numbers as on the Profile as it was
                    setup = scoring.setup_of(original, {"drafter": frame["drafter"].iat[0] if frame["drafter"].iat[0] != "-"
                                                        else None, "acceptance": frame["acceptance"].iat[0]})
                    before = scoring.score(setup, method, methods.get(method).space(setup), SETTING)
                    assert np.array_equal(before["speedup"].to_numpy(), frame["speedup"].to_numpy())
    assert assumed_rows > 0



def test_the_sweep_of_a_paper_profile_scores_every_offered_method_and_says_which_are_assumed(tmp_path, capsys):
    out = tmp_path / "out"
    assert cli.main(["--profile", CORAL_8B, "--rescore", "1", "--sim-repeats", "2", "--sim-tokens", "64",
                     "--out", str(out), "--workers", "1", "--no-progress"]) == 0
    best = pd.read_csv(out / "best.csv")
    assert set(OFFERED) <= set(best["method"])
    printed = capsys.readouterr().out
    assert all(f"{r.method} ({r.drafter})" in printed.split("ASSUMED acceptance")[-1]
               for r in best[best["acceptance_source"] == ASSUMED].itertuples())
    sources = dict(zip(best["method"], best["acceptance_source"]))
    assert {sources[m] for m in OFFERED} == {ASSUMED, "recorded"}     # its own method measured, the others not
    report = (out / "report.md").read_text()
    assert "## Assumed acceptance" in report
    for row in best[best["acceptance_source"] == ASSUMED].itertuples():
        assert f"{row.method} (drafter {row.drafter}): ASSUMED: " in report
    not_scored = report.split("## Not scored")[-1]
    assert not any(f"for method {m}\n" in not_scored or f"for method {m}:" in not_scored for m in OFFERED)
    assert cli.main(["--profile", CORAL_8B, "--assumed", "none", "--rescore", "0", "--out", str(tmp_path / "none"),
                     "--workers", "1", "--no-progress"]) == 0
    assert set(pd.read_csv(tmp_path / "none" / "best.csv")["acceptance_source"]) == {"recorded"}


@pytest.mark.parametrize("given,message", [("qwen2.5-0.5b", "is not the target's"),
                                           ("no-such-model", "not a registry architecture or a config.json")])
def test_a_draft_model_of_another_tokenizer_is_one_line_exit_2(given, message, capsys):
    path = str(next(p for p in bundled_profile_paths() if p.name.startswith("glide-vicuna-7b")))
    assert cli.main(["--profile", path, "--draft-model", given, "--out", "/tmp/never-written"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and message in err and "\n" not in err


def test_an_answer_rests_on_measured_acceptance_and_names_a_faster_assumed_one():
    import sweep.deployments as dep
    row = {"profile": "p", "target": "t", "hardware": "h", "dataset": "d", "temperature": 0.0, "batch": 1,
           "oom": 0, "not_served": "", "heldout_error": 0.05, "serving_verdict": "speculate", "fits": True,
           "arrivals": "3 requests (prompt 100, output 128 tokens) arrive together at t = 0, batch limit 1"}
    group = pd.DataFrame([
        {**row, "method": methods.BASELINE, "drafter": "-", "config": methods.BASELINE, "throughput_tok_s": 100.0,
         "acceptance_source": np.nan, "serving_verdict": "-"},
        {**row, "method": "m", "drafter": "a", "config": "m g4", "throughput_tok_s": 200.0, "acceptance_source": "recorded"},
        {**row, "method": "m", "drafter": "b", "config": "m g8", "throughput_tok_s": 300.0, "acceptance_source": ASSUMED}])
    group["throughput_ratio"] = group["throughput_tok_s"] / 100.0
    answer = dep.best_per_batch(group).iloc[0]
    assert answer["config"] == "m g4" and "m g8 (drafter b) would serve 3.00x on ASSUMED acceptance" in answer["why"]
    alone = dep.best_per_batch(group[group["drafter"] != "a"]).iloc[0]     # nothing measured: the assumed, said so
    assert alone["config"] == "m g8" and "its acceptance is ASSUMED" in alone["why"]
    assert dep.stops_paying(group)["stops_paying_at"].isna().all()


def test_a_papers_choice_is_set_against_measured_acceptance_only():
    """CORAL's own choice (N=16 top-2) is compared on the Profiles that recorded CORAL, not on a GLIDE
    Profile where an EAGLE drafter's acceptance is ASSUMED."""
    opts = sweep_run.SweepOptions(methods=["coral"], rescore=0)
    names = ("glide-vicuna-7b-h800.json", "coral-llama-2-7b-a6000.json")
    profiles = sweep_run.with_assumed([Profile.load(bundled("profiles", n)) for n in names], opts)
    result = sweep_run.run_sweep(profiles, opts, LocalExecutor(workers=1), choices=compare)
    assert (result.tables["coral"]["acceptance_source"] == "ASSUMED").any()
    assert list(result.paper_choices["profile"]) == ["coral-llama-2-7b-a6000"]
