"""python -m experiments.vllm_h100 on small hand-made request streams (never the study's files): the peer's
arithmetic and random stream, the deployment answer, bad input in one line with exit 2, and (slow) the
whole command."""
import json
import random

import numpy as np
import pandas as pd
import pytest

from calibrate.vllm.streams import DATASETS, Stream
from calibrate.vllm.study_fit import STUDY_FIT
from experiments.vllm_h100 import main
from papers.specdecode.deploy import best_per_batch, speculative_config
from papers.specdecode.peer import numpy_stream, peer_point, plain_latency, walk
from traces.span_replay import ReplayRequest


def write_files(folder, requests=3):
    """The four datasets' files: prompts that repeat, so vLLM's n-gram rule finds matches."""
    rng = np.random.default_rng(0)
    for dataset in DATASETS:
        lines = []
        for i in range(requests):
            prompt = [int(t) for t in np.tile(rng.integers(5, 50, 6), 3)]
            output = [int(t) for t in rng.integers(5, 50, 12 + 4 * i)]
            lines.append(json.dumps({"id": f"{dataset}-{i}", "prompt_token_ids": prompt, "generated_token_ids": output,
                                     "acc_ngram": {"acc_len": [1] + [int(s) for s in rng.integers(1, 4, len(output) - 1)]},
                                     "acc_eagle": {"acc_len": [1] + [int(s) for s in rng.integers(1, 5, len(output) + 1)]}}))
        (folder / f"combined_{dataset}.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def test_the_peer_draws_pythons_own_random_stream():
    random.seed(42)
    random.sample(range(500), k=300)
    generator = numpy_stream(random.getstate())
    assert list(generator.random_sample(5)) == [random.random() for _ in range(5)]


def test_the_peer_prices_a_request_as_its_arithmetic_says():
    spans = np.array([1, 3, 1, 2, 1, 1], np.int16)
    assert list(walk(spans, 2)) == [0, 1, 3]                       # cur 1, 2, 4, then 6: done
    request = ReplayRequest("gsm8k", "r", 10, 6, {"eagle": spans, "ngram": spans})
    stream = Stream("gsm8k", [request], [np.zeros(6, np.int16)], "sha", "f")
    forward = lambda kv, tokens: STUDY_FIT.target_c_fixed + STUDY_FIT.target_c_compute * tokens + STUDY_FIT.target_c_kv * kv
    overhead = STUDY_FIT.overhead_constant_per_step
    plain = forward(0, 10) + overhead + sum(forward(11 + s, 1) + overhead for s in range(5))
    assert plain_latency(STUDY_FIT, 10, 6, 1) == pytest.approx(plain)
    kv = np.array([11, 12, 14])
    draft = STUDY_FIT.draft_c_fixed + STUDY_FIT.draft_c_kv * kv + STUDY_FIT.draft_c_num_spec_tokens * 2
    spec = forward(0, 10) + overhead + np.sum(forward(kv, 2) + draft + overhead)
    point = peer_point(stream, "eagle", 1, 1)
    assert point["speedup"] == pytest.approx(plain / spec)


def test_the_schedule_exports_the_winning_method_with_k_0_where_it_loses():
    predictions = pd.DataFrame({"dataset": "d", "calibration": "ours", "batch": [1, 1, 8, 8, 64, 64],
                                "method": ["eagle", "ngram"] * 3, "k": [3, 5, 3, 5, 1, 5],
                                "predicted_speedup": [1.5, 1.2, 1.3, 1.1, 0.9, 0.95]})
    best = best_per_batch(predictions)
    assert list(best["method"]) == ["eagle", "eagle", "none"]
    config = speculative_config(best)["speculative_config"]
    assert config["method"] == "eagle3" and config["num_speculative_tokens_per_batch_size"] == [[1, 63, 3], [64, 64, 0]]


@pytest.mark.parametrize("argv, message", [
    (["--batches", "0"], "--batches must be whole numbers >= 1, got 0"),
    (["--ks", "1,0"], "--ks must be whole numbers >= 1, got 0"),
    (["--gpu-hour-price", "0"], "--gpu-hour-price must be > 0 USD per GPU-hour"),
    (["--gpu-hour-price", "-2.5"], "--gpu-hour-price must be > 0 USD per GPU-hour"),
    (["--gpu-hour-price", "nan"], "--gpu-hour-price must be > 0 USD per GPU-hour"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, argv, message):
    code = main(["--data", str(write_files(tmp_path)), "--out", str(tmp_path / "out"), *argv])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith(f"error: {message}") and "\n" not in err
    assert not (tmp_path / "out").exists()


def test_a_data_folder_without_the_four_files_is_refused(tmp_path, capsys):
    (tmp_path / "combined_gsm8k.jsonl").write_text("{}\n")
    assert main(["--data", str(tmp_path), "--out", str(tmp_path / "out"), "--proposals-cache", "none"]) == 2
    err = capsys.readouterr().err.strip()
    assert "lacks combined_cnn.jsonl, combined_sharegpt.jsonl, combined_instructcoder.jsonl" in err and "\n" not in err


@pytest.mark.slow
def test_the_command_predicts_every_point_of_a_small_stream(tmp_path):
    out = tmp_path / "out"
    assert main(["--data", str(write_files(tmp_path)), "--out", str(out), "--batches", "1,2", "--ks", "1,2",
                 "--proposals-cache", "none", "--workers", "1"]) == 0
    predictions = pd.read_csv(out / "predictions.csv")
    assert set(predictions["calibration"]) == {"ours", "study-fit", "peer"}
    assert len(predictions) == len(DATASETS) * 2 * 2 * 2 * 3          # datasets x methods x k x batches x calibrations
    assert predictions["predicted_speedup"].between(0.2, 5).all()
    assert (out / "report.md").read_text().startswith("# vLLM 0.10.1 on one H100")
    assert json.loads((out / "inputs.json").read_text())["inputs"].keys() == {f"combined_{d}.jsonl" for d in DATASETS}
