"""experiments.serve_load: bad loads refused in one line before anything is written; the request mix and
its arrivals seeded; one summary for the simulator's requests and the loop's."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import runtime.engine.batch as batch_engine
from common.bundled import bundled
from common.errors import InputError
from campaigns.measure import parse_candidate
from experiments import serve_load
from fidelity import served
from profiles.profile import Profile


def _argv(tmp_path, *extra):
    configs = tmp_path / "configs.txt"
    configs.write_text("ar\nprompt_lookup g5 nmin2 nmax3\n")
    return ["--profile", str(bundled("profiles", "smollm2-135m-cpu.json")), "--target", "smollm2",
            "--prompts", "libedit:59-62", "--configs", str(configs), "--out", str(tmp_path / "o"), *extra]


@pytest.mark.parametrize("extra, message", [
    (("--rates", "x0.3,0"), "error: --rates: arrival rates must be > 0, got '0'"),
    (("--rates", "-2"), "error: --rates: arrival rates must be > 0, got '-2'"),
    (("--max-batch", "0"), "error: --max-batch must be >= 1, got 0"),
])
def test_bad_loads_are_refused_before_anything_is_written(tmp_path, capsys, extra, message):
    assert serve_load.main(_argv(tmp_path, *extra)) == 2
    assert capsys.readouterr().err.strip() == message
    assert not (tmp_path / "o").exists()


def test_an_arrival_trace_whose_times_go_backwards_is_refused(tmp_path, capsys):
    trace = tmp_path / "arrivals.csv"
    pd.DataFrame({"arrival_s": [0.0, 1.5, 1.2]}).to_csv(trace, index=False)
    assert serve_load.main(_argv(tmp_path, "--arrival-trace", str(trace))) == 2
    assert capsys.readouterr().err.strip() == (f"error: --arrival-trace {trace}: arrival times go backwards at row 2 "
                                               "(1.2 s after 1.5 s)")
    assert not (tmp_path / "o").exists()


def _error_line(capsys) -> str:
    """The one error line (loading the model may print its progress on stderr before it)."""
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, errors
    return errors[0]


@pytest.mark.slow
def test_a_prompt_longer_than_the_context_or_a_batch_over_the_cache_budget_is_refused(tmp_path, capsys, monkeypatch):
    assert serve_load.main(_argv(tmp_path, "--context", "100")) == 2
    err = _error_line(capsys)
    assert err.startswith("error: prompt libedit/58 (") and err.endswith(" tokens) and 64 new tokens exceed --context 100")
    assert not (tmp_path / "o").exists()
    monkeypatch.setattr(batch_engine, "memory_available", lambda device: 8 * 2 ** 20)
    assert serve_load.main(_argv(tmp_path, "--max-batch", "64")) == 2
    err = _error_line(capsys)
    assert err.startswith("error: batch 64 at a context of 1024 tokens needs ") and err.endswith("over the cache budget of 8.0 MiB")
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_a_small_load_is_predicted_first_then_served(tmp_path, capsys):
    argv = _argv(tmp_path, "--rates", "0.5,x1", "--requests", "3", "--output-lens", "4,6", "--max-batch", "2",
                 "--sim-repeats", "2", "--context", "512")
    assert serve_load.main(argv) == 0, capsys.readouterr().err
    out = tmp_path / "o"
    predicted, table = pd.read_csv(out / "predictions.csv"), pd.read_csv(out / "served.csv")
    requests, steps = pd.read_csv(out / "requests.csv"), pd.read_csv(out / "steps.csv")
    assert predicted["plain_capacity_req_s"].gt(0).all() and set(predicted["load"]) == {"0.5/s", "x1"}
    assert set(predicted["dataset"]) == {"lib-edit"}          # the prompts' acceptance prices the requests
    assert (out / "predictions.csv").stat().st_mtime <= (out / "requests.csv").stat().st_mtime   # written first
    assert set(zip(table["load"], table["candidate"])) == {(load, c) for load in ("0.5/s", "x1")
                                                           for c in ("ar", "prompt_lookup g5 nmin2 nmax3")}
    assert (table["completed_measured"] == 3).all() and table["throughput_tok_s_measured"].gt(0).all()
    assert np.isfinite(table[[c for c in table if c.endswith("_rel_error")]].to_numpy(float)).all()
    assert len(requests) == 2 * 2 * 3 and (requests["status"] == "done").all()
    assert (requests["generated"] <= requests["output_len"]).all() and (requests["ttft_s"] > 0).all()
    assert (steps["rows"] <= 2).all() and (steps["held_tokens"] <= 3200).all()
    assert table["kv_allocated_mib_max"].gt(0).all()
    text = (out / "report.md").read_text()
    assert "## Against the targets" in text and "## KV memory each method held" in text
    assert "within 2x its spread at" in text and table["tpot_s_p50_spread"].notna().all()


def test_the_mix_and_its_arrivals_are_seeded():
    prompts = [("a", [1] * 10), ("b", [2] * 20), ("c", [3] * 30)]
    one, two = served.request_mix(prompts, 12, [8, 16], 0), served.request_mix(prompts, 12, [8, 16], 0)
    pd.testing.assert_frame_equal(one, two)
    assert set(one["prompt_id"]) <= {"a", "b", "c"} and set(one["output_len"]) <= {8, 16}
    assert dict(zip(one["prompt_id"], one["prompt_len"])) == {k: len(v) for k, v in prompts if k in set(one["prompt_id"])}
    times = served.poisson_arrivals(200, 2.0, 0)
    assert (np.diff(times) >= 0).all() and 200 / times[-1] == pytest.approx(2.0, rel=0.2)
    assert (served.poisson_arrivals(200, 2.0, 0) == times).all()
    with pytest.raises(InputError, match="arrival rates must be > 0"):
        served.parse_rates("x1,0.0")
    assert served.parse_rates("x0.5,2") == [("x", 0.5), ("rate", 2.0)]


def test_a_load_is_priced_on_its_prompts_dataset():
    """Prompt lookup copies far more on lib-edit than on MT-Bench (2.6 against 1.2 tokens a step on the
    bundled Profile): a lib-edit load priced on MT-Bench's acceptance would say it stops paying."""
    profile = Profile.load(bundled("profiles", "smollm2-135m-cpu.json"))
    cand = parse_candidate("prompt_lookup g5 nmin2 nmax3")
    load = pd.DataFrame({"arrival_s": [0.0, 0.5, 1.0, 1.5], "prompt_len": [200] * 4, "output_len": [32] * 4})
    tpot = {d: served.predict_load(profile, cand, load, 2, 3200, 0, 1, d)["tpot_s_p50"] for d in ("lib-edit", "mt-bench")}
    assert tpot["lib-edit"] < 0.7 * tpot["mt-bench"]
    assert served.sim_config(cand, "lib-edit")["dataset"] == "lib-edit"


def test_one_summary_for_predicted_and_measured_requests():
    requests = pd.DataFrame({"arrival_s": [0.0, 1.0, 2.0], "finish_s": [3.0, 4.0, 10.0], "generated": [10, 20, 0],
                             "status": ["done", "done", "oom"], "preemptions": [0, 1, 0],
                             "ttft_s": [1.0, 2.0, np.nan], "tpot_s": [0.1, 0.3, np.nan], "e2e_s": [3.0, 3.0, np.nan]})
    s = served.summarise(requests)
    assert s["throughput_tok_s"] == pytest.approx(30 / 10) and s["completed"] == 2 and s["oom"] == 1
    assert s["tpot_s_p50"] == pytest.approx(0.2) and s["ttft_s_p90"] == pytest.approx(1.9) and s["preemptions"] == 1


def test_a_measured_quantile_carries_its_spread_over_the_loads_requests():
    """Half the requests waited on another's prefill (TPOT 60 ms), half did not (40 ms): the p50 of 24
    moves between the two with which requests a load held; a p50 of 24 equal TPOTs does not move."""
    tpot = np.r_[np.full(12, 0.040), np.full(12, 0.060)]
    requests = pd.DataFrame({"load": "x0.3", "rate": 0.3, "candidate": np.repeat(["ar", "sd"], 24),
                             "status": "done", "ttft_s": 0.5, "e2e_s": 2.0, "tpot_s": np.r_[np.full(24, 0.05), tpot]})
    spread = served.request_spread(requests, seed=0).set_index("candidate")
    assert spread.loc["ar", ["tpot_s_p50_spread", "ttft_s_p90_spread"]].tolist() == pytest.approx([0.0, 0.0], abs=1e-12)
    assert 0.10 < spread.loc["sd", "tpot_s_p50_spread"] < 0.25
    pd.testing.assert_frame_equal(spread, served.request_spread(requests, seed=0).set_index("candidate"))
    measured = pd.DataFrame({"load": "x0.3", "rate": 0.3, "candidate": ["ar", "sd"],
                             **{m: [1.0, 1.0] for m in served.METRICS}})
    predicted = measured.assign(tpot_s_p50=[1.03, 1.20])
    table = served.compare_loads(predicted, measured, served.request_spread(requests, seed=0)).set_index("candidate")
    assert not table.loc["ar", "tpot_s_p50_within_2x_spread"]      # 3% off a quantile that does not move
    assert table.loc["sd", "tpot_s_p50_within_2x_spread"]          # 20% off one that moves by more than 10%
    assert "throughput_tok_s_spread" not in table                  # a rate over the whole span: not resampled
    assert served.requests_to_resolve(0.10, 24, 0.05) == 384 and np.isnan(served.requests_to_resolve(np.nan, 24, 0.05))


ROOT = bundled("profiles").parents[1]


def test_a_served_run_priced_again_is_the_bundled_repredicted_example(tmp_path):
    """--repredict: the served run's own loads, measured figures kept, predictions from the other Profile."""
    from experiments import examples

    argv = list(examples.EXAMPLES["served_load_smollm2_b32"][1])
    argv[argv.index("--out") + 1] = str(tmp_path / "o")
    assert serve_load.main(argv) == 0
    bundled_run = ROOT / "examples" / "served_load_smollm2_b32"
    again, committed = pd.read_csv(tmp_path / "o" / "served.csv"), pd.read_csv(bundled_run / "served.csv")
    pd.testing.assert_frame_equal(again, committed, check_exact=False, rtol=1e-9)
    source = pd.read_csv(ROOT / "examples" / "served_load_smollm2" / "served.csv")
    measured = [c for c in source.columns if c.endswith("_measured")]
    pd.testing.assert_frame_equal(again[measured], source[measured])          # what was served, untouched
    assert "Predicted after the measurement" in (tmp_path / "o" / "report.md").read_text()
    costs = pd.read_csv(tmp_path / "o" / "step_costs.csv")        # where the time goes, per load and configuration
    prefill = costs[costs["what"] == "prefill, per request admitted"]
    assert len(prefill) == len(committed) and (prefill["n_predicted"] == 24).all() and (prefill["n_measured"] == 24).all()
    one_row = costs[costs["what"] == "decode step, 1 row(s)"]
    assert (one_row["n_measured"] > 0).all() and one_row["rel_error"].notna().all()


def test_a_repredict_of_what_is_not_a_served_run_or_of_loads_that_differ_is_refused(tmp_path, capsys):
    profile = str(bundled("profiles", "batch", "smollm2-135m-cpu-batch32.json"))
    assert serve_load.main(["--repredict", str(tmp_path), "--profile", profile, "--out", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err.strip() == (f"error: --repredict {tmp_path}: not a finished run of "
                                               "experiments.serve_load (its manifest.json)")
    run = ROOT / "examples" / "served_load_smollm2"
    assert serve_load.main(["--repredict", str(run), "--profile", profile, "--out", str(run), "--overwrite"]) == 2
    assert capsys.readouterr().err.strip() == (f"error: --out {run} is the run priced again: write beside it, "
                                               "not over its measurement")
    assert (run / "served.csv").is_file()
    requests = pd.read_csv(ROOT / "examples" / "served_load_smollm2" / "requests.csv")
    requests.loc[requests.index[-1], "arrival_s"] += 1.0
    requests.to_csv(tmp_path / "requests.csv", index=False)
    for name in ("served.csv", "steps.csv"):
        (tmp_path / name).write_text((run / name).read_text())
    with pytest.raises(InputError, match="load x1.5 served 'prompt_lookup g5 nmin2 nmax3' other requests or arrivals"):
        served.measured_run(tmp_path)


def test_a_served_run_without_its_load_options_needs_them(tmp_path, capsys):
    assert serve_load.main(["--profile", str(bundled("profiles", "smollm2-135m-cpu.json")), "--out",
                            str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err.strip() == "error: --target, --prompts, --configs required (unless --repredict RUN)"
