"""`python -m traces.record` and `python -m traces.check_replay` on tiny random models."""
from __future__ import annotations

import json

import pandas as pd
import pytest
import torch

from common.errors import InputError
from traces import check_replay, record, replay, schema
from runtime.engine import Sampling

MAX_NEW = 24


@pytest.fixture
def prompts(tmp_path):
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps({"id": i, "prompt": text}) + "\n" for i, text in
                            enumerate(["hello world", "the quick brown fox", "speculative decoding", "abc"])))
    return path


def rec(tmp_path, prompts, *extra, out="run.parquet"):
    target = tmp_path / out
    code = record.main(["--target", "tiny", "--drafter", "layers:1", "--prompts", str(prompts), "--quiet",
                        "--max-new-tokens", str(MAX_NEW), "--threads", "1", "--out", str(target), *extra])
    return code, target


def test_step_rows_resume_and_refuse_other_runs(tmp_path, prompts, capsys):
    code, out = rec(tmp_path, prompts, "--method", "mcsd", "--config", '{"k": "3x2"}', "--limit", "2")
    assert code == 0
    first, meta = schema.read_trace(out, "step")
    assert sorted(first.prompt_id.unique()) == ["prompts/0", "prompts/1"]
    assert (first.groupby("prompt_id").accepted.sum() == MAX_NEW).all()
    assert (first.method == "mcsd").all() and json.loads(first.config[0]) == {"k": [3, 2], "replacement": True}
    assert meta.models == {"target": "tiny", "drafter": "layers:1"} and meta.extra["run_key"]["max_new_tokens"] == MAX_NEW
    assert meta.extra["run_key"]["config"] == {"k": [3, 2], "replacement": True}
    assert meta.extra["run_key"]["label"] == "mcsd k3x2 repl"
    code, out = rec(tmp_path, prompts, "--method", "mcsd", "--config", "mcsd k3x2")  # the same run, as a label
    assert code == 0
    second, _ = schema.read_trace(out, "step")
    assert second.prompt_id.nunique() == 4
    kept = second[second.prompt_id.isin(["prompts/0", "prompts/1"])].reset_index(drop=True)
    pd.testing.assert_frame_equal(kept, first)  # resumed: the first two prompts were not rerun
    before = out.read_bytes()
    code, _ = rec(tmp_path, prompts, "--method", "sd", "--config", '{"gamma": 2}')
    assert code == 2 and "different recording run" in capsys.readouterr().err
    assert out.read_bytes() == before


def test_a_run_resumed_with_other_prompts_of_its_sets_adds_them(tmp_path, prompts):
    """Which prompts of a set a run records is not part of its identity: a TokenTrace extended with
    more calibration prompts (experiments.smollm2_cpu --token-prompts) keeps its rows and adds."""
    code, out = rec(tmp_path, f"{prompts}:2-2", "--method", "sd", "--teacher-forced")
    assert code == 0
    first, meta = schema.read_trace(out, "token")
    assert first.prompt_id.unique().tolist() == ["prompts/1"] and meta.extra["run_key"]["prompts"] == str(prompts)
    code, out = rec(tmp_path, f"{prompts}:2-2,{prompts}:4-4", "--method", "sd", "--teacher-forced")
    assert code == 0
    second, _ = schema.read_trace(out, "token")
    assert second.prompt_id.unique().tolist() == ["prompts/1", "prompts/3"]
    pd.testing.assert_frame_equal(second[second.prompt_id == "prompts/1"].reset_index(drop=True), first)


def test_teacher_forced_rows_replay_the_real_runs(tmp_path, prompts):
    code, tokens_path = rec(tmp_path, prompts, "--method", "sd", "--teacher-forced", out="tok.parquet")
    assert code == 0
    tokens, meta = schema.read_trace(tokens_path, "token")
    assert meta.kind == "token" and len(tokens) == 4 * MAX_NEW
    table = replay.TokenTable.from_frame(tokens)
    for method, config in [("sd", {"gamma": 3}), ("mcsd", {"k": "4x2x1"}), ("cape", {"gamma": 3})]:
        code, steps_path = rec(tmp_path, prompts, "--method", method, "--config", json.dumps(config),
                               out=f"{method}.parquet")
        steps, _ = schema.read_trace(steps_path, "step")
        replayed = replay.replay_steps(table, method, config)
        assert replayed["accepted"].tolist() == steps.sort_values(["prompt_id", "step"])["accepted"].tolist()


def test_sampled_runs_are_seeded(tmp_path, prompts):
    runs = [schema.read_trace(rec(tmp_path, prompts, "--method", "sd", "--temperature", "0.9", "--limit", "2",
                                  "--seed", str(seed), out=f"s{i}.parquet")[1], "step")[0]
            for i, seed in enumerate([5, 5, 6])]
    key = ["prompt_id", "step", "accepted"]
    assert runs[0][key].equals(runs[1][key])
    assert not runs[0][key].equals(runs[2][key])


def test_token_statistics():
    p_logits = torch.tensor([[2.0, 1.0, 0.0], [0.0, 0.0, 3.0]])
    q_logits = torch.tensor([[1.0, 1.0, 0.0], [0.0, 2.0, 1.0]])
    tokens = torch.tensor([1, 2])
    greedy = record.token_statistics(p_logits, q_logits, tokens, Sampling())
    assert greedy["draft_rank"] == [1, 1]          # tie at position 0 goes to the lower id
    assert greedy["alpha"] == [1.0, 0.0]            # drafter argmax 0 = target argmax 0; then 1 != 2
    warm = record.token_statistics(p_logits, q_logits, tokens, Sampling(temperature=1.0))
    p, q = torch.softmax(p_logits.double(), -1), torch.softmax(q_logits.double(), -1)
    assert warm["alpha"] == pytest.approx(torch.minimum(p, q).sum(-1).tolist())
    assert warm["target_entropy"][1] == pytest.approx(float(-(p[1] * p[1].log()).sum()))
    assert warm["draft_q_token"] == pytest.approx([float(q[0, 1]), float(q[1, 2])])


def test_check_replay_agrees_on_tiny_models(tmp_path, prompts, capsys):
    code = check_replay.main(["--target", "tiny", "--drafter", "layers:1", "--prompts", f"{prompts}:3",
                              "--max-new-tokens", "20", "--out", str(tmp_path / "cr"), "--methods",
                              'sd:{"gamma": 2}', "mcsd k2x2", 'cape:{"gamma": 3}',
                              'kangaroo:{"gamma": 3, "eta": 0.2, "exit_layer": 1}'])
    assert code == 0
    steps = pd.read_csv(tmp_path / "cr" / "steps.csv")
    assert steps["agree"].all() and steps.method.nunique() == 4
    assert set(steps.config) == {"sd g2", "mcsd k2x2 repl", "cape g3 S88886666442", "kangaroo L1 g3 eta0.2"}
    assert "Agreement" in (tmp_path / "cr" / "report.md").read_text()


def test_check_replay_refuses_a_run_where_no_draft_was_accepted(tmp_path, prompts, capsys):
    """Another random tiny model as drafter: sd g2 never has a draft accepted, so every step agrees
    trivially; the run is refused (exit 2, files kept), and beside a configuration that did accept
    one, it is named as not checked."""
    args = ["--target", "tiny", "--drafter", "tiny:7", "--prompts", f"{prompts}:3", "--max-new-tokens", "20"]
    code = check_replay.main([*args, "--out", str(tmp_path / "none"), "--methods", 'sd:{"gamma": 2}'])
    err = capsys.readouterr().err
    assert code == 2 and "no draft of drafter 'tiny:7' was accepted in" in err and "checks nothing" in err
    assert "**Not checked: sd g2**" in (tmp_path / "none" / "report.md").read_text()
    code = check_replay.main([*args, "--out", str(tmp_path / "some"), "--methods", 'sd:{"gamma": 2}', "mcsd k2x2"])
    assert code == 0 and "warning: not checked (no draft accepted): sd g2" in capsys.readouterr().err


@pytest.mark.parametrize("method,needle", [
    ("glide", "glide cannot be checked"), ("lookahead", "lookahead cannot be checked"), ("beam", "unknown method 'beam'"),
    ('sd:{"gama": 2}', "unknown config key 'gama'")])
def test_check_replay_refuses_what_it_cannot_check(tmp_path, capsys, method, needle):
    code = check_replay.main(["--target", "./no/such/model", "--out", str(tmp_path / "cr"), "--methods", method])
    err = capsys.readouterr().err
    assert code == 2 and needle in err and not (tmp_path / "cr").exists()


@pytest.mark.parametrize("extra,needle", [
    (["--method", "medusa"], "unknown method"),
    (["--method", "mcsd", "--config", '{"k": "4x0"}'], "factors must be >= 1"),
    (["--method", "mcsd", "--config", '{"k": "abc"}'], "k-configuration 'abc'"),
    (["--method", "sd", "--config", '{"gamma": 0}'], "'gamma' must be in 1"),
    (["--method", "sd", "--config", "gamma=3"], "is not JSON nor a 'sd ...' label"),
    (["--method", "sd", "--config", '{"gama": 8}'], "unknown config key 'gama'"),
    (["--method", "mcsd", "--config", "mcsd k4x2 sideways"], "token 'sideways'"),
    (["--method", "sd", "--target", "./no/such/model"], "model path not found"),
    (["--method", "sd", "--drafter", "random:llama-68m"], "vocabulary size"),
    (["--method", "lookahead", "--teacher-forced"], "--teacher-forced"),
    (["--method", "sd", "--prompts", "NOTJSONL"], "is not JSON"),
    (["--method", "sd", "--limit", "0"], "--limit must be >= 1, got 0"),
    (["--method", "sd", "--batch", "0"], "--batch must be >= 1, got 0"),
    (["--method", "sd", "--batch", "2", "--teacher-forced"], "does not go with --teacher-forced"),
    (["--method", "lookahead", "--batch", "2"], "--batch decodes ar, "),
])
def test_bad_input_one_line_exit_2_nothing_written(tmp_path, prompts, capsys, extra, needle):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("id,prompt\n1,hello\n")
    extra = [str(bad) if e == "NOTJSONL" else e for e in extra]
    code, out = rec(tmp_path, prompts, *extra)
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("error: ") and needle in err and "\n" not in err
    assert not out.exists()


def test_a_batched_run_writes_a_row_per_step_and_row(tmp_path, prompts, capsys):
    """--batch: the prompts decoded three rows at a time (the fourth joins when one leaves), each
    request's steps those of its own step-mode recording; written once, not resumed."""
    code, out = rec(tmp_path, prompts, "--method", "sd", "--config", '{"gamma": 3}', "--batch", "3")
    assert code == 0
    frame, meta = schema.read_trace(out, "batch_step")
    assert meta.extra["run_key"]["batch"] == 3 and meta.extra["run_key"]["mode"] == "batch_step"
    assert frame.batch.max() == 3 and frame.joined.sum() == 4 and frame[frame.joined].step.max() > 0
    code, alone = rec(tmp_path, prompts, "--method", "sd", "--config", '{"gamma": 3}', out="alone.parquet")
    steps, _ = schema.read_trace(alone, "step")
    for prompt_id, rows in frame.groupby("request_id"):
        own = steps[steps.prompt_id == prompt_id]
        assert rows.accepted.tolist() == own.accepted.tolist() and rows.ctx_len.tolist() == own.ctx_len.tolist()
    code, _ = rec(tmp_path, prompts, "--method", "sd", "--config", '{"gamma": 3}', "--batch", "3")
    assert code == 2 and "already exists" in capsys.readouterr().err


def test_batch_step_tables_are_checked(tmp_path, prompts):
    code, out = rec(tmp_path, prompts, "--method", "prompt_lookup", "--batch", "2")
    frame, _ = schema.read_trace(out, "batch_step")
    first = frame.index[frame.step == 0]
    bad_frames = {
        "column 'verify_s' differs between the rows of step 0": frame.assign(
            verify_s=frame.verify_s.where(frame.index != first[0], 9.0)),
        "step 0 has 1 rows, its batch column says 2": frame.drop(index=first[1]),
        "step 0 holds a request twice": frame.assign(request_id=frame.request_id.where(frame.index != first[1],
                                                                                       frame.request_id[first[0]])),
        "step 0 has verify_width 9, its widest tree": frame.assign(verify_width=frame.verify_width.where(frame.step != 0, 9)),
        "column 'joined' must hold booleans": frame.assign(joined=1),
        "column 'prefill_s' must be >= 0": frame.assign(prefill_s=-1.0),
    }
    for needle, bad in bad_frames.items():
        with pytest.raises(InputError, match=needle):
            schema.validate(bad, "batch_step")


def test_last_step_ends_at_max_new_tokens(tmp_path, prompts):
    # the drafter is the whole tiny target: every draft is accepted, 5 tokens a step, 24 = 4 x 5 + 4
    code, out = rec(tmp_path, prompts, "--method", "sd", "--config", '{"gamma": 4}', "--limit", "1")
    assert code == 0
    code = record.main(["--target", "tiny", "--drafter", "layers:2", "--prompts", str(prompts), "--quiet",
                        "--limit", "1", "--max-new-tokens", str(MAX_NEW), "--method", "sd", "--config",
                        '{"gamma": 4}', "--out", str(tmp_path / "full.parquet")])
    steps, _ = schema.read_trace(tmp_path / "full.parquet", "step")
    assert steps["accepted"].tolist() == [5, 5, 5, 5, 4]


def test_output_steps_cut_at_eos():
    from runtime.engine import Generation, StepRecord

    def step(i, accepted):
        return StepRecord(i, 10, 1, 0.0, 2, 0.0, 0.0, accepted, [True], [0.5])

    # the engine committed 5 + 5 + 5 tokens, but EOS was the 12th: the output keeps 12
    out = Generation(prompt_len=3, tokens=list(range(12)), steps=[step(0, 5), step(1, 5), step(2, 5), step(3, 1)],
                     seconds=0.0)
    assert [a for _, a in record.output_steps(out)] == [5, 5, 2]


def test_second_turn_prompts_include_the_first_answer(tmp_path):
    path = tmp_path / "chat.jsonl"
    path.write_text(json.dumps({"id": "c", "turns": ["first question", "and a second one"]}) + "\n")
    common = ["--target", "tiny", "--drafter", "layers:1", "--prompts", str(path), "--quiet", "--method", "sd",
              "--max-new-tokens", "8"]
    assert record.main([*common, "--turn", "2", "--out", str(tmp_path / "t2.parquet")]) == 0
    assert record.main([*common, "--out", str(tmp_path / "t1.parquet")]) == 0
    t1, _ = schema.read_trace(tmp_path / "t1.parquet", "step")
    t2, meta = schema.read_trace(tmp_path / "t2.parquet", "step")
    assert meta.extra["run_key"]["turn"] == 2
    # turn 2 sees turn 1, its 8-token answer and turn 2: a longer context than turn 1 alone
    assert t2["ctx_len"].iloc[0] > t1["ctx_len"].iloc[0] + 8
