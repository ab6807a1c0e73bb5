"""experiments.simulate and experiments.bench.simulator command lines: outputs and one-line errors."""
import json

import pandas as pd
import pytest

from experiments import simulate
from experiments.bench import simulator as bench_simulator

PROFILE = "data/profiles/glide-vicuna-7b-h800.json"
SD = '{"gamma": 4, "drafter": "llama-68m", "dataset": "gsm8k"}'


def test_stream_writes_outputs(tmp_path):
    rc = simulate.main(["stream", "--profile", PROFILE, "--method", "sd", "--config", SD, "--n-tokens", "200",
                        "--repeats", "3", "--per-step", "--out", str(tmp_path)])
    assert rc == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["streams"] == 3 and summary["speedup_mean"] > 1
    assert len(pd.read_csv(tmp_path / "steps.csv")) > 0


@pytest.mark.slow
def test_serve_writes_csv_summary_and_plots(tmp_path):
    rc = simulate.main(["serve", "--profile", PROFILE, "--method", "sd", "--config", SD, "--rates", "2,6",
                        "--duration", "10", "--replicas", "2", "--per-step", "--out", str(tmp_path)])
    assert rc == 0
    for name in ("requests.csv", "summary.json", "steps.csv", "latency_cdf.png", "throughput_vs_load.png"):
        assert (tmp_path / name).stat().st_size > 0
    assert set(pd.read_csv(tmp_path / "requests.csv")["offered_rate"]) == {2.0, 6.0}


def test_crossover_report(tmp_path):
    rc = simulate.main(["crossover", "--profile", PROFILE, "--batches", "1,8", "--prompt-len", "32",
                        "--output-len", "32", "--out", str(tmp_path)])
    assert rc == 0
    text = (tmp_path / "README.md").read_text()
    assert "crossover.png" in text and (tmp_path / "crossover.png").exists()


def test_bad_input_exits_2_with_one_line(tmp_path, capsys):
    cases = [
        ["serve", "--profile", PROFILE, "--method", "ar", "--rates", "0", "--out", str(tmp_path)],
        ["serve", "--profile", PROFILE, "--method", "ar", "--rates", "-2", "--out", str(tmp_path)],
        ["serve", "--profile", PROFILE, "--method", "ar", "--max-batch", "0", "--out", str(tmp_path)],
        ["stream", "--profile", str(tmp_path / "missing.json"), "--method", "ar", "--out", str(tmp_path)],
        ["stream", "--profile", PROFILE, "--method", "sd", "--config", "{bad", "--out", str(tmp_path)],
        ["serve", "--profile", PROFILE, "--method", "sd", "--config", '{"gamma": 0}', "--out", str(tmp_path)],
        ["serve", "--profile", PROFILE, "--method", "sd", "--acceptance-spread", "-1", "--out", str(tmp_path)],
        ["serve", "--profile", PROFILE, "--method", "sd", "--acceptance-spread", "wide", "--out", str(tmp_path)],
    ]
    for argv in cases:
        assert simulate.main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and "\n" not in err


def test_a_batch_past_the_profiles_measured_tables_is_refused_before_anything_is_written(tmp_path, capsys):
    """SmolLM2's CPU Profile measured its target at batch 1-2: crossover at batch 4 and serving at the default
    --max-batch 32 are refused in one line naming the option and the batches measured; batch 2 runs."""
    cpu = "data/profiles/smollm2-135m-cpu.json"
    out = tmp_path / "o"
    for argv, option in ((["crossover", "--batches", "1,4"], "--batches"), (["serve", "--method", "ar"], "--max-batch")):
        assert simulate.main([*argv, "--profile", cpu, "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"error: {option}: ar on 'smollm2-135m on this CPU (project recordings)' is priced by "
                              "latency tables measured up to batch 2") and "\n" not in err and not out.exists()
    configs = '{"prompt_lookup g3": ["prompt_lookup", {"gamma": 3}]}'
    assert simulate.main(["crossover", "--profile", cpu, "--batches", "1,2", "--configs", configs, "--prompt-len", "32",
                          "--output-len", "16", "--out", str(out)]) == 0


def test_profile_without_needed_latency_model(tmp_path, capsys):
    raw = json.loads(open(PROFILE).read())
    del raw["latency"]["llama-68m"]
    path = tmp_path / "p.json"
    path.write_text(json.dumps(raw))
    assert simulate.main(["stream", "--profile", str(path), "--method", "sd", "--config", SD,
                          "--out", str(tmp_path / "o")]) == 2
    assert "no latency model for 'llama-68m'" in capsys.readouterr().err


def test_bench_runs_small(tmp_path, capsys):
    assert bench_simulator.main(["--repeats", "1", "--stream-tokens", "2000", "--serve-seconds", "5",
                                 "--out", str(tmp_path / "b.json")]) == 0
    figures = json.loads((tmp_path / "b.json").read_text())
    assert figures["stream_fast_steps_per_s"] > 0 and figures["serving_requests"] > 0


@pytest.mark.parametrize("command", ["stream", "serve"])
def test_unknown_config_key_exits_2_naming_it(tmp_path, capsys, command):
    assert simulate.main([command, "--profile", PROFILE, "--method", "sd", "--config", '{"gama": 8}',
                          "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "'gama'" in err and "\n" not in err
    assert not (tmp_path / "summary.json").exists()


def test_stream_takes_a_label_and_writes_it(tmp_path):
    assert simulate.main(["stream", "--profile", PROFILE, "--method", "sd", "--config", "sd g5",
                          "--n-tokens", "64", "--repeats", "1", "--out", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["config"] == "sd g5" and summary["acceptance"]


def test_acceptance_spread_profile_reads_the_dataset_of_the_runs_acceptance():
    """'profile' is the Profile's prompt spread of the method on the dataset its acceptance entry is of, with
    the tokens its prompts decoded; a number is taken as it is."""
    from profiles.profile import Profile
    from simulator.methods import build_step_model

    profile = Profile.load("data/profiles/batch/smollm2-135m-cpu-batch-drafters.json")
    step = build_step_model(profile, "sd", {"gamma": 2, "drafter": "vanilla", "dataset": "lib-edit"})
    assert simulate.acceptance_spread("profile", profile, step) == {
        "acceptance_spread": profile.prompt_spread("lib-edit", "sd")[0], "spread_tokens": 32}
    assert simulate.acceptance_spread("0.25", profile, step) == {"acceptance_spread": 0.25}
