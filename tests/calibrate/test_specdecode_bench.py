"""specdecode-bench: spans -> steps, per-position acceptance, lengths, vLLM's n-gram rule, bad input, the CLI.

Every file here is written by the test in the published layout (the study's files stay outside the
repository); the expected numbers are worked out by hand in the comments."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from calibrate.ingest import IngestOptions, ingest
from calibrate.ingest import specdecode_bench as sdb
from calibrate.ingest.specdecode_bench import chunks, decode_steps, length_stats
from common import atomic
from common.errors import InputError
from runtime.engine.prompt_lookup import match_continuation
from tests.calibrate.test_ingest import refused, run_cli
from traces.lookup_replay import lookup_spans
from traces.span_replay import ReplayRequest, SpanReplay, step_starts

SPANS = [1, 4, 3, 2, 1, 1, 3, 2, 1]          # nine generated positions
CLIPPED = [1, 5, 4]                           # spans that run past the output's end


def record(rid, prompt, output, ngram=None, eagle=None) -> dict:
    out = {"id": rid, "prompt_token_ids": prompt, "generated_token_ids": output}
    if ngram is not None:
        out["acc_ngram"] = {"acc_len": ngram}
    if eagle is not None:
        out["acc_eagle"] = {"acc_len": eagle}
    return out


def write(path: Path, records: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def two_requests() -> list[dict]:
    return [record("a", [5, 6, 7], list(range(100, 109)), ngram=SPANS, eagle=[1, 2, 1, 1]),
            record("b", list(range(20)), [1, 2, 3], ngram=CLIPPED, eagle=CLIPPED)]


def as_arrays(*spans) -> list[np.ndarray]:
    return [np.asarray(s, dtype=np.int16) for s in spans]


# ---- spans -> steps ---------------------------------------------------------------------------------
@pytest.mark.parametrize("k, expected", [
    (0, [1] * 9),                    # plain decoding
    (1, [1, 2, 2, 1, 2, 1]),         # pos 0 (prefill) 1; pos 1 min(4,2)=2; pos 3 min(2,2)=2; 5: 1; 6: 2; 8: 1
    (3, [1, 4, 1, 3]),               # pos 1 min(4,4)=4; pos 5: 1; pos 6: 3 -> 9
    (9, [1, 4, 1, 3])])              # no span is above 4: as k 3
def test_steps_follow_the_spans_for_each_k(k, expected):
    request = ReplayRequest("d", "a", 3, 9, {"ngram": np.asarray(SPANS, dtype=np.int16)})
    assert request.steps("ngram", k).tolist() == expected
    assert sum(expected) == request.output_len_of("ngram")


def test_last_step_is_clipped_at_the_outputs_end_and_requests_walk_apart():
    assert ReplayRequest("d", "b", 1, 3, {"e": np.asarray(CLIPPED, np.int16)}).steps("e", 3).tolist() == [1, 2]
    flat = np.asarray(SPANS + CLIPPED, dtype=np.int16)         # walked together, the second starts at its own 0
    starts, sizes = step_starts(flat, np.array([9, 3]), 3)
    assert starts.tolist() == [0, 1, 5, 6, 9, 10] and sizes.tolist() == [1, 4, 1, 3, 1, 2]


def test_the_walk_refuses_a_span_below_1_and_a_file_that_is_no_replay(tmp_path):
    with pytest.raises(InputError, match="a span below 1"):
        step_starts(np.asarray([1, 0, 1], np.int16), np.array([3]), 2)   # would never end
    atomic.write_parquet(tmp_path / "other.parquet", pd.DataFrame({"x": [1]}))
    with pytest.raises(InputError, match="not a span replay"):
        SpanReplay.read(tmp_path / "other.parquet")


def test_a_request_without_that_drafter_is_refused():
    with pytest.raises(InputError, match="no spans of drafter 'eagle'"):
        ReplayRequest("d", "a", 3, 9, {"ngram": np.asarray(SPANS, np.int16)}).steps("eagle", 1)


# ---- per-position acceptance ------------------------------------------------------------------------
def test_beta_and_tokens_per_step_over_the_decode_steps():
    # k 3 on SPANS: decode steps at pos 1 (r 4: positions 1-3 accepted), pos 5 (r 1: position 1 rejected),
    # pos 6 (r 3, 3 left: 1-2 accepted, 3 rejected at output[8]). beta 2/3, 2/2, 1/2; 8 tokens / 3 steps.
    alone = decode_steps(chunks(as_arrays(SPANS)), 3)
    assert alone == {"mean_tokens_per_step": round(8 / 3, 5), "steps": 3, "beta": [round(2 / 3, 4), 1.0, 0.5]}
    # CLIPPED at k 3: one step at pos 1, r 4 but 2 left: positions 1-2 accepted, none past the end.
    assert decode_steps(chunks(as_arrays(CLIPPED)), 3) == {"mean_tokens_per_step": 2.0, "steps": 1,
                                                            "beta": [1.0, 1.0, None]}
    both = decode_steps(chunks(as_arrays(SPANS, CLIPPED)), 3)
    assert both == {"mean_tokens_per_step": 2.5, "steps": 4, "beta": [0.75, 1.0, 0.5]}
    # k 1 on SPANS: decode steps at pos 1, 3, 5, 6, 8 of r 2, 2, 1, 2, 1: position 1 accepted 3 times in 5
    assert decode_steps(chunks(as_arrays(SPANS)), 1) == {"mean_tokens_per_step": 1.6, "steps": 5, "beta": [0.6]}


def test_beta_past_the_recorded_k_is_unknown():
    assert decode_steps(chunks(as_arrays(SPANS)), 5, recorded_k=3)["beta"][3:] == [None, None]


def test_chunked_walk_equals_one_walk(monkeypatch):
    rng = np.random.default_rng(3)
    arrays = [rng.integers(1, 6, size=n).astype(np.int16) for n in rng.integers(1, 40, size=30)]
    whole = decode_steps(chunks(arrays), 4)
    monkeypatch.setattr(sdb, "CHUNK_POSITIONS", 50)
    assert len(chunks(arrays)) > 5 and decode_steps(chunks(arrays), 4) == whole


def test_length_stats():
    stats = length_stats([3, 5, 9])
    assert stats["mean"] == 5.67 and stats["quantiles"]["p50"] == 5.0 and stats["quantiles"]["p100"] == 9.0
    assert stats["histogram"] == {"bin_starts": [1, 2, 4, 8], "counts": [0, 1, 1, 1]}   # [1,2) [2,4) [4,8) [8,16)


# ---- vLLM's n-gram proposer replayed ---------------------------------------------------------------
def spans_of(prompt, output, k=3, n_min=2, n_max=3):
    spans, proposed = lookup_spans(prompt, output, k, n_min, n_max)
    return spans.tolist(), proposed.tolist()


def test_longest_n_is_tried_first():
    # at position 1 the context ends 5 1 2: "1 2" first occurs at 0 (then 3 9 5), "5 1 2" at 4 (then 4 6 5)
    prompt, output = [1, 2, 3, 9, 5, 1, 2, 4, 6, 5, 1], [2, 4, 6, 7]
    assert spans_of(prompt, output, n_max=3)[0][1] == 3      # 4 6 accepted, 5 != 7, the target's 7
    assert spans_of(prompt, output, n_max=2)[0][1] == 1      # 3 != 4


def test_the_earliest_occurrence_is_taken():
    # "1 2" occurs at 0 (then 3 0) and at 5 (then 4): the earliest proposes 3 0 ...
    prompt = [1, 2, 3, 0, 0, 1, 2, 4, 0, 1]
    assert spans_of(prompt, [2, 4, 9], n_max=2)[0][1] == 1
    assert spans_of(prompt, [2, 3, 0], n_max=2)[0][1] == 2   # 3 0 accepted, clipped at the output's end


def test_nothing_matches_below_n_min_and_position_0_is_the_prefill():
    spans, proposed = spans_of([4, 1, 2, 3], [1, 2, 3, 9], n_min=2, n_max=3)
    assert proposed[1] == 0 and spans[1] == 1                 # context 4 1 2 3 1: "3 1" never occurred before
    assert spans_of([4, 1, 2, 3], [1, 2, 3, 9], n_min=1, n_max=1)[0][1] == 3   # n 1: "1" at 1, then 2 3 accepted
    # the prompt 1 2 3 1 2 ends with "1 2", then 3 1 2 as the output: the prefill's token is never speculated
    assert spans_of([1, 2, 3, 1, 2], [3, 1, 2, 5])[0][0] == 1


def test_the_proposal_stops_at_the_contexts_end_and_may_overlap_the_suffix():
    # context 5 6 5 6 at position 1: "5 6" at 0, followed by 5 6 only: two drafts though k is 5
    assert spans_of([5, 6, 5], [6, 5, 6, 5, 6, 5], k=5, n_min=2, n_max=2)[1][1] == 2
    # context 7 7 7: "7 7" at 0 overlaps the suffix at 1 and is followed by a 7
    spans, proposed = spans_of([7, 7], [7, 7, 7, 7], k=2, n_min=2, n_max=2)
    assert proposed[1] == 1 and spans[1] == 2


def test_span_is_capped_at_k_plus_1():
    prompt, output = [1, 2, 3, 4, 5, 6, 1], [2, 3, 4, 5, 6, 0]
    assert spans_of(prompt, output, k=2, n_min=2, n_max=2)[0][1] == 3
    assert spans_of(prompt, output, k=9, n_min=2, n_max=2)[0][1] == 5       # 3 4 5 6 accepted, 1 != 0


def test_the_index_agrees_with_the_plain_search():
    rng = np.random.default_rng(0)
    for _ in range(40):
        prompt, output = rng.integers(0, 3, size=12).tolist(), rng.integers(0, 3, size=25).tolist()
        spans, proposed = lookup_spans(prompt, output, 4, 2, 4)
        full = prompt + output
        for i in range(1, len(output)):
            drafts = match_continuation(full[:len(prompt) + i], 2, 4, 4)
            hits = next((j for j, (d, t) in enumerate(zip(drafts, output[i:])) if d != t), min(len(drafts), len(output) - i))
            assert (spans[i], proposed[i]) == (min(hits + 1, len(output) - i), len(drafts))


def test_replay_agreement_counts_past_end_differences_apart(tmp_path):
    # output 2 1 2 9 after prompt 1 2 1, n 2: position 1 proposes 1 2 (both accepted: 3), position 2
    # proposes 2 1 (2 accepted, then 9: 2), position 3 proposes 1 2 1 (1). The file says 1 2 3 1: its 2
    # at position 1 differs inside the output; its 3 at position 2 runs past the end (2 tokens left).
    # The second request never matches (spans 1, nothing proposed), as its file says.
    path = write(tmp_path / "combined_t.jsonl", [record("a", [1, 2, 1], [2, 1, 2, 9], ngram=[1, 2, 3, 1]),
                                                 record("b", [7, 8], [9, 10, 11], ngram=[1, 1, 1])])
    assert spans_of([1, 2, 1], [2, 1, 2, 9], n_min=2, n_max=2)[0] == [1, 3, 2, 1]
    result = ingest("specdecode-bench", [path], IngestOptions(ngram_windows=((2, 2),)))
    agreement = result.summary["datasets"]["t"]["ngram_replay"]["2-2"]
    assert agreement["k"] == 2 and agreement["positions"] == 7
    assert agreement["differ_inside_output"] == 1 and agreement["differ_past_output_end"] == 1
    assert agreement["identical_share"] == round(5 / 7, 6) and agreement["identical_within_output_share"] == round(6 / 7, 6)
    # k 1: a walks 1 | 2 | 1 in both, b 1 | 1 | 1: 5 tokens in 4 decode steps; k 3 and 5: the replay takes
    # a's 3 at once (5 in 3), the file 2 then 1
    assert agreement["mean_tokens_per_step"] == {"k": [1, 3, 5], "recorded": [1.25, 1.25, 1.25],
                                                 "replayed": [1.25, 1.66667, 1.66667], "difference": [0.0, 0.41667, 0.41667]}
    # a proposes at its 3 decode positions, b at none of 2; of the 3 replayed spans of 1 (a's last, b's two) one proposed
    assert agreement["proposal_share"] == 0.6 and agreement["proposal_share_when_span_1"] == round(1 / 3, 5)


# ---- bad input: one line naming file, line and field; exit 2; nothing written ---------------------
BAD = {
    "span below 1": ([record("a", [1], [2, 3, 4], ngram=[1, 0, 1])], ":1: field 'acc_ngram.acc_len[1]' must be an integer >= 1, got 0"),
    "span not an integer": ([record("a", [1], [2, 3], ngram=[1, 1.5])], "field 'acc_ngram.acc_len[1]' must be an integer >= 1, got 1.5"),
    "lengths differ": ([record("a", [1], [2, 3], ngram=[1, 1]), record("b", [1], [2, 3, 4], ngram=[1, 1])],
                       ":2: field 'acc_ngram.acc_len' has 2 spans but 'generated_token_ids' 3 tokens"),
    "token not an integer": ([record("a", [1, "x"], [2], ngram=[1])], "field 'prompt_token_ids[1]' must be an integer >= 0"),
    "no spans": ([record("a", [1], [2])], ":1: missing field 'acc_ngram' or 'acc_eagle'"),
    "other fields": ([{"text": "hello", "score": 1}], ":1: not a specdecode-bench record"),
    "spec-bench answer": ([{"question_id": 1, "answer_id": "x", "model_id": "m", "choices": []}], ":1: a spec-bench record"),
    "drafters change": ([record("a", [1], [2], ngram=[1]), record("b", [1], [2], ngram=[1], eagle=[1])],
                        ":2: spans of eagle, ngram, but the file's first line has ngram"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_one_line_exit_2_nothing_written(tmp_path, capsys, case):
    records, expected = BAD[case]
    path, out = write(tmp_path / "combined_x.jsonl", records), tmp_path / "out.parquet"
    line = refused(capsys, "specdecode-bench", path, "--out", out)
    assert f"{path}" in line and expected in line and not out.exists()


def test_an_empty_file_and_a_parquet_file_are_refused(tmp_path, capsys):
    empty = tmp_path / "combined_e.jsonl"
    empty.write_text("\n")
    assert refused(capsys, "specdecode-bench", empty).endswith(f"{empty}: no JSON object in the file")
    replay = tmp_path / "r.parquet"
    SpanReplay([ReplayRequest("d", "a", 1, 1, {"ngram": np.ones(1, np.int16)})], {"ngram": 0}).write(replay)
    assert "a parquet file" in refused(capsys, "specdecode-bench", replay)


def test_eagle_spans_of_another_length_are_eagles_own_run(tmp_path):
    result = ingest("specdecode-bench", [write(tmp_path / "combined_t.jsonl", two_requests())], IngestOptions())
    eagle = result.summary["datasets"]["t"]["drafters"]["eagle"]
    assert eagle["requests_other_length"] == 1 and eagle["output_len_mean"] == 3.5
    assert any("EAGLE's own run" in line for line in result.not_provided)
    assert result.replay.requests[0].steps("eagle", 1).sum() == 4


def test_dataset_names_and_bad_options(tmp_path, capsys):
    one, two = write(tmp_path / "combined_a.jsonl", two_requests()), write(tmp_path / "b.jsonl", two_requests())
    assert list(ingest("specdecode-bench", [one, two], IngestOptions()).summary["datasets"]) == ["a", "b"]
    assert list(ingest("specdecode-bench", [one], IngestOptions(dataset="x")).summary["datasets"]) == ["x"]
    assert "--dataset names one file's dataset" in refused(capsys, "specdecode-bench", one, two, "--dataset", "x")
    assert "two files of dataset 'a'" in refused(capsys, "specdecode-bench", one, one)
    assert "argument --ngram-window: '5:3': needs 1 <= NMIN <= NMAX" in refused(
        capsys, "specdecode-bench", one, "--ngram-window", "5:3")
    assert "argument --k: '0-3': expected draft lengths >= 1" in refused(capsys, "specdecode-bench", one, "--k", "0-3")


# ---- the CLI end to end ---------------------------------------------------------------------------
def test_cli_prints_the_table_and_warns_past_the_recorded_k(tmp_path, capsys):
    path = write(tmp_path / "combined_t.jsonl", two_requests())
    code, out, err = run_cli(capsys, "specdecode-bench", path, "--k", "1,3,5")
    lines = out.splitlines()
    ngram = lines.index("mean tokens per decode step, ngram (k = draft length):")
    assert code == 0 and lines[ngram + 1].split() == ["dataset", "k=1", "k=3", "k=5"]
    assert lines[ngram + 2].split() == ["t", "1.667", "2.500", "2.500"]   # k 1: SPANS 8 tokens / 5 steps, CLIPPED 2 / 1
    assert "n-gram replay t (vLLM rule, n 3-7, k 4)" in out
    assert err.count("warning: ") == 2 and "k 5 past the recorded ngram proposer's k (4" in err


def test_cli_writes_the_statistics_and_the_replay(tmp_path, capsys, monkeypatch):
    path = write(tmp_path / "combined_t.jsonl", two_requests())
    monkeypatch.setitem(sdb.PUBLISHED, sdb.hashlib.sha256(Path(path).read_bytes()).hexdigest(), "data/x.jsonl")
    code, out, _ = run_cli(capsys, "specdecode-bench", path, "--json", "--ngram-window", "none")
    stats = json.loads(out)
    assert code == 0 and stats["recorded_k"] == {"eagle": 4, "ngram": 4}
    assert stats["source"]["files"][0] | {"sha256": ""} == {"dataset": "t", "file": "combined_t.jsonl", "sha256": "",
                                                            "requests": 2, "repository": sdb.REPOSITORY,
                                                            "commit": sdb.DATA_COMMIT, "path": "data/x.jsonl"}
    t = stats["datasets"]["t"]
    ngram = t["drafters"]["ngram"]["by_k"]
    assert "ngram_replay" not in t and ngram["k"] == [1, 2, 3, 4] and ngram["beta"][2] == [0.75, 1.0, 0.5]
    assert ngram["mean_tokens_per_step"][2] == 2.5 and ngram["steps"][2] == 4
    assert t["prompt_len"]["quantiles"]["p0"] == 3 and t["output_len"]["mean"] == 6.0
    code, _, _ = run_cli(capsys, "specdecode-bench", path, "--out", tmp_path / "s.json")
    assert code == 0 and json.loads((tmp_path / "s.json").read_text())["datasets"]["t"]["requests"] == 2
    code, out, _ = run_cli(capsys, "specdecode-bench", path, "--out", tmp_path / "r.parquet")
    assert code == 0 and "wrote span replay" in out
    replay = SpanReplay.read(tmp_path / "r.parquet")
    assert replay.recorded_k == {"eagle": 4, "ngram": 4} and replay.datasets == ["t"]
    assert [r.steps("ngram", 1).tolist() for r in replay.of("t")] == [[1, 2, 2, 1, 2, 1], [1, 2]]
    assert (replay.requests[1].prompt_len, replay.requests[1].output_len, replay.requests[0].output_len_of("eagle")) == (20, 3, 4)
    assert "exists" in refused(capsys, "specdecode-bench", path, "--out", tmp_path / "r.parquet")


def test_the_committed_example_replays_exactly():
    example = Path(__file__).resolve().parents[2] / "examples" / "ingest" / "specdecode_bench.jsonl"
    result = ingest("specdecode-bench", [str(example)], IngestOptions(dataset="example"))
    assert result.summary["recorded_k"] == {"eagle": 5, "ngram": 4}
    agreement = result.summary["datasets"]["example"]["ngram_replay"]["3-7"]
    assert agreement["identical_share"] == 1.0 and agreement["positions"] == 31


def test_another_reader_names_this_format(capsys):
    example = Path(__file__).resolve().parents[2] / "examples" / "ingest" / "specdecode_bench.jsonl"
    assert "a specdecode-bench record (fields 'prompt_token_ids', 'generated_token_ids', 'acc_ngram', 'acc_eagle'), " \
           "not spec-bench" in refused(capsys, "spec-bench", example)
