"""The vanilla drafter with a draft vocabulary (training.vanilla, runtime.drafters.vanilla): chosen from
the target's top-1 tokens, trained over it, saved and loaded exactly, never proposing a token outside
it, and the engine still the target's greedy output."""
from __future__ import annotations

import pytest
import torch

from common.errors import InputError
from runtime.drafters.vanilla import draft_vocab_of, load_vanilla
from runtime.engine import make_decoder
from tests.training.fixtures import tiny_data
from training.data import SignalSpec
from training.loop import LoopConfig, train
from training.vanilla import VanillaTrainee, draft_vocabulary, make_trainee


def test_the_draft_vocabulary_is_the_most_frequent_top1_tokens():
    top1 = torch.tensor([[[5], [5], [2], [7]], [[2], [5], [9], [2]]])
    assert draft_vocabulary(top1, 2, 10).tolist() == [2, 5]
    assert draft_vocabulary(top1, 3, 10).tolist() == [2, 5, 7]          # ties to the lower id


def test_a_reduced_drafter_trains_loads_and_drafts_only_its_tokens(tmp_path):
    target, data = tiny_data(SignalSpec(topk=8))
    trainee = VanillaTrainee(target.model, 1, draft_vocab=24)
    trainee.prepare(data)
    summary = train(trainee, data, LoopConfig(steps=40, lr=3e-3, eval_every=20, batch_size=8, seed=3),
                    tmp_path, log=lambda *_: None)
    assert summary["final"]["eval_top1"] > summary["untrained"]["eval_top1"]
    assert summary["drafter"]["draft_vocab"]["size"] == 24
    drafter = load_vanilla(tmp_path / "vanilla.safetensors", target.model)
    kept = draft_vocab_of(drafter)
    assert kept.tolist() == draft_vocab_of(trainee.drafter).tolist()
    ids = torch.tensor([[3, 17, 5, 9, 22, 3, 17]])
    assert torch.equal(drafter(ids).logits, trainee.drafter(ids).logits)
    prompt = [3, 17, 5, 9, 22, 5, 9]
    reference = make_decoder("ar", target.model).generate(prompt, 24).tokens
    for method, config in (("sd", {"gamma": 3}), ("mcsd", {"k": "2x2"})):
        decoder = make_decoder(method, target.model, drafter, **config)
        out = decoder.generate(prompt, 24)
        assert out.tokens == reference
    sampled = make_decoder("sd", target.model, drafter, gamma=4)
    with torch.no_grad():
        q = sampled.sampling.probs(drafter(ids).logits[0, -1])
    outside = torch.ones_like(q, dtype=torch.bool)
    outside[kept] = False
    assert float(q[outside].sum()) == 0.0 and float(q[kept].sum()) == pytest.approx(1.0)


def test_a_bad_draft_vocabulary_is_one_line():
    target, _ = tiny_data(SignalSpec(topk=8))
    with pytest.raises(InputError, match="draft_vocab must be an integer in 0..64"):
        make_trainee(target, draft_vocab=65)
