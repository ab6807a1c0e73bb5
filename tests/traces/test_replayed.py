"""Replayed-acceptance mode: a real loop at random weights accepts exactly what the trace says.

A synthetic TokenTrace (seeded ranks and confidences) drives real loops of a tiny random target;
their per-step accepted lengths must equal `traces.replay`'s exact replay of the same trace.
"""
import numpy as np
import pandas as pd
import pytest

import methods
from common.errors import InputError
from runtime.models import tiny_model, truncated
from traces.replay import TokenTable, replay_steps, replayable
from traces.replayed import (LengthReplay, RankReplay, random_prompts, replayed_decoder, run_replayed,
                             sources_from_step_trace, sources_from_token_trace, steps_frame)
from traces.schema import validate

N_OUT = 30


def _token_trace(seed=0, prompts=("a", "b")):
    rng = np.random.default_rng(seed)
    rows = []
    for pid in prompts:
        for pos in range(N_OUT):
            rank = int(rng.choice([0, 0, 0, 1, 2, 5]))       # mostly hits, some near misses
            rows.append(dict(run_id="r", prompt_id=pid, pos=pos, token=0, draft_rank=rank,
                             draft_conf=float(rng.uniform(0.05, 1.0)), draft_q_token=0.5, alpha=0.5,
                             target_entropy=1.0))
    return validate(pd.DataFrame(rows), "token")


@pytest.fixture(scope="module")
def setting():
    target = tiny_model(0, num_layers=3, vocab_size=32)
    frame = _token_trace()
    prompts = random_prompts(["a", "b"], 6, 32, seed=1)
    return target, frame, prompts


CASES = [
    ("sd", {"gamma": 1}),
    ("sd", {"gamma": 4}),
    ("mcsd", {"k": "2x2"}),
    ("mcsd", {"k": "4x2x1"}),
    ("cape", {"gamma": 3, "bins": [3] * 11}),
    ("glide", {"gamma": 3}),
    ("glide", {"gamma": 2, "bins": [2] * 11}),
    ("coral", {"gamma": 3}),
    ("coral", {"gamma": 2, "groups": 4, "top_n": 2}),
    ("kangaroo", {"gamma": 4, "eta": 0.4, "exit_layer": 1}),
]


@pytest.mark.parametrize("method,config", CASES, ids=[f"{m}-{i}" for i, (m, _) in enumerate(CASES)])
def test_replayed_loop_accepts_what_exact_replay_predicts(setting, method, config):
    target, frame, prompts = setting
    drafter = truncated(target, 1) if "draft_model" in methods.get(method).drafter_kinds else None
    decoder = replayed_decoder(method, target, drafter, **config)
    runs = run_replayed(decoder, sources_from_token_trace(frame), prompts)
    if method in replayable():
        expected = replay_steps(TokenTable.from_frame(frame), method, config)
    else:   # a chain drafter traces.replay does not name (coral): its steps replay as sd's chain
        expected = replay_steps(TokenTable.from_frame(frame), "sd", {"gamma": config["gamma"]})
    for run in runs:
        want = expected[expected.prompt_id == run.prompt_id].accepted.tolist()
        got = [s.accepted for s in run.generation.steps]
        assert len(run.generation.tokens) == N_OUT
        assert got[:-1] == want[:-1]
        assert min(got[-1], N_OUT - sum(got[:-1])) == want[-1]


def test_replayed_steps_are_a_valid_step_trace(setting):
    target, frame, prompts = setting
    decoder = replayed_decoder("mcsd", target, truncated(target, 1), k="2x2")
    runs = run_replayed(decoder, sources_from_token_trace(frame), prompts)
    steps = validate(steps_frame(runs, "mcsd", {"k": "2x2"}, "rep"), "step")
    assert set(steps.prompt_id) == {"a", "b"} and (steps.verify_tokens == 7).all()
    assert set(steps.config) == {'{"k": [2, 2], "replacement": true}'}     # in full, as the method parses it
    assert all(r.tokens_per_s > 0 for r in runs)


def test_length_replay_follows_recorded_step_lengths(setting):
    target, _, prompts = setting
    step_frame = pd.DataFrame({"prompt_id": ["a"] * 4, "step": [0, 1, 2, 3], "accepted": [3, 1, 4, 2]})
    decoder = replayed_decoder("sd", target, truncated(target, 1), gamma=4)
    run, = run_replayed(decoder, sources_from_step_trace(step_frame), {"a": prompts["a"]})
    assert [s.accepted for s in run.generation.steps] == [3, 1, 4, 2]


def test_lookahead_runs_replayed_from_step_lengths(setting):
    target, _, prompts = setting
    decoder = replayed_decoder("lookahead", target, None, W=3, N=3, G=2)
    run, = run_replayed(decoder, {"a": LengthReplay([1, 1, 2, 1, 3])}, {"a": prompts["a"]})
    got = [s.accepted for s in run.generation.steps]
    assert sum(got) >= 8 and all(g <= w for g, w in zip(got, [1, 1, 2, 1, 3]))


def test_replay_sources_reject_bad_input(setting):
    target, _, prompts = setting
    with pytest.raises(InputError):
        RankReplay([0, 1], [0.5])
    with pytest.raises(InputError):
        LengthReplay([2, 0])
    with pytest.raises(InputError, match="no recorded acceptance"):
        run_replayed(replayed_decoder("sd", target, truncated(target, 1)), {"x": LengthReplay([1])}, prompts)
    with pytest.raises(InputError, match="prompt length"):
        random_prompts(["a"], 0, 10)
