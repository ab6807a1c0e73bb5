"""transformers' own generate as an engine: every configuration it runs gives its greedy tokens, its
steps say what ran (the exported drafts, not transformers' defaults), and what it cannot run is refused."""
from __future__ import annotations

import pytest
import torch

import methods
from common.errors import InputError
from campaigns.transformers_engine import (TransformersDecoder, assistant_from_vanilla, check_same_tokenizer,
                                                       teacher_forced_rows)
from runtime.drafters.vanilla import build_vanilla, save_vanilla
from runtime.llama import from_hf

PROMPT = [3, 17, 5, 9, 22, 3, 17, 5, 9, 22, 3, 17]


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=4,
                         num_hidden_layers=2, max_position_embeddings=256, initializer_range=0.4, tie_word_embeddings=True)
    hf = LlamaForCausalLM(config).eval()
    ours = from_hf(hf)
    path = tmp_path_factory.mktemp("d") / "vanilla.safetensors"
    save_vanilla(path, build_vanilla(ours, 1))
    return hf, assistant_from_vanilla(hf, path, ours)


def test_every_configuration_gives_the_greedy_tokens_and_its_own_draft_length(pair):
    hf, assistant = pair
    runs = {label: TransformersDecoder(hf, methods.parse_label(label), assistant).generate(PROMPT, 20)
            for label in ("ar", "prompt_lookup g3 nmin1 nmax2", "sd g4")}
    plain = runs["ar"]
    assert len(plain.tokens) == 19 and len(plain.steps) == 19 and all(s.accepted == 1 for s in plain.steps)
    for label, out in runs.items():
        assert out.tokens == plain.tokens[len(plain.tokens) - len(out.tokens):], label
        assert sum(s.accepted for s in out.steps) >= len(out.tokens)
    far = [s for s in runs["sd g4"].steps if s.ctx_len + 5 < len(PROMPT) + 20]      # transformers cuts drafts at the end
    assert far and all(s.draft_forwards == 4 and s.verify_tokens == 5 for s in far)
    assert all(s.draft_forwards == 0 and s.verify_tokens in range(1, 5) for s in runs["prompt_lookup g3 nmin1 nmax2"].steps)


@pytest.mark.parametrize("label", ["prompt_lookup g3 nmin1 nmax2", "prompt_lookup g5 nmin1 nmax3"])
def test_transformers_prompt_lookup_steps_are_the_replay_after_its_first_step(pair, label):
    """The peer Profile's prompt lookup is the project's proposer replayed on the greedy output
    (traces.lookup_replay) with each generation's first step left out, as the peer reports it:
    transformers' own steps must be exactly those."""
    from traces.lookup_replay import replayed_steps

    hf, assistant = pair
    config = methods.parse_label(label)
    out = TransformersDecoder(hf, config, assistant).generate(PROMPT, 60)
    full = hf.generate(torch.tensor([PROMPT]), max_new_tokens=60, do_sample=False)[0, len(PROMPT):].tolist()
    replay = replayed_steps({"p": PROMPT}, {"p": full}, [config], drop_first_step=True)
    assert any(s.accepted > 1 for s in out.steps)                        # the prompt repeats: lookups hit
    assert replay["accepted"].tolist() == [s.accepted for s in out.steps]
    assert replay["ctx_len"].tolist() == [s.ctx_len for s in out.steps]


@pytest.mark.parametrize("gamma", [1, 3, 5])
def test_transformers_assisted_steps_are_the_teacher_forced_replay_after_its_first_step(pair, gamma):
    """The peer Profile's assistant acceptance comes from teacher-forced TokenTrace rows
    (teacher_forced_rows): chains of any length replayed on them must be transformers' own
    assisted steps, the first (run with the prefill) left out."""
    import pandas as pd

    from methods.replay import TokenTable, chain_lengths
    from traces.replay import steps_of

    hf, assistant = pair
    out = TransformersDecoder(hf, methods.parse_label(f"sd g{gamma}"), assistant).generate(PROMPT, 40)
    full = hf.generate(torch.tensor([PROMPT]), max_new_tokens=40, do_sample=False)[0, len(PROMPT):].tolist()
    rows = pd.DataFrame([{"run_id": "r", "prompt_id": "p", **r} for r in teacher_forced_rows(hf, assistant, PROMPT, full)])
    table = TokenTable.from_frame(rows)
    replay = steps_of(table, chain_lengths(table, (1,) * gamma))
    accepted = [min(a, len(full) - p) for a, p in zip(replay["accepted"], replay["pos"])]
    assert any(s.accepted > 1 for s in out.steps)                          # the assistant gets some right
    assert accepted[1:len(out.steps) + 1] == [s.accepted for s in out.steps]


def test_what_transformers_cannot_run_is_refused(pair):
    hf, assistant = pair
    with pytest.raises(InputError, match="only approximately .transformers falls back to matches shorter than n_min=2"):
        TransformersDecoder(hf, methods.parse_label("prompt_lookup g3 nmin2 nmax3"), assistant)
    with pytest.raises(InputError, match="mcsd k2x2 repl: transformers has no counterpart"):
        TransformersDecoder(hf, methods.parse_label("mcsd k2x2 repl"), assistant)
    with pytest.raises(InputError, match="needs the assistant model"):
        TransformersDecoder(hf, methods.parse_label("sd g2"), None)


def test_an_assistant_of_another_vocabulary_is_one_line(pair):
    hf, assistant = pair

    class Tokenizer:
        vocab_size = 80

        def __len__(self):
            return 80

    with pytest.raises(InputError, match="assistant 'a' has a vocabulary of 64 tokens, the target's tokenizer 80"):
        check_same_tokenizer(Tokenizer(), assistant, "a")
