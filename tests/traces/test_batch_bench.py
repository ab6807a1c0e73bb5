"""`python -m traces.batch_bench` on a tiny model: both tables, the CSV, and bad input in one line."""
from __future__ import annotations

import json

import pandas as pd
import pytest
import torch

from runtime.prompts import Prompt
from traces import batch_bench


@pytest.fixture(autouse=True)
def threads():
    """The bench sets torch's thread count (`--threads`, default 1); put it back after each test."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.fixture
def prompts(tmp_path):
    path = tmp_path / "prompts.jsonl"
    texts = ["hello world hello world", "the quick brown fox, the quick brown fox", "abc abc abc", "batches"]
    path.write_text("".join(json.dumps({"id": i, "prompt": t}) + "\n" for i, t in enumerate(texts)))
    return path


def bench(prompts, *extra):
    return batch_bench.main(["--target", "tiny", "--prompts", str(prompts), "--batches", "1,2,4",
                             "--max-new-tokens", "6", *extra])


def test_the_bench_prints_and_writes_both_tables(tmp_path, prompts, capsys):
    out = tmp_path / "bench.csv"
    code = bench(prompts, "--drafter", "layers:1", "--method", "sd g2", "--method", "prompt_lookup g3 nmin1 nmax2",
                 "--out", str(out))
    assert code == 0
    printed = capsys.readouterr().out
    assert "tokens_per_s" in printed and "over_plain" in printed
    table = pd.read_csv(out)
    runs = table[table.table == "runs"]
    assert set(runs.method) == {"ar", "sd g2", "prompt_lookup g3 nmin1 nmax2"} and sorted(set(runs.batch)) == [1, 2, 4]
    assert (runs.tokens == runs.batch * 6).all() and (runs[runs.method == "ar"].speedup == 1).all()
    verify = table[table.table == "verify"]
    assert set(verify.width) >= {1, 3} and (verify.verify_s > 0).all()


def test_speedups_and_verify_costs_are_over_plain_decoding_at_the_same_batch():
    steps = pd.DataFrame([
        ("ar", 2, 2, 1, 2, 1.0, 1.0, 0.5), ("ar", 2, 2, 1, 2, 3.0, 3.0, 0.0), ("pl", 2, 2, 3, 4, 5.0, 6.0, 0.0),
        ("ar", 4, 4, 1, 4, 4.0, 4.0, 0.0), ("pl", 4, 4, 3, 6, 10.0, 12.0, 0.0)],
        columns=["method", "batch", "rows", "width", "tokens", "verify_s", "decode_s", "prefill_s"])
    runs = batch_bench.summary(steps).set_index(["method", "batch"])
    assert runs.loc[("ar", 2)].tokens_per_s == 1.0 and runs.loc[("pl", 2)].speedup == pytest.approx(4 / 6)
    assert runs.loc[("pl", 4)].tokens_per_row_step == 1.5 and runs.loc[("ar", 2)].prefill_s == 0.5
    costs = batch_bench.verify_costs(steps).set_index(["batch", "width"])
    assert costs.over_plain.to_dict() == {(2, 1): 1.0, (2, 3): 2.5, (4, 1): 1.0, (4, 3): 2.5}


def test_requests_take_the_datasets_in_turn():
    def p(name, i):
        return Prompt(f"{name}/{i}", ("text",), name)

    mixed = batch_bench.in_turn([p("a", 0), p("a", 1), p("a", 2), p("b", 0)])
    assert [x.prompt_id for x in mixed] == ["a/0", "b/0", "a/1", "a/2"]


@pytest.mark.parametrize("extra,needle", [
    (["--method", "coral"], "--method coral: the batch engine decodes ar, "),
    (["--method", "sd g2"], "--method sd needs --drafter"),
    (["--batches", "1,8"], "--prompts gives 4 prompts; batch 8 needs as many"),
    (["--max-new-tokens", "0"], "--max-new-tokens must be >= 1, got 0"),
    (["--batches", "0"], "--batches needs integers >= 1"),
])
def test_bad_input_one_line(prompts, capsys, extra, needle):
    assert bench(prompts, *extra) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and needle in err and "\n" not in err
