"""calibrate.ingest's Profile merge and command line: the merged entry and its provenance, what is
refused (another model, an entry of no dataset, bad arguments), a chain engine's file on a tree
drafter, and --out without a Profile."""
from __future__ import annotations

import json
import shutil

import pytest

from profiles.profile import Profile
from tests.calibrate.test_ingest import EX, PROFILES, SCRAPES, refused, run_cli


# ---- the Profile merge and the command line -------------------------------------------------------
def test_merge_into_a_profile_adds_the_entry_with_provenance(tmp_path, capsys):
    out = tmp_path / "vicuna.json"
    code, _, _ = run_cli(capsys, "vllm-metrics", *SCRAPES, "--drafter", "llama-68m", "--dataset", "mt-bench",
                         "--temperature", "0", "--profile", PROFILES / "glide-vicuna-7b-h800.json", "--out", out)
    assert code == 0
    merged = Profile.load(out)
    key = "llama-68m/mt-bench/T0/vllm-metrics"
    assert merged.acceptance_model(key).alpha == pytest.approx(19400 / 27300)
    base = Profile.load(PROFILES / "glide-vicuna-7b-h800.json")
    assert set(merged.acceptance) == set(base.acceptance) | {key}
    assert list(merged.provenance.details["ingested"][-1]["sources"]) == SCRAPES
    assert "ttft" in merged.provenance.details["ingested"][-1]["latency_s"]


def test_an_entry_of_no_dataset_is_refused_in_one_line(tmp_path, capsys):
    out = tmp_path / "p.json"
    line = refused(capsys, "vllm-metrics", *SCRAPES, "--drafter", "llama-68m", "--temperature", "0",
                   "--profile", PROFILES / "glide-vicuna-7b-h800.json", "--out", out)
    assert line == ("error: the source does not name its dataset, and an entry of no dataset is one no deployment of "
                    "profile 'glide-vicuna-7b-h800' uses: pass --dataset (the profile's: code-python, finance-alpaca, "
                    "gsm8k, spider)")
    assert not out.exists()


def test_a_chain_measured_on_a_tree_drafter_is_the_chain_twins_and_answers_first(tmp_path, capsys):
    """vLLM drafts EAGLE as a chain: merged on a drafter that states a tree, the entry goes to the
    drafter's chain twin (priced as a chain), first among its entries, and is the Profile's subject."""
    out = tmp_path / "p.json"
    code, _, _ = run_cli(capsys, "vllm-metrics", *SCRAPES, "--drafter", "eagle", "--target", "llama-3-8b",
                         "--dataset", "mt-bench", "--temperature", "0",
                         "--profile", PROFILES / "coral-llama-3-8b-a6000.json", "--out", out)
    assert code == 0
    merged = Profile.load(out)
    key = "eagle-chain/mt-bench/T0/vllm-metrics"
    assert merged.drafter("eagle").tree is not None and merged.drafter("eagle-chain").tree is None
    assert next(iter(merged.acceptance)) == key
    measured = merged.measured()
    assert measured.key == key and measured.format == "vllm-metrics"
    assert measured.latency_s["itl"]["p50"] == pytest.approx(0.015)
    assert Profile.load(PROFILES / "coral-llama-3-8b-a6000.json").measured() is None


def test_merge_refuses_another_target_or_drafter_naming_both(tmp_path, capsys):
    out = tmp_path / "p.json"
    line = refused(capsys, "vllm-metrics", *SCRAPES, "--drafter", "eagle", "--temperature", "0",
                   "--profile", PROFILES / "coral-llama-3-8b-a6000.json", "--out", out)
    assert "'vicuna-7b'" in line and "'llama-3-8b'" in line
    line = refused(capsys, "vllm-metrics", *SCRAPES, "--drafter", "eagle", "--temperature", "0",
                   "--profile", PROFILES / "glide-vicuna-7b-h800.json", "--out", out)
    assert "drafter 'eagle'" in line and "llama-68m" in line
    assert "pass --drafter" in refused(capsys, "vllm-metrics", *SCRAPES, "--temperature", "0", "--profile",
                                        PROFILES / "glide-vicuna-7b-h800.json", "--out", out)
    assert not out.exists()


@pytest.mark.parametrize("argv, expected", [
    (["vllm-prom", "x.prom"], "unknown format 'vllm-prom' (known: vllm-metrics"),
    (["vllm-bench", "no/such/file.json"], "no/such/file.json: file not found"),
    (["spec-bench", str(EX / "spec_bench_answers.jsonl"), "--out", "x.csv"], "expected a .json or .parquet"),
    (["vllm-bench", str(EX / "vllm_bench_serve.json"), "--out", "x.parquet"], "gives no StepTrace"),
    (["vllm-bench", str(EX / "vllm_bench_serve.json"), "--profile", "p.json"], "--profile needs --out"),
])
def test_bad_arguments_are_one_line(tmp_path, monkeypatch, capsys, argv, expected):
    monkeypatch.chdir(tmp_path)                         # nothing lands in the checkout, even when broken
    assert expected in refused(capsys, *argv)


def test_out_json_without_a_profile_is_the_result_object(tmp_path, capsys):
    out = tmp_path / "result.json"
    shutil.copy(EX / "vllm_bench_serve.json", tmp_path / "in.json")
    assert run_cli(capsys, "vllm-bench", tmp_path / "in.json", "--out", out)[0] == 0
    written = json.loads(out.read_text())
    assert written["format"] == "vllm-bench" and "per_position_acceptance" in written
