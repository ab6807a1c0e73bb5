"""Every method an engine offers scores on every bundled GPU Profile, its acceptance ASSUMED and said so
where the Profile did not measure it; an assumed entry serves its own method only."""
from __future__ import annotations

import json

import numpy as np
import pytest

import methods
from calibrate.assumed import ASSUMED, with_assumed
from common.errors import InputError
from methods.engines import ENGINES, EngineConfig
from profiles.latency import RooflineLatency
from profiles.profile import Profile
from sweep import scoring
from sweep.run import bundled_profile_paths

SETTING = scoring.Setting(ctx_len=512, new_tokens=256)
OFFERED = [s.name for s in methods.specs() if s.engine_offered]


def gpu_profiles() -> list[Profile]:
    """The bundled Profiles whose target is priced from its architecture on a GPU."""
    loaded = [Profile.load(p) for p in bundled_profile_paths()]
    return [p for p in loaded if isinstance(p.latency_model(p.target), RooflineLatency)]


@pytest.fixture(scope="module")
def priced():
    return [(p, with_assumed(p, methods.names(sweep_only=True))) for p in gpu_profiles()]


def scored(profile: Profile, method: str):
    return [scoring.score(s, method, methods.get(method).space(s), SETTING)
            for s in scoring.setups(profile, method, SETTING)]


def test_the_bundle_has_gpu_profiles_and_engine_offered_methods():
    assert len(gpu_profiles()) >= 10 and len(OFFERED) >= 3


@pytest.mark.parametrize("method", OFFERED)
def test_every_engine_offered_method_scores_on_every_gpu_profile(priced, method):
    for _, profile in priced:
        frames = scored(profile, method)
        assert frames, (profile.name, method)
        for frame in frames:
            assert len(frame) and np.isfinite(frame["speedup"]).all() and (frame["speedup"] > 0).all()


def test_a_method_an_engine_runs_exactly_declares_itself_engine_offered(priced):
    """A method whose configuration some engine runs as it is gets priced everywhere: it must say so."""
    for _, profile in priced:
        for spec in methods.specs():
            if not spec.sweep:
                continue
            try:
                setups = scoring.setups(profile, spec.name, SETTING)
            except InputError:
                continue
            for setup in setups:
                config = spec.configs_of(spec.space(setup).head(1))[0]
                exact = [e for e in ENGINES if isinstance(out := spec.to_engine(e, setup, config), EngineConfig)
                         and out.match == "exact"]
                assert not exact or spec.engine_offered, (spec.name, profile.name, exact)


def test_an_assumed_entry_names_its_source_and_serves_only_its_method(priced):
    original, profile = next((o, p) for o, p in priced if o.name.startswith("coral-llama-3-8b"))
    added = [k for k in profile.acceptance if k not in original.acceptance]
    assert added and all(profile.acceptance_model(k).source.startswith(ASSUMED + ": ") for k in added)
    assert all("profile '" in profile.acceptance_model(k).source for k in added)
    assert any("ASSUMED" in line for line in profile.provenance.details["assumptions"])
    for spec in methods.specs():       # a draft model assumed for one method is not another's measurement
        if spec.sweep and not spec.engine_offered:
            try:
                setups = scoring.setups(profile, spec.name, SETTING)
            except InputError:
                continue
            assert all(not s.acceptance.source.startswith(ASSUMED) for s in setups), spec.name


def test_a_profile_that_measured_every_offered_method_is_returned_as_it_is():
    profile = gpu_profiles()[0]
    assert with_assumed(profile, [], "missing") is profile
    assert with_assumed(profile, methods.names(), "none") is profile
    with pytest.raises(InputError, match="--assumed must be one of"):
        with_assumed(profile, methods.names(), "some")


def test_all_adds_a_chain_beside_a_measured_tree():
    profile = next(p for p in gpu_profiles() if p.name.startswith("coral-llama-3-8b"))
    spec = next(s for s in methods.specs() if s.engine_offered and any(
        "tree" in d.entry for d in s.assumed_drafters(profile.target, profile.arch()).values()))
    missing = {s.drafter for s in with_assumed(profile, [spec.name], "missing").setups_for(spec)}
    every = {s.drafter for s in with_assumed(profile, [spec.name], "all").setups_for(spec)}
    assert missing == {s.drafter for s in profile.setups_for(spec)} and len(every) == len(missing) + 1


def test_engine_names_of_a_method_are_taken():
    for spec in methods.specs():
        for alias in spec.aliases:
            assert methods.parse_methods(alias) == [spec.name]
    with pytest.raises(InputError, match="unknown method 'medusa'"):
        methods.parse_methods("medusa")


def test_a_draft_model_of_the_registry_or_a_config_json_is_priced_beside_the_measured(tmp_path):
    profile = next(p for p in gpu_profiles() if p.name.startswith("glide-vicuna-7b"))
    spec = next(s for s in methods.specs() if any(d.any_model for d in s.assumed_drafters(
        profile.target, profile.arch()).values()))
    config = tmp_path / "tiny-llama" / "config.json"
    config.parent.mkdir()
    config.write_text(json.dumps({"num_hidden_layers": 4, "hidden_size": 512, "intermediate_size": 1376,
                                  "num_attention_heads": 8, "vocab_size": 32000}))
    for given, name in (("llama-68m", None), (str(config), "tiny-llama")):
        priced = with_assumed(profile, [spec.name], "missing", given)
        added = set(priced.drafters) - set(profile.drafters)
        if name is None:              # measured there already: nothing assumed over it
            assert not added
            continue
        assert added == {name} and isinstance(priced.latency_model(name), RooflineLatency)
        frames = scored(priced, spec.name)
        assert {f["drafter"].iat[0] for f in frames} >= {name} | set(profile.drafters_of(*spec.drafter_kinds))


def test_an_assumed_entry_carries_what_holds_on_another_target_and_the_donors_own_replays_stay(priced):
    """Prompt lookup's donor entry holds replays of the donor's own generations: the fitted chain is carried,
    the replays and their shape by answer length are not (`MethodSpec.carried_part`); the rest of the entry
    is the donor's, under the new key, drafter, dataset and temperature."""
    spec = methods.get("prompt_lookup")
    carried = [(p, a) for _, p in priced for a in p.acceptance.values() if a.drafter == spec.name
               and a.source.startswith(ASSUMED)]
    assert carried
    for profile, entry in carried:
        part = entry.part(spec.name)
        assert part.replayed is None and part.length_shape is None and part.replayed_new_tokens is None
        assert 0 < part.alpha <= 1 and entry.extra["assumed_for"] == spec.name
        assert profile.acceptance[f"{spec.name}/{entry.dataset}/T{entry.temperature:g}"] is entry
