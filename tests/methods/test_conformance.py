"""Every registered method through every layer: config and label round trip, engine greedy identity
on a tiny model, exact replay, closed form and step cost, simulator, sweep. A toy method added as one
module (tests/toy_method.py) must show up in each of them with no other change."""
from __future__ import annotations

import numpy as np
import pytest

import methods
from profiles.profile import Profile
from costmodel.step import step_seconds
from tests.methods import toy_method
from tests.simulator.fixtures import _ALL, FIXED

PROMPT = [3, 17, 5, 9, 22, 5, 9]


@pytest.fixture(scope="module", autouse=True)
def toy():
    spec = methods.register(toy_method.Toy())
    yield spec
    methods.unregister("toy")


def all_names():
    return methods.names() + ["toy"]


@pytest.fixture(scope="module")
def profile():
    raw = {**_ALL, "drafters": dict(_ALL["drafters"]), "acceptance": dict(_ALL["acceptance"])}
    return Profile.from_dict(raw)


@pytest.fixture(scope="module")
def models():
    from runtime.models import tiny_model, truncated

    target = tiny_model(0, num_layers=3)
    return target, truncated(target, 1)


@pytest.mark.parametrize("name", all_names())
def test_config_and_label_round_trip(name):
    spec = methods.get(name)
    config = spec.config()
    assert methods.parse_label(config.label) == config
    assert spec.config.from_dict(config.to_dict()) == config


@pytest.mark.parametrize("name", all_names())
def test_engine_greedy_identity(name, models):
    from runtime.engine import make_decoder

    target, drafter = models
    spec = methods.get(name)
    wants_draft_model = "draft_model" in spec.drafter_kinds
    reference = make_decoder("ar", target).generate(PROMPT, 24).tokens
    out = make_decoder(name, target, drafter if wants_draft_model else None).generate(PROMPT, 24)
    assert out.tokens == reference
    assert sum(s.accepted for s in out.steps) == len(out.tokens) - 1 or sum(s.accepted for s in out.steps) == len(out.tokens)


@pytest.mark.parametrize("name", all_names())
def test_the_engine_runs_the_specs_own_default_and_the_steps_its_shape_prices(name, models, profile):
    """make_decoder binds the decoder to the spec that chose it (the toy method reuses sd's decoder
    with its own default draft length), and every engine step runs what the method's step shape
    says: exactly where the shape is fixed (a chain, a tree, plain decoding), else within its bounds
    (a drafter that stops early, confidence-sized sets, a pool or a match that may be empty)."""
    from runtime.engine import make_decoder

    target, drafter = models
    spec = methods.get(name)
    decoder = make_decoder(name, target, drafter if "draft_model" in spec.drafter_kinds else None)
    assert decoder.config == spec.config() and decoder.spec is spec
    setup = profile.setups_for(spec)[0]
    shape = spec.step_shape(setup, spec.frame_of([spec.config()]))
    fixed = shape.verify_dist is None and shape.draft_reach is None and (
        shape.max_drafted > 0 or float(np.max(shape.verify_tokens)) == 1.0)
    support = shape.verify_dist[0][shape.verify_dist[1] > 0] if shape.verify_dist is not None else np.zeros(1)
    most = max(float(np.max(support)), float(np.max(shape.verify_tokens)), 1.0 + float(shape.draft_width.sum()))
    steps = decoder.generate(PROMPT, 24).steps
    for step in steps[:-1]:                                  # the last step may be cut at the length
        if fixed:
            assert (step.draft_forwards, step.verify_tokens) == (shape.max_drafted, round(float(shape.verify_tokens[0]))), (name, step)
        else:
            assert step.draft_forwards <= shape.max_drafted and 1 <= step.verify_tokens <= most, (name, step)


@pytest.mark.parametrize("name", all_names())
def test_a_spaces_labels_are_its_configurations_labels(name, profile):
    spec = methods.get(name)
    if not spec.sweep:
        return
    space = spec.space(profile.setups_for(spec)[0])
    configs = spec.configs_of(space)
    assert list(space["config"]) == [c.label for c in configs]
    assert all(methods.parse_label(label) == c for label, c in zip(space["config"][:50], configs[:50]))


@pytest.mark.parametrize("name", all_names())
def test_closed_form_step_cost_and_simulator(name, profile):
    from simulator.stream import simulate_stream

    spec = methods.get(name)
    setup = profile.setups_for(spec)[0]
    frame = spec.frame_of([spec.config()])
    tokens = spec.expected_tokens(setup, frame)
    seconds = step_seconds(lambda m, n, c, b: FIXED[m].predict(n, c, b), spec.step_shape(setup, frame), 128)
    assert np.all(tokens >= 1) and np.all(np.isfinite(tokens)) and np.all(seconds > 0)
    summary = simulate_stream(profile, name, spec.config().to_dict(), n_tokens=64, seed=0, latencies=FIXED).summary
    assert summary["tokens_per_step"] >= 1 and summary["speedup"] > 0


@pytest.mark.parametrize("name", all_names())
def test_replay_where_replayable(name):
    from calibrate.synthetic import synthetic_token_trace
    from traces.replay import TokenTable, replayable

    spec = methods.get(name)
    if name not in replayable():
        assert spec.replay_lengths(None, spec.config()) is None
        return
    frame, _ = synthetic_token_trace(0.8, 0.3, 0.5, n_prompts=3, length=40, seed=0)
    table = TokenTable.from_frame(frame)
    lengths = spec.replay_lengths(table, spec.config())
    assert lengths.shape == (table.size,) and lengths.min() >= 1


def test_sweep_scores_every_swept_method(tmp_path):
    """On the bundled SmolLM2 profile, which records every drafter kind."""
    from common.bundled import bundled
    from experiments.sweep import main

    path = bundled("profiles", "smollm2-135m-cpu.json")
    assert main(["--profile", str(path), "--out", str(tmp_path / "out"), "--budget", "8", "--rescore", "1",
                 "--sim-repeats", "1", "--sim-tokens", "16"]) == 0
    scored = {table.stem for table in (tmp_path / "out" / "tables").glob("*.parquet")}
    assert set(methods.names(sweep_only=True)) <= scored, scored
