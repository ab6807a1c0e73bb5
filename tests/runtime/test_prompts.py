"""Prompt sets: the two built-in benchmarks, local JSONL, chat templates, one-line bad input."""
from __future__ import annotations

import gzip
import json

import pytest

from common.errors import InputError
from runtime.prompts import Prompt, chat_messages, encode_prompt, load_prompts


class FakeTokenizer:
    """Characters as token ids; an optional chat template that tags roles."""

    def __init__(self, chat: bool):
        self.chat_template = "tagged" if chat else None

    def encode(self, text):
        return [ord(c) for c in text]

    def apply_chat_template(self, messages, add_generation_prompt, tokenize):
        text = "".join(f"<{m['role']}>{m['content']}" for m in messages)
        return self.encode(text + ("<assistant>" if add_generation_prompt else ""))


def test_builtin_sets_have_their_sizes_and_stable_ids():
    mt = load_prompts("mtbench")
    he = load_prompts("humaneval")
    assert len(mt) == 80 and len(he) == 164
    assert all(len(p.turns) == 2 for p in mt)
    assert mt[0].prompt_id == "mtbench/81" and he[0].prompt_id == "HumanEval/0"
    assert len({p.prompt_id for p in mt + he}) == 244
    assert [p.prompt_id for p in load_prompts("MT-Bench", limit=3)] == [p.prompt_id for p in mt[:3]]
    assert [p.prompt_id for p in load_prompts("humaneval", ids=["HumanEval/5", "HumanEval/1"])] == \
        ["HumanEval/1", "HumanEval/5"]


def test_local_jsonl_field_turns_ids_and_gzip(tmp_path):
    path = tmp_path / "mine.jsonl"
    path.write_text(json.dumps({"id": "x", "prompt": "hello"}) + "\n\n"
                    + json.dumps({"turns": ["one", "two"]}) + "\n")
    prompts = load_prompts(str(path))
    assert [(p.prompt_id, p.turns) for p in prompts] == [("mine/x", ("hello",)), ("mine/3", ("one", "two"))]
    other = tmp_path / "q.jsonl.gz"
    with gzip.open(other, "wt") as fh:
        fh.write(json.dumps({"question": "why?"}) + "\n")
    assert load_prompts(str(other), field="question")[0].turns == ("why?",)


@pytest.mark.parametrize("content,needle", [
    ("prompt,text\nhello,world\n", "line 1 is not JSON"),
    ('{"prompt": "a"}\n[1, 2]\n', "line 2 is not a JSON object"),
    ('{"text": "a"}\n', "neither 'prompt' nor 'turns'"),
    ('{"prompt": ""}\n', "non-empty text"),
    ('{"id": 1, "prompt": "a"}\n{"id": 1, "prompt": "b"}\n', "duplicate prompt id"),
    ("\n", "no prompts"),
])
def test_bad_local_files_are_one_line_errors(tmp_path, content, needle):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(InputError, match=needle) as err:
        load_prompts(str(path))
    assert "\n" not in str(err.value)


def test_unknown_set_and_bad_limit(tmp_path):
    with pytest.raises(InputError, match="unknown prompt set"):
        load_prompts("nosuchset")
    with pytest.raises(InputError, match="limit"):
        load_prompts("mtbench", limit=0)
    with pytest.raises(InputError, match="not in"):
        load_prompts("mtbench", ids=["mtbench/1"])
    binary = tmp_path / "b.jsonl"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(InputError, match="not a UTF-8 JSONL"):
        load_prompts(str(binary))


def test_chat_template_applied_for_instruct_tokenizers_only():
    prompt = Prompt("t/1", ("first", "second"), "t")
    chat, base = FakeTokenizer(chat=True), FakeTokenizer(chat=False)
    as_text = lambda ids: "".join(map(chr, ids))
    assert as_text(encode_prompt(prompt, chat)) == "<user>first<assistant>"
    assert as_text(encode_prompt(prompt, base)) == "first"
    assert as_text(encode_prompt(prompt, chat, turn=2, previous_answers=["ans"])) == \
        "<user>first<assistant>ans<user>second<assistant>"
    assert as_text(encode_prompt(prompt, chat, chat=False)) == "first"
    with pytest.raises(InputError, match="no chat template"):
        encode_prompt(prompt, base, chat=True)
    with pytest.raises(InputError, match="needs 1 previous answer"):
        chat_messages(prompt, turn=2)
    with pytest.raises(InputError, match="has 2 turn"):
        chat_messages(prompt, turn=3, previous_answers=["a", "b"])


def test_prompt_mix_takes_counts_per_set(tmp_path):
    from runtime.prompts import load_prompt_mix

    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"p{i}"}) + "\n" for i in range(3)))
    ids = [p.prompt_id for p in load_prompt_mix(f"mtbench:2, humaneval:1,{path}")]
    assert ids == ["mtbench/81", "mtbench/82", "HumanEval/0", "m/1", "m/2", "m/3"]
    with pytest.raises(InputError, match="'mtbench:0': the range must satisfy 1 <= A <= B"):
        load_prompt_mix("mtbench:0")
    with pytest.raises(InputError, match="'mtbench:abc': 'abc' is not a count N or a range A-B"):
        load_prompt_mix("mtbench:abc")
    # ranges: the A-th to the B-th, 1-based
    assert [p.prompt_id for p in load_prompt_mix(f"mtbench:2-3,{path}:3")] == ["mtbench/82", "mtbench/83", "m/1", "m/2", "m/3"]
    for bad, message in (("mtbench:3-2", "1 <= A <= B"), ("mtbench:0-2", "1 <= A <= B"), (f"{path}:2-5", "has 3 prompts, asked for 2-5"),
                         (f"{path}:5-6", "has 3 prompts, asked for 5-6"),   # a range wholly past the end
                         (f"{path}:4", "has 3 prompts, asked for the first 4")):
        with pytest.raises(InputError, match=message):
            load_prompt_mix(bad)
    with pytest.raises(InputError, match="prompt file not found: missing.jsonl"):
        load_prompt_mix("missing.jsonl")


def test_the_code_edit_set_hands_back_humaneval_functions_from_the_last_task():
    from runtime.prompts import overlapping_sources

    edits, tasks = load_prompts("codeedit"), load_prompts("humaneval")
    assert len(edits) == len(tasks) == 164
    assert edits[0].source == "HumanEval/163" and edits[163].source == "HumanEval/0"
    assert "def generate_integers(a, b):" in edits[0].turns[0] and "Return the whole function" in edits[0].turns[0]
    assert overlapping_sources(tasks[:6], edits[:6]) == []                 # first prompts: different functions
    assert overlapping_sources(tasks[:6], edits[-2:]) == ["codeedit/162", "codeedit/163"]
    assert overlapping_sources(edits[:3], edits[2:4]) == ["codeedit/2"]


def test_the_library_edit_set_hands_back_boltons_functions_in_a_fixed_mixed_order():
    from runtime.prompts import EDIT_REQUESTS, LIBEDIT_EXCLUDED, overlapping_sources

    edits = load_prompts("libedit")
    assert len(edits) == 232 and len({p.source for p in edits}) == 232
    assert len({p.turns[0].split("```")[1] for p in edits}) == 232          # each function's code asked once
    assert [p.source for p in edits[:3]] == ["boltons.funcutils.format_invocation", "boltons.iterutils.is_collection",
                                             "boltons.strutils.removeprefix"]
    assert all(p.source.count(".") == 2 for p in edits[:99])               # the top-level functions, then
    assert all(p.source.count(".") == 3 for p in edits[99:])               # the classes' methods
    assert edits[99].source == "boltons.dictutils.FrozenDict.updated"
    assert "def updated(self" in edits[99].turns[0] and "\n    def" not in edits[99].turns[0]   # dedented
    assert "@classmethod\ndef from_text(cls" in edits[100].turns[0]           # its decorator kept
    assert "Rename the function to `add_arg_v2`" in edits[101].turns[0]      # the method's own name
    assert "def format_invocation(" in edits[0].turns[0] and edits[0].turns[0].endswith(EDIT_REQUESTS[0])
    assert "Rename the function to `is_collection_v2`" in edits[1].turns[0]       # prompt k asks for edit k mod 5
    assert {p.source.split(".")[1] for p in edits[:12]} >= {"iterutils", "strutils", "funcutils"}
    assert not {f"boltons.{name}" for name in LIBEDIT_EXCLUDED} & {p.source for p in edits}
    assert overlapping_sources(load_prompts("codeedit") + load_prompts("humaneval"), edits) == []


def test_the_second_library_edit_set_asks_the_same_of_toolz_and_shares_nothing_with_the_first():
    from runtime.prompts import EDIT_REQUESTS, overlapping_sources

    edits = load_prompts("toolz-edit")
    assert len(edits) == 63 and len({p.source for p in edits}) == 63
    assert [p.prompt_id for p in edits[:2]] == ["toolzedit/0", "toolzedit/1"] and edits[0].dataset == "toolzedit"
    assert [p.source for p in edits[:3]] == ["toolz.itertoolz.tail", "toolz.itertoolz.mapcat", "toolz.dicttoolz.get_in"]
    assert "def tail(n, seq):" in edits[0].turns[0] and edits[0].turns[0].endswith(EDIT_REQUESTS[0])
    assert "Rename the function to `mapcat_v2`" in edits[1].turns[0]
    assert overlapping_sources(load_prompts("libedit") + load_prompts("codeedit"), edits) == []


def test_the_library_edit_set_names_the_version_it_needs(monkeypatch):
    import importlib.metadata

    from runtime import prompts

    prompts.library_functions.cache_clear()
    monkeypatch.setattr(importlib.metadata, "version", lambda package: "24.1.0")
    try:
        with pytest.raises(InputError, match=r"built from boltons==25.0.0, found 24.1.0 \(pip install --no-deps"):
            load_prompts("libedit")
    finally:
        prompts.library_functions.cache_clear()
