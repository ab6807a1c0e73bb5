"""experiments.smollm2_cpu: the SmolLM2 campaign's CLI checks and the pieces of its tables."""
import json
from pathlib import Path

import pandas as pd
import pytest

import methods
from experiments import smollm2_cpu as smollm2_cli
from campaigns import smollm2 as smollm2_cpu
from campaigns import smollm2_profile
from campaigns.smollm2_report import decode_rate
from common.errors import InputError
from traces.schema import read_trace


def test_unknown_stage_and_bad_numbers_are_one_line_exit_2(capsys, tmp_path):
    assert smollm2_cli.main(["--stages", "latency,nope", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == "error: unknown stage 'nope' (known: latency, tokens, chains, steps, profile, best, tables)"
    assert smollm2_cli.main(["--limit", "0", "--out", str(tmp_path)]) == 2


def test_a_missing_drafter_names_the_training_command(tmp_path):
    args = smollm2_cli.build_parser().parse_args(["--drafters", str(tmp_path)])
    with pytest.raises(InputError, match="python -m training router"):
        smollm2_cpu.drafter_file(args, "coral-router")
    with pytest.raises(InputError, match="python -m training glide"):
        smollm2_cpu.drafter_file(args, "glide")


def test_runs_are_labelled_by_their_configs_and_priced_without_a_trained_router():
    labels = [run.label for run in smollm2_cpu.RUNS]
    assert len(set(labels)) == len(labels) and "mcsd k2x2x1 repl" in labels and "coral g4 N16 top2" in labels
    for run in smollm2_cpu.RUNS:
        assert run.drafter is None or run.drafter in smollm2_cpu.DRAFTERS
        assert methods.parse_label(run.label) == run.config
    routed = smollm2_cpu.CHAIN_RUNS["coral-router"]
    assert routed.priced.label == "coral g4"              # the router is part of the drafter's latency
    assert smollm2_cpu.CHAIN_RUNS["coral"].priced == smollm2_cpu.CHAIN_RUNS["coral"].config


def test_decode_rate_is_wall_clock_per_committed_token():
    steps = pd.DataFrame({"draft_s": [0.1, 0.2], "verify_s": [0.3, 0.3], "overhead_s": [0.0, 0.1],
                          "accepted": [3, 1], "ctx_len": [100, 103]})
    per_token, per_step, ctx = decode_rate(steps)
    assert per_token == pytest.approx(1.0 / 4) and per_step == 2.0 and ctx == 101.5


BUNDLED_TRACES = Path("data/traces/smollm2-cpu")
BUNDLED_PROFILE = Path("data/profiles/smollm2-135m-cpu.json")
BUNDLED_REPORT = Path("examples/smollm2_cpu")


FIT_REL = 1e-4       # what the rebuilt fits are held to: far below any figure reported (0.1%), far above their noise


@pytest.mark.skipif(not BUNDLED_PROFILE.exists(), reason="no bundled SmolLM2 recording")
@pytest.mark.slow      # re-runs the campaign's profile and tables stages (minutes)
def test_bundled_profile_and_tables_follow_from_the_bundled_traces(tmp_path):
    """Re-running the profile and tables stages on the committed traces gives the committed Profile
    (provenance aside) and the committed measured/predicted tables."""
    profile, report = tmp_path / "p.json", tmp_path / "report"
    assert smollm2_cli.main(["--stages", "profile,tables", "--out", str(BUNDLED_TRACES), "--profile", str(profile),
                             "--report", str(report)]) == 0
    fresh, bundled = json.loads(profile.read_text()), json.loads(BUNDLED_PROFILE.read_text())
    fresh.pop("provenance"), bundled.pop("provenance")
    assert fresh.keys() == bundled.keys() and fresh["acceptance"].keys() == bundled["acceptance"].keys()
    # within what the fits resolve, not bit for bit: a maximum-likelihood fit (prompt lookup's chain) and
    # the engine's least squares stop within their tolerances where the CPU's floating-point paths
    # take them (one alpha read 0.1545773652 on one machine, 0.1545768868 on another: 3e-6 apart)
    for key in fresh["acceptance"]:
        assert fresh["acceptance"][key]["alpha"] == pytest.approx(bundled["acceptance"][key]["alpha"], rel=FIT_REL)
    assert fresh["workload"].keys() == bundled["workload"].keys()
    for dataset, entry in bundled["workload"].items():     # spreads: standard deviations rounded to 4 places
        got = fresh["workload"][dataset]
        assert got.keys() == entry.keys() and got.get("spread_prompts") == entry.get("spread_prompts")
        assert got.get("prompt_spread", {}) == pytest.approx(entry.get("prompt_spread", {}), rel=FIT_REL, abs=2e-4)
        assert (got["prompt_tokens"], got["new_tokens"]) == pytest.approx((entry["prompt_tokens"], entry["new_tokens"]))
    for method, calibration in bundled["engine"]["methods"].items():      # the engine calibration refits
        assert fresh["engine"]["methods"][method] == pytest.approx(calibration, rel=FIT_REL, abs=1e-9)
    assert fresh["engine"]["fit"]["heldout"]["per_config"] == pytest.approx(
        bundled["engine"]["fit"]["heldout"]["per_config"], abs=FIT_REL)
    for name in ("measured_vs_predicted.csv", "acceptance.csv"):
        got, want = pd.read_csv(report / name), pd.read_csv(BUNDLED_REPORT / name)
        pd.testing.assert_frame_equal(got, want, check_exact=False, rtol=FIT_REL)
    table = pd.read_csv(BUNDLED_REPORT / "measured_vs_predicted.csv")
    assert {run.label for run in smollm2_cpu.RUNS} <= set(table["run"])
    assert table.loc[table["run"] != "ar", "simulator_error"].notna().all()
    text = (report / "README.md").read_text()        # the best are claimed as measured only where stage best ran
    recorded = (BUNDLED_TRACES / "best_runs.json").exists()
    assert ("recorded each of them for real" in text) == recorded and ("Predicted here only" in text) == (not recorded)


@pytest.mark.skipif(not (BUNDLED_TRACES / "best_runs.json").exists(), reason="no recorded best")
def test_lookahead_is_fitted_on_its_calibration_configurations_and_the_recorded_best():
    """The bundled Profile's lookahead entry is the pool fitted on the calibration configurations' steps
    (2 prompts) and the recorded best's (12 prompts): dropping the best's moves it (its alpha 0.27 -> 0.36)."""
    args = smollm2_cli.build_parser().parse_args(["--out", str(BUNDLED_TRACES)])
    own = [run for run in smollm2_cpu.RUNS if run.method == "lookahead"]
    steps = {(run, "code-edit"): read_trace(smollm2_cpu.step_path(args, run.label, "code-edit"), kind="step")[0]
             for run in own}
    frame, paths = smollm2_profile.own_steps(args, "lookahead", "code-edit", steps)
    assert [p.name for p in paths[len(own):]] == ["steps_best-lookahead-W1-N2-G2_code-edit.parquet"]
    assert {f"codeedit/{i}" for i in range(12)} <= set(frame["prompt_id"])
    fitted = methods.get("lookahead").fit_steps(frame, dataset="code-edit", temperature=0.0, source="test")
    bundled = json.loads(BUNDLED_PROFILE.read_text())["acceptance"]["lookahead/code-edit"]["lookahead"]
    assert {k: round(v, 5) for k, v in fitted["lookahead"].items()} == pytest.approx(bundled, rel=FIT_REL, abs=1e-5)


def test_sweep_rows_become_engine_runs():
    run = lambda **row: smollm2_cpu.best_run(pd.DataFrame([row]))   # noqa: E731
    cape = run(method="cape", drafter="vanilla", gamma=1, bins=(8,) * 11)
    assert (cape.label, cape.drafter) == ("best cape g1 S88888888888", "vanilla")
    coral = run(method="coral", drafter="coral-router", gamma=2, groups=0, top_n=0)
    assert coral.config.to_dict() == {"gamma": 2, "groups": 16, "top_n": 2} and coral.priced.label == "coral g2"
    assert run(method="lookahead", drafter="-", W=4, N=2, G=8).drafter is None
    with pytest.raises(InputError, match="untrained"):
        run(method="coral", drafter="coral", gamma=2, groups=8, top_n=2)


def test_best_runs_read_back(tmp_path):
    (tmp_path / "best_runs.json").write_text(json.dumps({"mt-bench": [
        {"label": "best mcsd k8 repl", "method": "mcsd", "config": {"k": [8], "replacement": True},
         "drafter": "vanilla", "sweep_config": "mcsd k8 repl"}]}))
    args = smollm2_cli.build_parser().parse_args(["--out", str(tmp_path)])
    best, = smollm2_cpu.best_runs(args)["mt-bench"]
    assert best.label == "best mcsd k8 repl" and best.config.k == (8,)


class _FakeBench:
    """measure(): every candidate on every prompt, one 2-token step each; plain decoding (the first
    candidate) at 0.1 s a step, the others at 0.1 s times their position."""

    def __init__(self, *args, **kwargs):
        pass

    def encode(self, prompts):
        return [(p.dataset, p.prompt_id, [1, 2]) for p in prompts]

    def measure(self, cands, prompts, *, repeats, max_new_tokens, log, first_pair=0):
        rows, pair = [], first_pair
        for (prompt_set, pid, _), (i, cand) in ((p, c) for p in prompts for c in enumerate(cands[1:], 1)):
            for j in (0, i):
                rows.append({"candidate": cands[j].label, "dataset": prompt_set, "run_id": f"{cands[j].label}#0",
                             "pair": pair, "method": cands[j].method, "config": "{}", "prompt_id": pid, "step": 0,
                             "ctx_len": 10, "draft_forwards": 0, "draft_s": 0.0, "verify_tokens": 1,
                             "verify_s": 0.1 * max(j, 1), "overhead_s": 0.0, "accepted": 2 if j else 1,
                             "accept_mask": [], "confidences": [], "mode": "eager"})
            pair += 1
        return pd.DataFrame(), pd.DataFrame(rows)


def recording_bench(asked: list) -> type:
    """_FakeBench that appends the prompt sets of every encode() call to `asked`."""

    class Recording(_FakeBench):
        def encode(self, prompts):
            asked.append(sorted({p.dataset for p in prompts}))
            return super().encode(prompts)

    return Recording


def test_the_recorded_best_are_measured_beside_plain_decoding_kept_apart_from_the_ar_trace(tmp_path, monkeypatch):
    """Stage best's runs get their own plain partners (in steps_best-partners_*), the report divides
    each by its partners, and a best trace whose partners are gone is one clear error."""
    from campaigns import smollm2_report
    from traces.schema import read_trace

    monkeypatch.setattr(smollm2_cpu, "Bench", _FakeBench)
    monkeypatch.setattr(smollm2_report, "RUNS", [smollm2_cpu.PLAIN_RUN])
    args = smollm2_cli.build_parser().parse_args(["--out", str(tmp_path), "--limit", "2"])
    plain = smollm2_cpu.PLAIN_RUN
    for dataset in smollm2_cpu.DATASETS:     # the calibration's ar traces: 0.2 s a step, pairs 0..9
        rows = _FakeBench().measure([plain, plain], [("x", "p", [])] * 10, repeats=1, max_new_tokens=1, log=print,
                                    first_pair=0)[1].iloc[::2]          # the partners' rows alone
        smollm2_cpu.write_steps(args, plain, dataset, rows.assign(verify_s=0.2).drop(columns=["candidate", "dataset"]))
    sd, lookup = smollm2_cpu.best_run(pd.DataFrame([{"method": "sd", "drafter": "-", "gamma": 1}])), \
        smollm2_cpu.best_run(pd.DataFrame([{"method": "prompt_lookup", "drafter": "-", "gamma": 3, "n_min": 1,
                                            "n_max": 2}]))
    measured = smollm2_cpu.measure_beside_plain(args, [sd, lookup], "humaneval:2", print)
    assert set(measured) == {(plain, "humaneval"), (sd, "humaneval"), (lookup, "humaneval")}
    assert measured[sd, "humaneval"]["pair"].min() == 10            # after the recorded pairs
    for (run, dataset), rows in measured.items():
        smollm2_cpu.write_steps(args, run, dataset, rows,
                                smollm2_cpu.best_partners_path(args, dataset) if run == plain else None)
    assert len(read_trace(smollm2_cpu.step_path(args, "ar", "humaneval"), "step")[0]) == 10   # the ar trace untouched
    assert len(read_trace(smollm2_cpu.best_partners_path(args, "humaneval"), "step")[0]) == 4
    monkeypatch.setattr(smollm2_report, "best_runs", lambda args: {"humaneval": [sd, lookup]})
    table = smollm2_report.measured_runs(args, "humaneval").set_index("run")
    # partners at 0.1 s a token; sd at 0.1 s for 2 tokens, prompt lookup at 0.2 s for 2: 2x and 1x
    # (over the ar trace's 0.2 s a token they would read 4x and 2x)
    assert table.loc[sd.label, "measured_speedup"] == pytest.approx(2.0)
    assert table.loc[lookup.label, "measured_speedup"] == pytest.approx(1.0)
    smollm2_cpu.best_partners_path(args, "humaneval").unlink()
    with pytest.raises(InputError, match="plain decoding is in no trace"):
        smollm2_report.measured_runs(args, "humaneval")


def test_stage_steps_measures_only_the_datasets_that_miss_a_trace(tmp_path, monkeypatch):
    """A dataset added to the campaign is recorded on its own calibration prompts; the others' traces
    stay as they were (not measured again, not overwritten)."""
    asked = []
    monkeypatch.setattr(smollm2_cpu, "Bench", recording_bench(asked))
    sd = smollm2_cpu.Run(methods.parse_label("sd g1"), "vanilla")
    monkeypatch.setattr(smollm2_cpu, "RUNS", [smollm2_cpu.PLAIN_RUN, sd])
    args = smollm2_cli.build_parser().parse_args(["--out", str(tmp_path)])
    old = [d for d in smollm2_cpu.DATASETS if d != "lib-edit"]
    rows = _FakeBench().measure([smollm2_cpu.PLAIN_RUN, sd], [("x", "p", [])], repeats=1, max_new_tokens=1, log=print,
                                first_pair=0)[1].drop(columns=["candidate", "dataset"])
    for dataset in old:
        for run in smollm2_cpu.RUNS:
            smollm2_cpu.write_steps(args, run, dataset, rows)
    recorded = {path: path.read_bytes() for path in tmp_path.glob("steps_*.parquet")}
    smollm2_cpu.stage_steps(args, print)
    assert asked == [["libedit"]]
    assert all(path.read_bytes() == content for path, content in recorded.items())
    assert all(smollm2_cpu.step_path(args, run.label, "lib-edit").exists() for run in smollm2_cpu.RUNS)
