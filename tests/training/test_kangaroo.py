"""Kangaroo adapter training (training.kangaroo) on a tiny random target, through the shared loop."""
import json

import pytest
import torch

from runtime.drafters.io import load_drafter
from runtime.drafters.kangaroo import KangarooAdapter
from runtime.engine import make_decoder
from common.errors import InputError
from runtime.models import LoadedModel, tiny_model
from training.data import SignalSpec, TrainingData, compute_signals
from training.kangaroo import KangarooTrainee, feature_spec, make_trainee
from training.loop import LoopConfig, evaluate, train


def tiny_data(target, spec: SignalSpec, n_train=48, n_eval=16, length=24) -> TrainingData:
    """Random windows with the tiny target's signals (a learnable task: imitate the target)."""
    def part(seed, n):
        ids = torch.randint(0, target.config.vocab_size, (n, length), generator=torch.Generator().manual_seed(seed))
        return compute_signals(target, ids, spec, store_dtype=torch.float32)
    return TrainingData(part(0, n_train), part(1, n_eval), {"tiny": True})


@pytest.fixture(scope="module")
def target():
    torch.set_num_threads(1)
    return tiny_model(0, dtype=torch.float32, num_layers=4, vocab_size=64)


@pytest.fixture(scope="module")
def trained(target, tmp_path_factory):
    trainee = KangarooTrainee(target, exit_layer=3, seed=0)
    data = tiny_data(target, trainee.spec)
    out = tmp_path_factory.mktemp("kangaroo")
    summary = train(trainee, data, LoopConfig(steps=50, lr=1e-2, warmup_steps=5, eval_every=25), out, log=lambda m: None)
    return trainee, data, summary, out


def test_feature_spec_asks_for_early_and_last_features(target):
    assert feature_spec(target, 1) == SignalSpec(topk=8, hidden_layers=(1, 4))
    assert KangarooTrainee(target, 3).spec.hidden_layers == (3, 4)


def test_training_lowers_eq3_and_beats_the_untrained_adapter(trained):
    _, _, summary, out = trained
    assert summary["final"]["eval_loss"] < summary["untrained"]["eval_loss"] - 0.02
    assert summary["final"]["eval_top1"] > summary["untrained"]["eval_top1"] + 0.04
    assert json.loads((out / "training.json").read_text())["kind"] == "kangaroo"


def test_saved_adapter_reloads_and_drafts_better_in_the_engine(target, trained):
    """The saved adapter plugs into the kangaroo method; greedy output stays the target's."""
    trainee, data, _, out = trained
    adapter = load_drafter(out / "kangaroo.safetensors", target)
    assert isinstance(adapter, KangarooAdapter) and adapter.exit_layer == 3
    again = KangarooTrainee(target, 3, adapter=adapter)
    assert evaluate(again, data.eval, 8, "cpu") == evaluate(trainee, data.eval, 8, "cpu")
    prompt = [3, 9, 27, 17, 51]
    reference = make_decoder("ar", target).generate(prompt, 32).tokens
    config = dict(gamma=4, eta=0.0, exit_layer=3)
    drafted = make_decoder("kangaroo", target, adapter, **config).generate(prompt, 32)
    untrained = make_decoder("kangaroo", target, None, **config).generate(prompt, 32)
    assert drafted.tokens == reference
    assert len(drafted.steps) < len(untrained.steps)       # more tokens accepted per target forward
    assert all(not p.requires_grad for p in target.parameters())   # the target stayed frozen


def test_bad_exit_layers_are_input_errors(target):
    with pytest.raises(InputError, match="exits at layer 1"):
        KangarooTrainee(target, exit_layer=2, adapter=KangarooAdapter.for_target(target, 1))
    with pytest.raises(InputError, match="exit layer"):
        make_trainee(LoadedModel(target, None, "tiny"), exit_layer=4)
