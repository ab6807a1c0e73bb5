"""training.loop: schedule, objective, and the loop on a learnable synthetic task (tiny target)."""
from __future__ import annotations

import json
import math

import pytest
import torch

from tests.training.fixtures import tiny_data
from common.errors import InputError
from training.data import SignalSpec
from training.loop import LoopConfig, distill_loss, lr_at, top1_agreement, train
from runtime.drafters.vanilla import load_vanilla
from training.vanilla import VanillaTrainee


def test_schedule_warms_up_then_decays_by_cosine_to_the_floor():
    c = LoopConfig(steps=110, lr=1.0, warmup_steps=10, min_lr_ratio=0.1)
    assert [lr_at(s, 110, c) for s in (0, 4, 9)] == pytest.approx([0.1, 0.5, 1.0])
    assert lr_at(10, 110, c) == pytest.approx(1.0)
    assert lr_at(60, 110, c) == pytest.approx(0.55)
    assert lr_at(110, 110, c) == pytest.approx(0.1)
    assert all(lr_at(s, 110, c) >= lr_at(s + 1, 110, c) for s in range(10, 110))


def test_distill_loss_is_cross_entropy_to_the_renormalised_top_k():
    logits = torch.randn(3, 5, 11, generator=torch.Generator().manual_seed(0))
    ids = torch.randint(0, 11, (3, 5, 1), generator=torch.Generator().manual_seed(1))
    ce = torch.nn.functional.cross_entropy(logits.view(-1, 11), ids.view(-1))
    assert float(distill_loss(logits, ids, torch.zeros(3, 5, 1))) == pytest.approx(float(ce))
    p = torch.tensor([0.7, 0.2, 0.1])
    top_ids = torch.tensor([2, 0, 1]).expand(1, 1, 3)
    best = torch.full((1, 1, 11), -1e9)
    best[0, 0, :3] = torch.log(torch.tensor([0.2, 0.1, 0.7]))   # the drafter equals the target
    entropy = float(-(p * p.log()).sum())
    assert float(distill_loss(best, top_ids, p.log().expand(1, 1, 3))) == pytest.approx(entropy, rel=1e-5)
    assert top1_agreement(best, top_ids) == (1.0, 1)


def test_loop_learns_beats_untrained_and_reproduces_exactly(tmp_path):
    target, data = tiny_data(SignalSpec(topk=8))
    config = LoopConfig(steps=60, lr=3e-3, eval_every=20, batch_size=8, seed=3)
    summary = train(VanillaTrainee(target.model), data, config, tmp_path / "a", log=lambda *_: None)
    untrained, final = summary["untrained"], summary["final"]
    assert final["eval_loss"] < untrained["eval_loss"] - 0.1
    assert final["eval_top1"] > untrained["eval_top1"] + 0.05
    assert summary["history"][0]["train_loss"] > summary["history"][-1]["train_loss"]
    assert [row["step"] for row in summary["history"]] == [20, 40, 60]
    written = json.loads((tmp_path / "a" / "training.json").read_text())
    assert written["final"] == final and written["steps"] == 60
    again = train(VanillaTrainee(target.model), data, config, tmp_path / "b", log=lambda *_: None)
    assert again["final"] == final
    a, b = (load_vanilla(tmp_path / d / "vanilla.safetensors", target.model) for d in "ab")
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))


def test_time_budget_sets_the_step_count_and_records_it():
    """On a simulated clock (each loss evaluation costs 0.05 s), so a loaded machine cannot make it flaky."""
    target, data = tiny_data(SignalSpec(topk=8))
    trainee, now = VanillaTrainee(target.model), [0.0]
    real_loss = trainee.loss

    def timed_loss(batch):
        now[0] += 0.05
        return real_loss(batch)

    trainee.loss = timed_loss
    summary = train(trainee, data, LoopConfig(minutes=0.05, warmup_steps=3, eval_every=1000),
                    None, log=lambda *_: None, clock=lambda: now[0])
    assert summary["steps"] == summary["planned_steps"] >= 4
    assert f"--steps {summary['steps']} --batch-size 8 --lr 0.001 --seed 0" in summary["reproduce"]
    assert "--planned-steps" not in summary["reproduce"]
    assert summary["seconds"] < 0.05 * 60 * 1.15 + 5
    assert math.isfinite(summary["final"]["eval_loss"])


def test_a_run_the_budget_stopped_early_reproduces_from_its_command(tmp_path):
    """Stopped at step 6 of a 12-step schedule: the reproduce command names both, and rerunning
    it gives the same weights (a plain --steps 7 would anneal the learning rate over 7)."""
    target, data = tiny_data(SignalSpec(topk=8))
    trainee, now, calls = VanillaTrainee(target.model), [0.0], [0]
    real_loss = trainee.loss

    def timed_loss(batch):        # on a simulated clock, 0.4 s a training step while the count is planned, then 1.2 s
        if torch.is_grad_enabled():
            calls[0] += 1
            now[0] += 0.4 if calls[0] <= 2 else 1.2
        return real_loss(batch)

    trainee.loss = timed_loss
    cut = train(trainee, data, LoopConfig(minutes=0.08, warmup_steps=2, eval_every=1000), tmp_path / "cut",
                log=lambda *_: None, clock=lambda: now[0])
    assert cut["steps"] < cut["planned_steps"]
    words = cut["reproduce"].split()
    steps, planned = (int(words[words.index(flag) + 1]) for flag in ("--steps", "--planned-steps"))
    assert (steps, planned) == (cut["steps"], cut["planned_steps"])
    again = train(VanillaTrainee(target.model), data, LoopConfig(steps=steps, planned_steps=planned, warmup_steps=2,
                                                                 eval_every=1000), tmp_path / "again", log=lambda *_: None)
    short = train(VanillaTrainee(target.model), data, LoopConfig(steps=steps, warmup_steps=2, eval_every=1000),
                  None, log=lambda *_: None)
    assert again["final"] == cut["final"] and short["final"] != cut["final"]
    a, b = (load_vanilla(tmp_path / d / "vanilla.safetensors", target.model) for d in ("cut", "again"))
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))
    with pytest.raises(InputError, match="planned-steps"):
        LoopConfig(steps=5, planned_steps=4)


def test_bad_loop_config_is_input_error():
    with pytest.raises(InputError, match="steps"):
        LoopConfig(steps=0)
    with pytest.raises(InputError, match="minutes"):
        LoopConfig(minutes=0)
