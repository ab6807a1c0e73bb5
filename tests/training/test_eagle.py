"""EAGLE/CORAL feature-drafter training (training.eagle): HASS replay, CSRA loss, learning."""
import math

import pytest
import torch
import torch.nn.functional as F

from runtime.drafters.coral import FeatureDrafter
from runtime.drafters.io import load_drafter
from runtime.engine import make_decoder
from common.errors import InputError
from runtime.models import LoadedModel, tiny_model
from training.eagle import (EagleLossConfig, EagleTrainee, csra_loss, csra_positions, hass_mask, make_trainee,
                                multi_step_features)
from training.loop import LoopConfig, train
from tests.training.test_kangaroo import tiny_data


@pytest.fixture(scope="module")
def target():
    torch.set_num_threads(1)
    return tiny_model(0, dtype=torch.float32, num_layers=4, vocab_size=64)


def test_hass_mask_step1_is_causal_and_step3_reads_the_round():
    assert torch.equal(hass_mask(5, 1), torch.tril(torch.ones(5, 5, dtype=torch.bool)))
    m = hass_mask(6, 3)                         # [6, 18]: keys of steps 1, 2, 3
    row = m[4]                                  # query s=4 as third draft after root r=2
    assert row[:6].tolist() == [True, True, True, False, False, False]   # step 1 keys at p <= 2
    assert row[6:12].nonzero().flatten().tolist() == [3]                  # step 2 key at r+1
    assert row[12:].nonzero().flatten().tolist() == [4]                   # its own key


def test_each_step_equals_the_drafting_of_inference(target):
    """Step k's output at s is the k-th draft after the root s-k+1 with a KV cache (as the engine drafts)."""
    drafter = FeatureDrafter.for_target(target, seed=0, std=0.3)
    ids = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(0))
    features = target(ids).hidden
    with torch.no_grad():
        outs = multi_step_features(drafter, target, ids, features, 3)
        root = 7
        cache = drafter.new_cache(batch=2, capacity=16)
        prev = torch.cat([torch.zeros_like(features[:, :1]), features[:, :root]], dim=1)
        out = drafter(ids[:, :root + 1], prev, target, cache, torch.arange(root + 1))[:, -1:]
        for step in range(1, 4):
            pos = root + step - 1
            assert torch.allclose(out[:, 0], outs[step - 1][:, pos], atol=1e-4), step
            if step < 3:
                out = drafter(ids[:, pos + 1:pos + 2], out, target, cache, torch.arange(pos + 1, pos + 2))
        assert not torch.allclose(outs[2][:, root + 2], outs[1][:, root + 2], atol=1e-2)  # steps do differ


def brute_force_csra(views, n_queries, tau):
    n_views, n_pos, _ = views.shape
    z = F.normalize(views.reshape(n_views * n_pos, -1), dim=-1)
    losses = []
    for i in range(n_queries * n_pos):
        others = [j for j in range(n_views * n_pos) if j != i]
        denom = torch.logsumexp(torch.stack([z[i] @ z[j] / tau for j in others]), 0)
        for j in others:
            if j % n_pos == i % n_pos:
                losses.append(-(z[i] @ z[j] / tau - denom))
    per_query = torch.stack(losses).view(n_queries * n_pos, n_views - 1).mean(-1)
    return per_query.mean()


def test_csra_is_infonce_with_same_position_positives():
    views = torch.randn(3, 4, 5, generator=torch.Generator().manual_seed(2))
    assert torch.allclose(csra_loss(views, 2, 0.07), brute_force_csra(views, 2, 0.07), atol=1e-4)
    aligned = torch.eye(4)[None].repeat(3, 1, 1) + 0.01 * views[..., :4]
    floor = math.log(2)                       # two positives share each softmax: the loss is >= log 2
    assert floor - 1e-4 < csra_loss(aligned, 2, 0.07) < floor + 0.05 < 1.0 < csra_loss(views, 2, 0.07)


def test_csra_positions_are_rooted_at_every_step_and_capped():
    idx = csra_positions((2, 5), 3, 100)
    assert idx.tolist() == [2, 3, 4, 7, 8, 9]
    assert csra_positions((4, 50), 3, 16).numel() == 16


@pytest.fixture(scope="module")
def trained(target, tmp_path_factory):
    trainee = EagleTrainee(target, seed=0, loss_config=EagleLossConfig(steps=3, csra_positions=64))
    data = tiny_data(target, trainee.spec)
    out = tmp_path_factory.mktemp("coral")
    summary = train(trainee, data, LoopConfig(steps=60, lr=1e-2, warmup_steps=5, eval_every=30), out,
                    log=lambda m: None)
    return trainee, summary, out


def test_training_improves_every_step_and_the_engine_accepts_more(target, trained):
    trainee, summary, out = trained
    assert summary["final"]["eval_loss"] < summary["untrained"]["eval_loss"] - 0.5
    # Random windows of a random 4-layer target are a hard imitation task for one layer: top-1 stays
    # low in absolute terms (about 0.05 held out after 60 steps), but it must at least double.
    assert summary["final"]["eval_top1"] > 2 * summary["untrained"]["eval_top1"]
    last = summary["history"][-1]
    assert {"csra", "reg3", "top1_step3"} <= set(last) and last["top1_step3"] > 0.08
    drafter = load_drafter(out / "coral.safetensors", target)
    prompt = [3, 9, 27, 17, 51]
    reference = make_decoder("ar", target).generate(prompt, 32).tokens
    drafted = make_decoder("coral", target, drafter, gamma=4).generate(prompt, 32)
    untrained = make_decoder("coral", target, None, gamma=4).generate(prompt, 32)
    assert drafted.tokens == reference
    assert len(drafted.steps) < len(untrained.steps)


def test_bad_loss_options_are_input_errors(target):
    loaded = LoadedModel(target, None, "tiny")
    with pytest.raises(InputError, match="temperature"):
        make_trainee(loaded, temperature=0)
    with pytest.raises(InputError, match="steps"):
        make_trainee(loaded, steps=0)
    with pytest.raises(TypeError):            # the CLI turns this into an InputError
        make_trainee(loaded, no_such_weight=1.0)
