"""calibrate.ingest on the engine-file corpus (tests/calibrate/engine_files, README there): every file's
known answer, exactly, or the one line that refuses it (exit 2, nothing written)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from calibrate.ingest import IngestOptions, ingest
from calibrate.ingest.__main__ import main
from profiles.profile import Profile
from common.errors import InputError
from tests.calibrate.test_ingest import refused, run_cli

FILES = Path(__file__).resolve().parent / "engine_files"
ROOT = Path(__file__).resolve().parents[2]
EX = ROOT / "examples" / "ingest"
VICUNA = ROOT / "data" / "profiles" / "glide-vicuna-7b-h800.json"
T0 = IngestOptions(temperature=0.0)


def f(name: str) -> str:
    return str(FILES / name)


def counts(name: str) -> dict:
    """The spec-decode counters of one scrape, read here independently of the importer."""
    out = {"per_position": {}}
    for line in (FILES / name).read_text().splitlines():
        if line.startswith("vllm:spec_decode_num") and "_total" in line:
            metric, value = line.rsplit(" ", 1)
            key = metric.split("{")[0]
            if "position=" in metric:
                pos = int(metric.split('position="')[1].split('"')[0])
                out["per_position"][pos] = out["per_position"].get(pos, 0.0) + float(value)
            else:
                out[key] = out.get(key, 0.0) + float(value)
    return out


# ---- vllm-metrics -----------------------------------------------------------------------------------
def test_a_restart_no_counter_shows_is_seen_in_the_created_samples():
    result = ingest("vllm-metrics", [f("vllm_restart_before.prom"), f("vllm_restart_after.prom")], T0)
    # the truth since the restart is the second scrape alone (the difference would say 0.933 / 0.100 / 0.033)
    assert result.summary["per_position_acceptance"] == pytest.approx([1690 / 2000, 910 / 2000, 564 / 2000])
    assert [round(r, 3) for r in result.summary["per_position_acceptance"]] == [0.845, 0.455, 0.282]
    assert result.summary["mean_accepted_tokens"] == pytest.approx(1 + 3164 / 2000)
    assert result.acceptance["alpha"] == pytest.approx(3164 / (2000 + 1690 + 910))
    assert result.summary["restarted_at"] == "2025-11-20T08:00:00+00:00"
    assert any("traffic before a server restart" in line for line in result.not_provided)


def test_scrapes_in_the_wrong_order_or_of_another_server_are_refused(tmp_path, capsys):
    line = refused(capsys, "vllm-metrics", f("vllm_restart_after.prom"), f("vllm_restart_before.prom"))
    assert "started before" in line and "give the scrapes in order: before, after" in line
    stripped = tmp_path / "after.prom"            # no _created samples: a fallen counter has no explanation
    stripped.write_text("".join(l for l in (FILES / "vllm_restart_before.prom").read_text().splitlines(True)
                                if "_created" not in l))
    later = tmp_path / "later.prom"
    later.write_text("".join(l for l in (FILES / "vllm_restart_after.prom").read_text().splitlines(True)
                             if "_created" not in l).replace("} 2000.0", "} 1000.0"))
    line = refused(capsys, "vllm-metrics", stripped, later)
    assert "vllm:spec_decode_num_drafts_total" in line and "fell from 1700 to 1000" in line


def test_openmetrics_scrapes_give_the_same_numbers_as_prometheus_text():
    result = ingest("vllm-metrics", [f("vllm_openmetrics_before.prom"), f("vllm_openmetrics_after.prom")], T0)
    drafts = (9000 - 4000) + (8100 - 3600)
    per = [(7200 - 3200) + (6520 - 2900), (5430 - 2400) + (4950 - 2200), (3620 - 1600) + (3330 - 1500),
           (2210 - 980) + (2130 - 940)]
    assert result.summary["drafts"] == drafts and result.models == {"target": "qwen2.5-7b"}
    assert result.summary["per_position_acceptance"] == pytest.approx([c / drafts for c in per])
    assert result.acceptance["alpha"] == pytest.approx(sum(per) / (drafts + sum(per[:-1])))
    assert result.latency["e2e"]["count"] == 3 and result.summary["draft_lengths"] == "full"


def test_drafts_of_varying_length_give_alpha_from_position_one():
    raw = counts("vllm_varying_k.prom")
    drafts, first = raw["vllm:spec_decode_num_drafts_total"], raw["per_position"][0]
    assert raw["vllm:spec_decode_num_draft_tokens_total"] < 4 * drafts          # the schedule ran K = 4 and K = 2
    result = ingest("vllm-metrics", [f("vllm_varying_k.prom")], T0)
    assert result.acceptance["alpha"] == first / drafts == pytest.approx(0.8, abs=0.01)   # simulated at 0.8
    assert "alpha_by_position" not in result.acceptance and result.summary["draft_lengths"] == "varying"
    rates = [raw["per_position"][i] / drafts for i in range(4)]
    full_k = sum(rates) / (1 + sum(rates[:-1]))          # what taking every draft as 4 long would say
    assert full_k < 0.75                                   # biased low, as the issue saw (0.691)
    assert any("drafts of varying length" in line for line in result.not_provided)


def test_varying_lengths_that_no_single_rate_explains_are_refused(capsys):
    line = refused(capsys, "vllm-metrics", f("vllm_varying_declining.prom"))
    assert "drafts of varying length" in line and "no single acceptance rate explains" in line


def test_an_unknown_spec_decode_metric_is_kept_and_named():
    result = ingest("vllm-metrics", [f("vllm_unknown_metric.prom")], T0)
    assert result.summary["unknown_spec_decode_metrics"] == {"vllm:spec_decode_num_scheduled_steps": 1040.0}
    assert any("vllm:spec_decode_num_scheduled_steps" in line for line in result.not_provided)
    assert result.acceptance["alpha"] == pytest.approx(1500 / (1000 + 700 + 500))


def test_target_overrides_the_scrapes_model_name(tmp_path, capsys):
    scrapes = [f("vllm_restart_before.prom"), f("vllm_restart_after.prom")]
    out = tmp_path / "p.json"
    line = refused(capsys, "vllm-metrics", *scrapes, "--drafter", "llama-68m", "--temperature", "0",
                   "--profile", VICUNA, "--out", out)
    assert "'llama-3.1-8b'" in line and not out.exists()
    code, _, _ = run_cli(capsys, "vllm-metrics", *scrapes, "--drafter", "llama-68m", "--temperature", "0",
                         "--dataset", "mt-bench", "--target", "vicuna-7b", "--profile", VICUNA, "--out", out)
    assert code == 0 and Profile.load(out).provenance.details["ingested"][-1]["models"]["target"] == "vicuna-7b"


@pytest.mark.parametrize("name, expected", [
    ("vllm_v0.prom", "vLLM v0 spec-decode metrics"),
    ("vllm_nan.prom", ":3: vllm:spec_decode_num_drafts_total is nan, not a finite value"),
    ("vllm_bench_e2el_only.json", "JSON, not a /metrics scrape"),
])
def test_vllm_metrics_refusals_name_the_problem(tmp_path, capsys, name, expected):
    out = tmp_path / "r.json"
    assert expected in refused(capsys, "vllm-metrics", f(name), "--temperature", "0", "--out", out)
    assert list(tmp_path.iterdir()) == []                # nothing written, no temp file left


# ---- vllm-bench -------------------------------------------------------------------------------------
def test_vllm_bench_without_ttft_or_tpot_is_read():
    result = ingest("vllm-bench", [f("vllm_bench_e2el_only.json")], T0)
    assert set(result.latency) == {"e2e"} and result.latency["e2e"]["mean"] == pytest.approx(2.4)
    assert result.acceptance["alpha"] == pytest.approx(66000 / (40000 + 30000 + 22000))
    assert result.summary["mean_accepted_tokens"] == pytest.approx(2.65)
    assert any("no TTFT, TPOT, ITL" in line for line in result.not_provided)


def test_vllm_bench_of_a_batch_size_schedule():
    raw = json.loads((FILES / "vllm_bench_skip_tokenizer_varying.json").read_text())
    result = ingest("vllm-bench", [f("vllm_bench_skip_tokenizer_varying.json")], T0)
    first = raw["spec_decode_per_position_acceptance_rates"][0]
    assert result.acceptance["alpha"] == pytest.approx(first) and first == pytest.approx(0.75, abs=0.01)
    assert result.summary["draft_lengths"] == "varying"


def test_vllm_bench_temperature_is_the_files_or_asked_for(tmp_path, capsys):
    recorded = ingest("vllm-bench", [f("vllm_bench_metadata_temperature.json")])
    assert recorded.acceptance["temperature"] == 0.7
    assert "recorded at temperature 0.7, not --temperature 0" in refused(
        capsys, "vllm-bench", f("vllm_bench_metadata_temperature.json"), "--temperature", "0")
    unrecorded = ingest("vllm-bench", [f("vllm_bench_e2el_only.json")])
    assert unrecorded.acceptance is None and unrecorded.summary["alpha"] > 0       # never assumed 0
    out = tmp_path / "p.json"
    line = refused(capsys, "vllm-bench", f("vllm_bench_e2el_only.json"), "--drafter", "llama-68m",
                   "--target", "vicuna-7b", "--profile", VICUNA, "--out", out)
    assert "does not record the sampling temperature: pass --temperature" in line and not out.exists()
    given = ingest("vllm-bench", [f("vllm_bench_e2el_only.json")], IngestOptions(temperature=0.3))
    assert given.acceptance["temperature"] == 0.3


def test_vllm_bench_without_speculation_gives_latency_and_no_profile(tmp_path, capsys):
    result = ingest("vllm-bench", [f("vllm_benchmark_serving_no_spec.json")], T0)
    assert result.acceptance is None and set(result.latency) == {"ttft", "tpot", "itl"}
    line = refused(capsys, "vllm-bench", f("vllm_benchmark_serving_no_spec.json"), "--temperature", "0",
                   "--drafter", "llama-68m", "--profile", VICUNA, "--out", tmp_path / "p.json")
    assert "no acceptance to merge" in line and "spec_decode" in line


# ---- sglang-bench -----------------------------------------------------------------------------------
def test_sglang_running_mean_over_runs():
    lines = [json.loads(l) for l in (FILES / "sglang_serving_cumulative.jsonl").read_text().splitlines()]
    result = ingest("sglang-bench", [f("sglang_serving_cumulative.jsonl")], T0)
    assert result.summary["mean_accepted_tokens"] == pytest.approx(lines[-1]["accept_length"])   # over both runs
    assert result.summary["accept_length_per_run"] == pytest.approx([3.0, 2.6])
    naive = 500000 / (200000 / 3.0 + 300000 / lines[-1]["accept_length"])   # each line taken as its own run
    assert abs(naive - result.summary["mean_accepted_tokens"]) > 0.09
    per_run = ingest("sglang-bench", [f("sglang_serving_cumulative.jsonl")], IngestOptions(accept_length="per-run"))
    assert per_run.summary["mean_accepted_tokens"] == pytest.approx(naive)


def test_sglang_lines_that_cannot_be_a_running_mean_are_refused(tmp_path, capsys):
    lines = [json.loads(l) for l in (FILES / "sglang_serving_cumulative.jsonl").read_text().splitlines()]
    path = tmp_path / "runs.jsonl"
    path.write_text("\n".join(json.dumps(l) for l in (lines[0], {**lines[1], "accept_length": 1.2})) + "\n")
    assert "pass --accept-length per-run" in refused(capsys, "sglang-bench", path)
    other = {**lines[1], "server_info": {**lines[1]["server_info"], "speculative_num_steps": 3}}
    path.write_text("\n".join(json.dumps(l) for l in (lines[0], other)) + "\n")
    assert "different servers" in refused(capsys, "sglang-bench", path)


def test_sglang_one_batch_server_runs_are_each_their_own():
    result = ingest("sglang-bench", [f("sglang_one_batch_server.jsonl")], IngestOptions(temperature=0.0, gamma=5))
    assert result.summary["mean_accepted_tokens"] == pytest.approx((512 + 8 * 512) / (512 / 3.2 + 8 * 512 / 2.9))


def test_sglang_without_speculation_is_latency_only(tmp_path, capsys):
    result = ingest("sglang-bench", [f("sglang_serving_no_spec.jsonl")], T0)
    assert result.acceptance is None and "ttft" in result.latency
    line = refused(capsys, "sglang-bench", f("sglang_serving_no_spec.jsonl"), "--temperature", "0",
                   "--drafter", "llama-68m", "--profile", VICUNA, "--out", tmp_path / "p.json")
    assert "speculative decoding off" in line


# ---- spec-bench -------------------------------------------------------------------------------------
def test_spec_bench_baseline_is_refused(tmp_path, capsys):
    line = refused(capsys, "spec-bench", f("spec_bench_baseline.jsonl"), "--gamma", "4", "--drafter", "llama-68m",
                   "--profile", VICUNA, "--out", tmp_path / "p.json")
    assert "every one of the 76 decoding steps committed exactly 1 token" in line and "without speculation" in line
    assert list(tmp_path.iterdir()) == []


def test_spec_bench_temperature_from_model_id_or_asked(tmp_path, capsys):
    result = ingest("spec-bench", [f("spec_bench_eagle_t1.jsonl")])
    lengths = [3, 4, 1, 6, 2, 5, 2, 2, 6, 3, 5, 1, 4, 4, 6, 6, 2]
    assert result.acceptance["temperature"] == 1.0 and result.steps["accepted"].tolist() == lengths
    assert result.summary["mean_accepted_tokens"] == pytest.approx(sum(lengths) / len(lengths))
    assert "recorded at temperature 1, not --temperature 0" in refused(
        capsys, "spec-bench", f("spec_bench_eagle_t1.jsonl"), "--temperature", "0")
    out = tmp_path / "steps.parquet"
    assert "no StepTrace written" in refused(capsys, "spec-bench", f("spec_bench_no_temperature.jsonl"), "--out", out)
    assert not out.exists()
    assert run_cli(capsys, "spec-bench", f("spec_bench_no_temperature.jsonl"), "--temperature", "0", "--out", out)[0] == 0
    line = refused(capsys, "hf-assisted", out)                      # a Spec-Bench StepTrace is not a recording
    assert "not written by the hf-assisted recorder" in line


# ---- files of another engine --------------------------------------------------------------------------
@pytest.mark.parametrize("fmt, path, expected", [
    ("sglang-bench", EX / "vllm_bench_serve.json", "a vllm-bench record"),
    ("spec-bench", EX / "vllm_bench_serve.json", "a vllm-bench record"),
    ("vllm-bench", FILES / "sglang_serving_cumulative.jsonl", "a sglang-bench record"),
    ("vllm-bench", FILES / "spec_bench_eagle_t1.jsonl", "a spec-bench record"),
    ("sglang-bench", FILES / "spec_bench_baseline.jsonl", "a spec-bench record"),
    ("vllm-bench", FILES / "vllm_restart_after.prom", "Prometheus text, not JSON: read it as vllm-metrics"),
    ("vllm-bench", EX / "hf_assisted_steps.parquet", "a parquet file"),
])
def test_another_engines_file_is_refused_naming_it(capsys, fmt, path, expected):
    assert expected in refused(capsys, fmt, path)


# ---- writing ----------------------------------------------------------------------------------------
def test_out_is_replaced_only_with_overwrite(tmp_path, capsys):
    out = tmp_path / "p.json"
    base = tmp_path / "base.json"
    shutil.copy(VICUNA, base)
    argv = ["vllm-metrics", str(EX / "vllm_metrics_before.prom"), str(EX / "vllm_metrics_after.prom"), "--drafter",
            "llama-68m", "--temperature", "0", "--dataset", "mt-bench", "--profile", base]
    out.write_text("mine\n")
    assert "--out" in refused(capsys, *argv, "--out", out) and out.read_text() == "mine\n"
    before = base.read_text()
    assert "use --overwrite to replace it" in refused(capsys, *argv, "--out", base) and base.read_text() == before
    assert run_cli(capsys, *argv, "--out", out, "--overwrite")[0] == 0
    assert "llama-68m/mt-bench/T0/vllm-metrics" in Profile.load(out).acceptance
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base.json", "p.json"]      # no temp file beside them


def test_a_parquet_file_as_profile_is_refused_naming_it(tmp_path, capsys):
    line = refused(capsys, "vllm-metrics", str(EX / "vllm_metrics_before.prom"), str(EX / "vllm_metrics_after.prom"),
                   "--drafter", "llama-68m", "--temperature", "0", "--profile", EX / "hf_assisted_steps.parquet",
                   "--out", tmp_path / "p.json")
    assert "hf_assisted_steps.parquet: a parquet file, not a Profile" in line and not (tmp_path / "p.json").exists()


def test_help_is_complete(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    for name in ("vllm-metrics", "vllm-bench", "sglang-bench", "spec-bench", "hf-assisted", "--overwrite",
                 "--accept-length", "never assumed 0", "exit status: 0 on success, 2 on bad input"):
        assert name in text
    assert "nothing written." in " ".join(text.split())


def test_the_library_refuses_like_the_command_line():
    with pytest.raises(InputError, match="a sglang-bench record"):
        ingest("vllm-bench", [f("sglang_serving_cumulative.jsonl")])
