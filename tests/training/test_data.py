"""training.data: the target's signals on the corpus, cached, and the spec shared by every drafter."""
from __future__ import annotations

import pytest
import torch

from tests.training.fixtures import tiny_target
from common.errors import InputError
from training import data as D


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
