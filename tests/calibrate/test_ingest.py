"""calibrate.ingest: every format's committed example, the numbers each derives, and bad input (exit 2)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from calibrate.ingest import FORMATS, IngestOptions, ingest
from calibrate.ingest.__main__ import main
from calibrate.ingest.hf_assisted import AssistedRecorder
from profiles.profile import Profile
from common.errors import InputError
from costmodel.leviathan import expected_tokens
from traces.schema import read_trace

EX = Path(__file__).resolve().parents[2] / "examples" / "ingest"
PROFILES = Path(__file__).resolve().parents[2] / "data" / "profiles"
SCRAPES = [str(EX / "vllm_metrics_before.prom"), str(EX / "vllm_metrics_after.prom")]
EXAMPLES = {"vllm-metrics": SCRAPES, "vllm-bench": [str(EX / "vllm_bench_serve.json")],
            "sglang-bench": [str(EX / "sglang_bench_serving.jsonl")],
            "spec-bench": [str(EX / "spec_bench_answers.jsonl")],
            "hf-assisted": [str(EX / "hf_assisted_steps.parquet")]}


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def refused(capsys, *argv) -> str:
    """The one error line of a refused command (exit 2, nothing on stdout)."""
    code, out, err = run_cli(capsys, *argv)
    lines = err.strip().splitlines()
    assert code == 2 and not out and len(lines) == 1 and lines[0].startswith("error: "), (code, out, err)
    return lines[0]


# ---- every format ---------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt, missing", [("vllm-metrics", "per-step latency split"),
                                          ("vllm-bench", "per-step latency split"),
                                          ("sglang-bench", "per-position acceptance: only the mean"),
                                          ("spec-bench", "per-step time"), ("hf-assisted", "verify_s includes")])
def test_every_committed_example_ingests_with_provenance(fmt, missing):
    assert set(FORMATS) == {"vllm-metrics", "vllm-bench", "sglang-bench", "spec-bench", "hf-assisted",
                            "specdecode-bench"}   # spans, no acceptance entry: tests/calibrate/test_specdecode_bench.py
    result = ingest(fmt, EXAMPLES[fmt], IngestOptions(temperature=0.0))
    assert result.format == fmt and result.sources == EXAMPLES[fmt]
    assert any(missing in line for line in result.not_provided)   # what its source could not give
    assert result.acceptance is not None
    assert result.acceptance["ingest"]["format"] == fmt
    assert 0 < result.acceptance["alpha"] < 1
    assert result.summary["mean_accepted_tokens"] > 1


# ---- vllm-metrics ---------------------------------------------------------------------------------
def test_vllm_two_scrapes_give_the_deltas_summed_over_engines(capsys):
    code, out, _ = run_cli(capsys, "vllm-metrics", *SCRAPES, "--json", "--temperature", "0")
    assert code == 0
    got = json.loads(out)
    # after - before, engines 0 + 1: 12000 drafts; 9000, 6300, 4100 accepted at positions 0, 1, 2
    assert got["per_position_acceptance"] == pytest.approx([9000 / 12000, 6300 / 12000, 4100 / 12000])
    assert got["mean_accepted_tokens"] == pytest.approx(1 + 19400 / 12000)
    assert got["acceptance"]["alpha_by_position"] == pytest.approx([0.75, 6300 / 9000, 4100 / 6300])
    assert got["acceptance"]["alpha"] == pytest.approx(19400 / (12000 + 9000 + 6300))
    assert got["models"] == {"target": "vicuna-7b"}
    assert got["latency_s"]["ttft"]["count"] == 480 and got["latency_s"]["itl"]["count"] == 4800
    assert 0.01 < got["latency_s"]["itl"]["p50"] < got["latency_s"]["itl"]["p99"] < 0.1


def test_vllm_one_scrape_is_the_totals():
    result = ingest("vllm-metrics", SCRAPES[1:])
    assert result.summary["drafts"] == 15000
    assert result.summary["per_position_acceptance"][0] == pytest.approx((5850 + 5400) / 15000)


def test_vllm_counter_that_decreases_is_refused(capsys):
    line = refused(capsys, "vllm-metrics", SCRAPES[1], SCRAPES[0])
    assert "vllm_metrics_before.prom" in line and "fell from" in line and "no _created sample shows a restart" in line


@pytest.mark.parametrize("bad, expected", [
    ('vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0"} 3.0', ":2: vllm:spec_decode_num_accepted"),
    ('vllm:spec_decode_num_accepted_tokens_per_pos_total{position="first"} 3.0', ":2: vllm:spec_decode_num_accepted"),
    ('vllm:spec_decode_num_drafts_total{engine="0"', ":2: not Prometheus text"),
])
def test_vllm_bad_metric_lines_name_file_and_line(tmp_path, capsys, bad, expected):
    path = tmp_path / "scrape.prom"
    path.write_text(f'vllm:spec_decode_num_drafts_total{{engine="0"}} 10.0\n{bad}\n')
    line = refused(capsys, "vllm-metrics", path)
    assert f"{path}{expected}" in line


def test_vllm_scrape_cut_mid_line_is_refused(tmp_path, capsys):
    path = tmp_path / "scrape.prom"
    path.write_text((EX / "vllm_metrics_after.prom").read_text()[:-20])
    assert f"{path}: ends in the middle of a line" in refused(capsys, "vllm-metrics", path)


def test_vllm_scrape_without_spec_counters_says_why(tmp_path, capsys):
    path = tmp_path / "plain.prom"
    path.write_text('vllm:num_requests_running{engine="0"} 1.0\n')
    assert "no vllm:spec_decode_num_drafts_total" in refused(capsys, "vllm-metrics", path)
    path.write_text('vllm:spec_decode_num_drafts_total{engine="0"} 10.0\n')
    assert "vllm:spec_decode_num_accepted_tokens_total is missing" in refused(capsys, "vllm-metrics", path)


@pytest.mark.parametrize("how", ["block", "line", "file"])
def test_vllm_series_written_twice_in_one_scrape_is_refused_not_summed(tmp_path, capsys, how):
    """The spec-decode block pasted twice, one sample line repeated, or the whole scrape concatenated
    with itself: summed, drafts 27,000 and accepted 43,660 would stand for 12,000 and 19,400."""
    after = (EX / "vllm_metrics_after.prom").read_text()
    extra = {"block": "".join(l + "\n" for l in after.splitlines() if "spec_decode" in l),
             "line": next(l for l in after.splitlines() if l.startswith("vllm:spec_decode_num_drafts_total{")) + "\n",
             "file": after}[how]
    path = tmp_path / "after.prom"
    path.write_text(after + extra)
    first = after.splitlines().index(next(l for l in after.splitlines()
                                          if l.startswith("vllm:spec_decode_num_drafts_total{")))
    second = len(after.splitlines()) + extra.splitlines().index(after.splitlines()[first]) + 1
    assert refused(capsys, "vllm-metrics", SCRAPES[0], path) == (
        f'error: {path}:{second}: series vllm:spec_decode_num_drafts_total{{engine="0",model_name="vicuna-7b"}} '
        "appears twice in one scrape (a block written twice, or two scrapes in one file?); give each scrape a file "
        "of its own")


# ---- vllm-bench -----------------------------------------------------------------------------------
def test_vllm_bench_latency_in_seconds_and_acceptance_as_vllm_reports_it():
    raw = json.loads((EX / "vllm_bench_serve.json").read_text())
    result = ingest("vllm-bench", EXAMPLES["vllm-bench"])
    assert result.latency["ttft"]["mean"] == pytest.approx(raw["mean_ttft_ms"] / 1000)
    assert result.latency["tpot"]["p99"] == pytest.approx(raw["p99_tpot_ms"] / 1000)
    assert result.latency["e2e"]["median"] == pytest.approx(raw["median_e2el_ms"] / 1000)
    assert result.throughput["output_throughput"] == raw["output_throughput"]
    assert result.summary["mean_accepted_tokens"] == pytest.approx(raw["spec_decode_acceptance_length"], abs=1e-4)
    assert result.models["target"] == raw["model_id"]


def test_vllm_bench_missing_spec_field_names_the_field(tmp_path, capsys):
    raw = json.loads((EX / "vllm_bench_serve.json").read_text())
    del raw["spec_decode_accepted_tokens"]
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(raw))
    assert f"{path}:1: missing field 'spec_decode_accepted_tokens'" in refused(capsys, "vllm-bench", path)


def _bench(tmp_path, **fields) -> Path:
    """The committed vllm-bench example with its spec_decode_* fields replaced by `fields`."""
    raw = {k: v for k, v in json.loads((EX / "vllm_bench_serve.json").read_text()).items()
           if not k.startswith("spec_decode_")}
    path = tmp_path / "bench.json"
    path.write_text(json.dumps({**raw, **fields}))
    return path


def test_vllm_bench_spec_fields_nested_or_as_means_are_read_never_dropped(tmp_path):
    """Nested under `spec_decode` (with or without the prefix) the counts give the top-level answer;
    vLLM's means alone give alpha at the draft length (--gamma, or length - 1 over rate), and without
    one no entry, saying so, rather than "no spec_decode_* fields"."""
    raw = json.loads((EX / "vllm_bench_serve.json").read_text())
    spec = {k: v for k, v in raw.items() if k.startswith("spec_decode_")}
    flat = ingest("vllm-bench", EXAMPLES["vllm-bench"], IngestOptions(temperature=0.0)).acceptance
    for nested in (spec, {k[len("spec_decode_"):]: v for k, v in spec.items()}):
        got = ingest("vllm-bench", [str(_bench(tmp_path, spec_decode=nested))], IngestOptions(temperature=0.0))
        assert got.acceptance["alpha"] == flat["alpha"] and got.acceptance["alpha_by_position"] == flat["alpha_by_position"]
    length, rate = spec["spec_decode_acceptance_length"], spec["spec_decode_acceptance_rate"]
    for fields, gamma in (({"spec_decode_acceptance_length": length, "spec_decode_acceptance_rate": rate}, None),
                          ({"spec_decode_acceptance_rate": rate}, 3), ({"spec_decode_acceptance_length": length}, 3)):
        got = ingest("vllm-bench", [str(_bench(tmp_path, **fields))], IngestOptions(temperature=0.0, gamma=gamma))
        assert expected_tokens(got.acceptance["alpha"], 3) == pytest.approx(length, abs=1e-3)
        assert any("only vLLM's means" in line for line in got.not_provided)
    alone = ingest("vllm-bench", [str(_bench(tmp_path, spec_decode_acceptance_length=length))],
                   IngestOptions(temperature=0.0))
    assert alone.acceptance is None and alone.summary["mean_accepted_tokens"] == length
    assert "pass --gamma" in alone.missing and not any("no spec_decode_* fields" in l for l in alone.not_provided)


@pytest.mark.parametrize("fields, message", [
    ({"spec_decode_acceptance_rate": 0.518}, "field 'spec_decode_acceptance_rate' is 0.518: vLLM writes a percentage"),
    ({"spec_decode_foo": 3}, "spec-decode fields without counts or means (spec_decode_foo = 3)"),
    ({"spec_decode": [1, 2]}, "field 'spec_decode' must be an object of spec-decode fields, got [1, 2]"),
    ({"spec_decode_num_drafts": 52000, "spec_decode": {"num_drafts": 50000}},
     "'spec_decode_num_drafts' is 52000 but 'spec_decode.num_drafts' is 50000"),
    ({"spec_decode_num_drafts": 52000, "spec_decode_draft_tokens": 156000, "spec_decode_accepted_tokens": 80865,
      "spec_decode_per_position_acceptance_rates": [0.7312, 0.5018, 0.3221], "spec_decode_acceptance_length": 2.9},
     "field 'spec_decode_acceptance_length' is 2.9 but the counts give 2.555"),
    ({"spec_decode_acceptance_length": 2.5551, "spec_decode_acceptance_rate": 30.0},
     "spec_decode_acceptance_length 2.5551 and spec_decode_acceptance_rate 30% disagree at draft length 3"),
])
def test_vllm_bench_spec_fields_that_disagree_or_cannot_be_read_are_refused(tmp_path, capsys, fields, message):
    extra = ("--gamma", "3") if "disagree at" in message else ()
    line = refused(capsys, "vllm-bench", _bench(tmp_path, **fields), "--temperature", "0", *extra)
    assert line.startswith(f"error: {tmp_path / 'bench.json'}:1: ") and message in line


def test_ingest_out_that_is_a_folder_is_refused_and_a_killed_runs_temp_file_removed(tmp_path, capsys):
    folder = tmp_path / "x.json"
    folder.mkdir()
    args = ("vllm-bench", *EXAMPLES["vllm-bench"], "--temperature", "0", "--drafter", "glide", "--dataset", "gsm8k",
            "--profile", PROFILES / "glide-vicuna-7b-h800.json", "--overwrite", "--out")
    assert refused(capsys, *args, folder) == f"error: --out {folder} is a directory; give a file name"
    out = tmp_path / "merged.json"
    stale = tmp_path / ".merged.json.ab12cd34.tmp"
    stale.write_text("{")
    code, _, _ = run_cli(capsys, *args, out)
    assert code == 0 and Profile.load(out).acceptance and not stale.exists()


# ---- sglang-bench ---------------------------------------------------------------------------------
def test_sglang_accept_lengths_pool_and_invert_at_the_servers_steps():
    result = ingest("sglang-bench", EXAMPLES["sglang-bench"], IngestOptions(temperature=0.0))
    tau = 2.89                                   # the server's running mean over both runs: the last line's
    assert result.summary["mean_accepted_tokens"] == pytest.approx(tau)
    assert result.summary["accept_length_per_run"] == pytest.approx([2.93, 512000 / (768000 / 2.89 - 256000 / 2.93)])
    per_run = ingest("sglang-bench", EXAMPLES["sglang-bench"], IngestOptions(accept_length="per-run"))
    assert per_run.summary["mean_accepted_tokens"] == pytest.approx((256000 + 512000) / (256000 / 2.93 + 512000 / 2.89))
    assert result.summary["gamma"] == 3
    assert float(expected_tokens(result.acceptance["alpha"], 3)) == pytest.approx(tau, abs=1e-9)
    assert result.models["drafter"] == "lmsys/sglang-EAGLE-LLaMA3-Instruct-8B"
    assert result.latency["ttft (rate 4.0, concurrency 32)"]["mean"] == pytest.approx(0.0382)


def test_sglang_one_batch_gives_decode_steps_and_no_acceptance():
    result = ingest("sglang-bench", [str(EX / "sglang_bench_one_batch.jsonl")])
    assert result.acceptance is None
    assert result.latency["decode_step (batch 8)"]["median"] == pytest.approx(0.00861)
    assert any("no accept length" in line for line in result.not_provided)


def test_sglang_without_draft_length_asks_for_gamma(tmp_path, capsys):
    record = json.loads((EX / "sglang_bench_serving.jsonl").read_text().splitlines()[0])
    record["server_info"] = None
    path = tmp_path / "run.jsonl"
    path.write_text(json.dumps(record) + "\n")
    assert "pass --gamma" in refused(capsys, "sglang-bench", path)
    assert ingest("sglang-bench", [str(path)], IngestOptions(gamma=4)).summary["gamma"] == 4


# ---- spec-bench -----------------------------------------------------------------------------------
def test_spec_bench_answers_too_large_to_read_are_refused_before_they_are_read(tmp_path, capsys, monkeypatch):
    """~130 bytes of memory per byte of answers: a 20 MB file took 2.5 GB; past the reader's limit
    it is refused with the estimate, nothing written."""
    from calibrate.ingest import spec_bench

    monkeypatch.setattr(spec_bench, "READ_LIMIT", 100_000)
    src = EXAMPLES["spec-bench"][0]
    out = tmp_path / "steps.parquet"
    line = refused(capsys, "spec-bench", src, "--temperature", "0", "--drafter", "x", "--out", out)
    assert line == (f"error: spec-bench {src} (2 kB of answers) would need ~250 kB of memory, more than the limit "
                    "of 100 kB; give fewer questions (a shorter answer file)") and not out.exists()


def test_spec_bench_steps_keep_every_accept_length_and_turn_time(tmp_path, capsys):
    lines = [json.loads(line) for line in (EX / "spec_bench_answers.jsonl").read_text().splitlines()]
    out = tmp_path / "steps.parquet"
    code, _, _ = run_cli(capsys, "spec-bench", EXAMPLES["spec-bench"][0], "--out", out, "--drafter", "llama-68m")
    assert code == 0
    frame, meta = read_trace(out, kind="step")
    assert meta.extra["source_format"] == "spec-bench" and meta.models == {"draft": "llama-68m"}
    expected = [a for line in lines for a in line["choices"][0]["accept_lengths"]]
    assert frame["accepted"].tolist() == expected
    first = lines[0]["choices"][0]
    turn1 = frame[frame["prompt_id"] == f"spec-bench/{lines[0]['question_id']}/turn1"]
    assert len(turn1) == first["decoding_steps"][0]
    assert turn1["verify_s"].sum() == pytest.approx(first["wall_time"][0])
    assert turn1["accepted"].sum() == first["new_tokens"][0]
    gamma = max(expected) - 1
    assert all(len(m) == min(a, gamma) for a, m in zip(frame["accepted"], frame["accept_mask"]))


def test_spec_bench_splits_turns_by_new_tokens_without_decoding_steps(tmp_path):
    line = json.loads((EX / "spec_bench_answers.jsonl").read_text().splitlines()[0])
    counts = line["choices"][0].pop("decoding_steps")
    path = tmp_path / "answers.jsonl"
    path.write_text(json.dumps(line) + "\n")
    steps = ingest("spec-bench", [str(path)]).steps
    per_turn = [int((steps["prompt_id"] == f"spec-bench/{line['question_id']}/turn{t}").sum()) for t in (1, 2)]
    assert per_turn == counts


def test_spec_bench_line_with_missing_field_names_file_line_and_field(tmp_path, capsys):
    lines = (EX / "spec_bench_answers.jsonl").read_text().splitlines()
    broken = json.loads(lines[2])
    del broken["choices"][0]["accept_lengths"]
    path = tmp_path / "answers.jsonl"
    path.write_text("\n".join([lines[0], lines[1], json.dumps(broken)]) + "\n")
    assert f"{path}:3: choices[0]: missing field 'accept_lengths'" in refused(capsys, "spec-bench", path)


# ---- hf-assisted: a stand-in for the part of generate the recorder hooks ---------------------------
class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        self.t += 0.001
        return self.t


class FakeGenerator:
    """Drafts `gamma` tokens (id 7) with logits whose softmax top-1 is known."""

    def __init__(self, gamma):
        self.gamma = gamma
        self.requires_model_outputs = False

    def get_candidates(self, input_ids):
        candidates = np.concatenate([input_ids, np.full((1, self.gamma), 7)], axis=1)
        logits = np.zeros((1, self.gamma, 4))
        logits[..., 0] = np.log(3.0)                    # p(top-1) = 3 / (3 + 3) = 0.5
        return candidates, logits

    def update_candidate_strategy(self, input_ids, scores, num_matches):
        self.seen = num_matches


class FakeModel:
    """Behaves like transformers' assisted decoding: generator per call, one update per step."""

    class config:
        _name_or_path, vocab_size = "fake-target", 32

    def _get_candidate_generator(self, generation_config=None, assistant_model=None, **kwargs):
        return FakeGenerator(gamma=3)

    def generate(self, input_ids, assistant_model, matches):
        generator = self._get_candidate_generator(generation_config=None, assistant_model=assistant_model)
        for n in matches:
            candidates, _ = generator.get_candidates(input_ids)
            input_ids = np.concatenate([input_ids, candidates[:, input_ids.shape[1]:][:, :n], [[1]]], axis=1)
            generator.update_candidate_strategy(input_ids, None, n)
        return input_ids


class FakeAssistant:
    class config:
        _name_or_path, vocab_size = "fake-draft", 32


def test_recorder_writes_one_row_per_step_and_unhooks(tmp_path):
    model = FakeModel()
    with AssistedRecorder(model, clock=FakeClock()) as recorder:
        recorder.prompt_id = "p/0"
        model.generate(np.zeros((1, 5), int), FakeAssistant(), matches=[3, 1, 0])
    assert "_get_candidate_generator" not in vars(model)           # the hook is gone
    frame = recorder.frame()
    assert frame["accepted"].tolist() == [4, 2, 1] and frame["ctx_len"].tolist() == [5, 9, 11]
    assert frame["accept_mask"].tolist() == [[True] * 3, [True, False], [False]]
    assert frame["step"].tolist() == [0, 1, 2] and set(frame["draft_forwards"]) == {3}
    assert frame["draft_s"].tolist() == pytest.approx([0.001] * 3)    # one clock tick each region
    assert frame["confidences"].iloc[0] == pytest.approx([0.5] * 3)
    path = recorder.write(tmp_path / "hf.parquet", dataset="mt-bench")
    result = ingest("hf-assisted", [str(path)])
    assert result.models == {"target": "fake-target", "drafter": "fake-draft", "target_vocab": 32}
    assert result.summary["mean_accepted_tokens"] == pytest.approx(7 / 3)
    assert result.acceptance["alpha_by_position"][:2] == pytest.approx([2 / 3, 1 / 2])
    with pytest.raises(InputError, match="recorded at temperature 0, not --temperature 0.7"):
        ingest("hf-assisted", [str(path)], IngestOptions(temperature=0.7))


def test_recorder_refuses_what_is_not_a_generation_model():
    with pytest.raises(InputError, match="no _get_candidate_generator"):
        AssistedRecorder(object())


def test_hf_import_with_another_vocabulary_is_refused(tmp_path, capsys):
    model = FakeModel()
    with AssistedRecorder(model, clock=FakeClock()) as recorder:
        model.generate(np.zeros((1, 5), int), FakeAssistant(), matches=[2, 1])
    path = recorder.write(tmp_path / "hf.parquet")
    base = Profile.load(PROFILES / "glide-vicuna-7b-h800.json").to_dict()
    base["target"] = "fake-target"
    base["models"]["fake-target"] = {**base["models"]["vicuna-7b"], "vocab": 32000}
    base["drafters"]["fake-draft"] = {"kind": "draft_model"}
    profile = tmp_path / "base.json"
    profile.write_text(json.dumps(base))
    line = refused(capsys, "hf-assisted", path, "--profile", profile, "--out", tmp_path / "p.json")
    assert "vocabulary 32 differs" in line and "32000" in line


@pytest.mark.slow
def test_recorder_on_a_tiny_transformers_model_reproduces_the_example(tmp_path):
    pytest.importorskip("transformers")
    import importlib.util

    spec = importlib.util.spec_from_file_location("record_hf_assisted", EX / "record_hf_assisted.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    frame, meta = read_trace(module.record(tmp_path / "steps.parquet"), kind="step")
    committed, _ = read_trace(EX / "hf_assisted_steps.parquet", kind="step")
    assert frame["accepted"].tolist() == committed["accepted"].tolist()       # greedy, seeded: the same steps
    assert frame["accept_mask"].tolist() == committed["accept_mask"].tolist()
    ctx_after = frame["ctx_len"] + frame["accepted"]
    same_prompt = frame["prompt_id"].eq(frame["prompt_id"].shift(-1))
    assert (ctx_after[same_prompt] == frame["ctx_len"].shift(-1)[same_prompt]).all()
    assert meta.models == {"target": "tiny-llama-2l", "draft": "tiny-llama-1l"}
    room = 8 + 24 - 1 - frame["ctx_len"]               # every step drafts what it asks for, up to the length limit
    assert (frame["draft_forwards"] == np.minimum(module.DRAFT, room)).all()
    assert set(frame["config"]) == {'{"gamma": 4}'} and (committed["draft_forwards"] == frame["draft_forwards"]).all()
