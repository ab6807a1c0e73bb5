"""training.corpus: prompts, leak check, batched generation, the corpus and its cache."""
from __future__ import annotations

import json

import pytest

from tests.training.fixtures import TINY_CORPUS, tiny_target
from common.errors import InputError
from training import corpus as C


def test_prompts_are_seeded_distinct_and_mixed():
    a = C.instruction_prompts(40, 0.5, seed=1)
    assert a == C.instruction_prompts(40, 0.5, seed=1)
    assert a != C.instruction_prompts(40, 0.5, seed=2)
    assert len(set(a)) == 40
    assert sum("Python" in p for p in a) == 20


def test_leak_check_finds_planted_evaluation_text_only():
    evals = C.evaluation_texts()
    assert len(evals) > 200                       # MT-Bench turns + HumanEval prompts
    clean = C.instruction_prompts(120, 0.5, seed=0)
    assert C.find_leaks(clean, evals) == []
    planted = "Here is some text. " + " ".join(evals[0].split()[3:12]) + " and more."
    assert len(evals[0].split()) >= 12
    leaks = C.find_leaks([clean[0], planted], evals)
    assert [i for i, _ in leaks] == [1]
    assert C.find_leaks(["the quick brown fox"], ["The quick brown fox"], n_words=8) == [(0, "the quick brown fox")]


def test_batched_generation_equals_one_prompt_at_a_time():
    model = tiny_target().model
    prompts = [[1, 2, 3], [4, 5, 6, 7, 8, 9, 10], [11], [12, 13, 14, 15]]
    batched = C.generate_greedy(model, prompts, 12, eos_token_id=None)
    single = [C.generate_greedy(model, [p], 12, eos_token_id=None)[0] for p in prompts]
    assert batched == single
    assert all(len(g) == 12 for g in batched)
    eos = batched[1][3]
    stopped = C.generate_greedy(model, prompts, 12, eos_token_id=eos)
    assert stopped[1] == batched[1][: batched[1].index(eos) + 1]


def test_corpus_is_deterministic_cached_and_hash_checked(tmp_path):
    target = tiny_target()
    first = C.build_corpus(target, TINY_CORPUS, cache_dir=tmp_path, log=lambda *_: None)
    files = list(tmp_path.glob("corpus-*.json"))
    assert len(files) == 1
    again = C.build_corpus(target, TINY_CORPUS, cache_dir=tmp_path)
    fresh = C.build_corpus(target, TINY_CORPUS, cache_dir=None, log=lambda *_: None)
    assert first.docs == again.docs == fresh.docs and first.splits == fresh.splits
    assert {"train", "eval"} == set(first.splits) and {"generated", "edit", "source"} == set(first.kinds)
    raw = json.loads(files[0].read_text())
    raw["docs"][0][0] = (raw["docs"][0][0] + 1) % 64
    files[0].write_text(json.dumps(raw))
    with pytest.raises(InputError, match="content hash"):
        C.build_corpus(target, TINY_CORPUS, cache_dir=tmp_path)


def test_bad_corpus_config_is_one_line_input_error():
    with pytest.raises(InputError, match="eval_fraction"):
        C.CorpusConfig(eval_fraction=1.5)
