"""methods: typed configs (one set of defaults, strict from_dict, labels that parse back) and the registry."""
from __future__ import annotations

import pytest

import methods
from profiles.profile import Profile
from common.errors import InputError
from tests.simulator.fixtures import _ALL

BUILT_IN = ["ar", "sd", "mcsd", "cape", "glide", "lookahead", "kangaroo", "coral"]


def test_every_built_in_method_is_registered():
    assert set(BUILT_IN) <= set(methods.names())
    assert "ar" not in methods.names(sweep_only=True)


@pytest.mark.parametrize("name", BUILT_IN)
def test_default_config_round_trips(name):
    spec = methods.get(name)
    config = spec.config()
    assert spec.config.from_dict(config.to_dict()) == config
    assert methods.parse_label(config.label) == config
    assert spec.parse(config.label) == config


@pytest.mark.parametrize("name,raw,key", [
    ("sd", {"gama": 8}, "gama"), ("sd", {"gamma": 0}, "gamma"), ("sd", {"gamma": 2.5}, "gamma"),
    ("mcsd", {"k": "4x0"}, "k"), ("mcsd", {"k": "4x2x1", "replacement": "maybe"}, "replacement"),
    ("cape", {"bins": [8, 8]}, "bins"), ("lookahead", {"N": 1}, "N"), ("kangaroo", {"eta": 1.5}, "eta"),
    ("kangaroo", {"eta": float("nan")}, "eta"), ("coral", {"groups": 16}, "groups"),
    ("coral", {"groups": 4, "top_n": 8}, "top_n"), ("ar", {"gamma": 4}, "gamma"),
])
def test_from_dict_refuses_unknown_keys_and_bad_values(name, raw, key):
    with pytest.raises(InputError, match=key) as err:
        methods.get(name).config.from_dict(raw)
    assert "\n" not in str(err.value)


def test_labels_name_every_field_and_refuse_strangers():
    assert methods.parse_label("mcsd k4x2x1 norepl") == methods.get("mcsd").config(k=(4, 2, 1), replacement=False)
    assert methods.parse_label("coral g3 N16 top2").to_dict() == {"gamma": 3, "groups": 16, "top_n": 2}
    assert methods.parse_label("cape g2 S8888666644a").bins[-1] == 10
    for bad in ("sd g4 x9", "nosuch g4", "", "sd g4 g5"):
        with pytest.raises(InputError):
            methods.parse_label(bad)


def test_one_set_of_defaults():
    """The defaults the layers used to disagree on."""
    assert methods.get("mcsd").config().k == (2, 2, 1)
    assert methods.get("cape").config().gamma == methods.get("glide").config().gamma == 4
    assert (methods.get("lookahead").config().N, methods.get("coral").config().groups) == (3, 0)


@pytest.mark.parametrize("name", [n for n in BUILT_IN if n != "ar" and methods.get(n).sweep])
def test_every_label_of_a_space_parses_back_to_its_row(name):
    spec = methods.get(name)
    setup = Profile.from_dict(_ALL).setups_for(spec)[0]
    space = spec.space(setup, **({"budget": 16} if name == "mcsd" else {}))
    assert len(space) > 0
    for config, label in zip(spec.configs_of(space), space["config"]):
        assert methods.parse_label(label) == config, label
        assert config.label == label


def test_registry_refuses_a_taken_name():
    with pytest.raises(ValueError, match="taken"):
        methods.register(type(methods.get("sd"))())
    with pytest.raises(InputError, match="unknown method 'nope'"):
        methods.parse_methods("sd,nope")


def test_an_engines_name_of_a_method_finds_the_method_that_declares_it():
    """Data naming the engine's method (a published study's vLLM runs) reaches our spec through the
    spec's `aliases`, the same names `--methods` takes."""
    for name in ("ngram", "NGRAM", "eagle3", "draft_model"):
        assert methods.engine_method(name).name == methods.parse_methods(name)[0]
        assert methods.engine_method(name).name != name.lower()
    with pytest.raises(InputError, match="no method is the engines' 'medusa' \\(known: .*ngram"):
        methods.engine_method("medusa")


def test_a_trained_router_is_the_drafters_own():
    from methods.spec import drafter_fixed, engine_config, priced_config

    from profiles.parts import Drafter, Router

    routed = Drafter("coral", model="eagle-router16:2", router=Router(groups=16, top_n=2))
    plain = Drafter("coral", model="eagle")
    run = methods.parse_label("coral g3 N16 top2")
    assert drafter_fixed(routed) == {"groups": 16, "top_n": 2} and drafter_fixed(plain) == {}
    assert priced_config(run, routed).label == "coral g3"            # the router is priced in the drafter
    assert engine_config(priced_config(run, routed), routed) == run
    assert priced_config(run, plain) == run


@pytest.mark.parametrize("label,needle", [
    ("cape g4 S88886666440", "each lies in 1..35"),          # a bin that verifies no token
    ("mcsd k4x0x1 repl", "config 'k'"),                      # a level of no candidates
    ("lookahead W4 N1 G4", "'N' must be in 2..32"),          # an n-gram of one token
    ("prompt_lookup g4 nmin3 nmax2", "exceeds n_max"),
])
def test_a_value_one_layer_refuses_every_layer_refuses_in_one_line(label, needle, tmp_path, capsys):
    """The label is refused by the registry, by the simulator, by the engine's command line and by
    the recorder's, all with the Param's own words (exit 2, one line), before any model loads."""
    from experiments import simulate
    from runtime.engine.__main__ import main as engine_main
    from simulator.methods import build_step_model
    from tests.simulator.fixtures import profile_dict
    from traces.record import main as record_main

    with pytest.raises(InputError, match=needle):
        methods.parse_label(label)
    with pytest.raises(InputError, match=needle):
        build_step_model(profile_dict(), label.split()[0], label)
    method = label.split()[0]
    for main, argv in [(simulate.main, ["stream", "--profile", "data/profiles/smollm2-135m-cpu.json", "--method", method,
                                        "--config", label, "--out", str(tmp_path / "sim")]),
                       (engine_main, ["--target", "tiny", "--methods", label]),
                       (record_main, ["--target", "tiny", "--method", method, "--config", label, "--prompts", "mtbench", "--limit", "1",
                                      "--out", str(tmp_path / "t.parquet")])]:
        assert main(argv) == 2
        lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert len(lines) == 1 and needle in lines[0], lines
