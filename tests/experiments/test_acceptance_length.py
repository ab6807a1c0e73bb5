"""Prompt lookup's acceptance against answer length (`fidelity.lengths`): replayed exactly on greedy
answers cut at each length and priced from a Profile's entry, beside the entry fitted again on long
answers (`calibrate.answers`)."""
from __future__ import annotations

import numpy as np
import pytest

import methods
from calibrate import answers
from common.bundled import bundled
from common.errors import InputError
from fidelity import lengths
from profiles.profile import Profile
from tests.calibrate.test_answers import CONFIGS, copying_answers
from traces.lookup_replay import lookup_steps

SPEC = methods.get("prompt_lookup")


def test_the_replay_at_a_length_is_the_answer_cut_there():
    prompts, outputs = copying_answers(0)
    table = lengths.replayed(prompts, outputs, CONFIGS, [16, 96]).set_index(["config", "length"])
    steps = [s for pid in outputs for s in lookup_steps(prompts[pid], outputs[pid][:16], CONFIGS[0])]
    assert table.loc[(CONFIGS[0].label, 16), "replayed"] == pytest.approx(np.mean([a for _, a in steps]))
    assert table.loc[(CONFIGS[0].label, 16), "mean_output"] == 16
    assert table.loc[(CONFIGS[1].label, 96), "mean_output"] == 96 and table.loc[(CONFIGS[1].label, 96), "replayed"] > 1


def test_an_entry_fitted_on_long_answers_prices_them_as_replayed():
    profile = Profile.load(bundled("profiles", "smollm2-135m-cpu.json"))
    prompts, outputs = copying_answers(1, prompts=6)
    refitted = answers.refit(profile, SPEC, "lib-edit", prompts, outputs, CONFIGS, "toy answers")
    judged = lengths.judge({"bundled": profile, "refit": refitted}, "lib-edit", prompts, outputs, CONFIGS, [96])
    # at the length it was fitted on, the refitted entry holds every configuration's replay exactly
    assert judged["refit_error"].abs().max() < 1e-3
    assert judged["bundled_error"].abs().max() > 0.05          # the bundled entry knows other answers
    assert set(judged) >= {"config", "length", "replayed", "bundled", "refit", "dataset", "prompt_spread"}


def test_the_flat_prediction_is_the_entry_at_its_own_replay_length_at_every_length():
    """`at_replay_length`: the bundled entry replayed 32-token answers; priced flat, every length reads its
    32-token prediction, where the chain carries it up or down with the length."""
    profile = Profile.load(bundled("profiles", "smollm2-135m-cpu.json"))
    prompts, outputs = copying_answers(3, prompts=4)
    assert lengths.replay_length(profile, SPEC, "lib-edit") == 32
    judged = lengths.judge({"bundled": profile}, "lib-edit", prompts, outputs, CONFIGS, [32, 96],
                           at_replay_length={"flat": profile}).set_index(["config", "length"])
    at_32 = lengths.predicted(profile, "lib-edit", CONFIGS, 32, 300.0)
    for i, config in enumerate(CONFIGS):
        assert judged.loc[(config.label, 96), "flat"] == pytest.approx(at_32[i])
        assert judged.loc[(config.label, 32), "flat"] == pytest.approx(judged.loc[(config.label, 32), "bundled"])
    assert (judged.xs(96, level="length")["flat"] != judged.xs(96, level="length")["bundled"]).all()
    assert judged["flat_error"].equals(judged["flat"] / judged["replayed"] - 1.0)


def test_a_length_shape_keeps_the_entrys_own_length_and_follows_the_long_answers_elsewhere():
    profile = Profile.load(bundled("profiles", "smollm2-135m-cpu.json"))
    prompts, outputs = copying_answers(2, prompts=6)
    shaped = answers.with_length_shape(profile, SPEC, "lib-edit", prompts, outputs, [32, 96])
    part = shaped.acceptance["prompt_lookup/lib-edit"].part("prompt_lookup")
    assert sorted(part.length_shape) == [32, 96] and part.length_prompts == 6
    assert set(part.length_shape[96]) == set(part.replayed)           # every configuration the replay prices
    own, long = (lengths.predicted(p, "lib-edit", CONFIGS, 32, 300.0) for p in (profile, shaped))
    assert long == pytest.approx(own)
    table = lengths.replayed(prompts, outputs, CONFIGS, [32, 96]).set_index(["config", "length"])["replayed"]
    carried = lengths.predicted(shaped, "lib-edit", CONFIGS, 96, 300.0)
    assert carried == pytest.approx([own[i] * table[(c.label, 96)] / table[(c.label, 32)]
                                     for i, c in enumerate(CONFIGS)], rel=1e-4)     # the shape keeps 5 decimals


def test_only_one_method_that_replays_from_answers_is_judged_by_length():
    assert lengths.one_method(CONFIGS).name == "prompt_lookup"
    with pytest.raises(InputError, match="do not follow from the target's answers"):
        lengths.one_method([methods.parse_label("sd g3")])
    with pytest.raises(InputError, match="configurations of 2 methods"):
        lengths.one_method([*CONFIGS, methods.parse_label("sd g3")])
