"""training.data: prompts, leak check, batched generation, corpus cache, target signals."""
from __future__ import annotations

import json

import pytest
import torch

from tests.training.fixtures import TINY_CORPUS, tiny_target
from common.errors import InputError
from training import data as D


def test_prompts_are_seeded_distinct_and_mixed():
    a = D.instruction_prompts(40, 0.5, seed=1)
    assert a == D.instruction_prompts(40, 0.5, seed=1)
    assert a != D.instruction_prompts(40, 0.5, seed=2)
    assert len(set(a)) == 40
    assert sum("Python" in p for p in a) == 20


def test_leak_check_finds_planted_evaluation_text_only():
    evals = D.evaluation_texts()
    assert len(evals) > 200                       # MT-Bench turns + HumanEval prompts
    clean = D.instruction_prompts(120, 0.5, seed=0)
    assert D.find_leaks(clean, evals) == []
    planted = "Here is some text. " + " ".join(evals[0].split()[3:12]) + " and more."
    assert len(evals[0].split()) >= 12
    leaks = D.find_leaks([clean[0], planted], evals)
    assert [i for i, _ in leaks] == [1]
    assert D.find_leaks(["the quick brown fox"], ["The quick brown fox"], n_words=8) == [(0, "the quick brown fox")]


def test_batched_generation_equals_one_prompt_at_a_time():
    model = tiny_target().model
    prompts = [[1, 2, 3], [4, 5, 6, 7, 8, 9, 10], [11], [12, 13, 14, 15]]
    batched = D.generate_greedy(model, prompts, 12, eos_token_id=None)
    single = [D.generate_greedy(model, [p], 12, eos_token_id=None)[0] for p in prompts]
    assert batched == single
    assert all(len(g) == 12 for g in batched)
    eos = batched[1][3]
    stopped = D.generate_greedy(model, prompts, 12, eos_token_id=eos)
    assert stopped[1] == batched[1][: batched[1].index(eos) + 1]


def test_corpus_is_deterministic_cached_and_hash_checked(tmp_path):
    target = tiny_target()
    first = D.build_corpus(target, TINY_CORPUS, cache_dir=tmp_path, log=lambda *_: None)
    files = list(tmp_path.glob("corpus-*.json"))
    assert len(files) == 1
    again = D.build_corpus(target, TINY_CORPUS, cache_dir=tmp_path)
    fresh = D.build_corpus(target, TINY_CORPUS, cache_dir=None, log=lambda *_: None)
    assert first.docs == again.docs == fresh.docs and first.splits == fresh.splits
    assert {"train", "eval"} == set(first.splits) and {"generated", "edit", "source"} == set(first.kinds)
    raw = json.loads(files[0].read_text())
    raw["docs"][0][0] = (raw["docs"][0][0] + 1) % 64
    files[0].write_text(json.dumps(raw))
    with pytest.raises(InputError, match="content hash"):
        D.build_corpus(target, TINY_CORPUS, cache_dir=tmp_path)


def test_signals_match_the_target_forward(tmp_path):
    target = tiny_target()
    ids = D.windows([[i % 64 for i in range(100)], list(range(50))], 30)
    assert ids.shape == (5, 30)
    spec = D.SignalSpec(topk=4, hidden_layers=(1, 2), kv_layers=(1,))
    got = D.target_signals(target, ids, spec, cache_dir=tmp_path, batch=2)
    cached = D.target_signals(target, ids, spec, cache_dir=tmp_path, batch=2)
    assert all(torch.equal(got[k], cached[k]) for k in got)
    model = target.model
    cache = model.new_cache(batch=5, capacity=30)
    out = model(ids, cache, output_hidden_states=True)
    logp = torch.log_softmax(out.logits.float(), -1)
    assert torch.equal(got["topk_ids"][..., 0], logp.argmax(-1))
    torch.testing.assert_close(got["topk_logp"], logp.topk(4, -1).values)
    torch.testing.assert_close(got["hidden.2"].double(), out.hidden, atol=0.05, rtol=0.02)
    torch.testing.assert_close(got["k.1"].double(), cache.layer_kv(1)[0], atol=0.05, rtol=0.02)
    with pytest.raises(InputError, match="hidden layer 3"):
        D.compute_signals(model, ids, D.SignalSpec(hidden_layers=(3,)))


def test_shared_spec_serves_every_kind_from_one_pass():
    shared = D.shared_spec(30)
    assert shared.covers(D.SignalSpec(8, (2, 30), (29,)))
    assert not shared.covers(D.SignalSpec(16))
    assert D.shared_spec(2) == D.SignalSpec(8, (1, 2), (0, 1))


def test_bad_corpus_config_is_one_line_input_error():
    with pytest.raises(InputError, match="eval_fraction"):
        D.CorpusConfig(eval_fraction=1.5)
