"""runtime.engine: greedy identity of every method, step records, bad configurations, output law."""
import pytest
import torch

import methods
from runtime.engine import Sampling, make_decoder
from common.errors import InputError
from runtime.models import tiny_model, truncated

PROMPT = [3, 7, 1, 9, 12, 5, 3, 7, 1, 9]
NEW = 40

CONFIGS = [
    ("sd", {"gamma": 1}), ("sd", {"gamma": 4}),
    ("mcsd", {"k": "3x2x1"}), ("mcsd", {"k": "2x2", "replacement": False}), ("mcsd", {"k": "1x1x1x1x1"}),
    ("cape", {"gamma": 3}), ("cape", {"gamma": 5, "bins": [8, 8, 6, 6, 4, 4, 3, 3, 2, 2, 1]}),
    ("lookahead", {"W": 4, "N": 3, "G": 3}), ("lookahead", {"W": 2, "N": 2, "G": 2, "prompt_ngrams": False}),
    ("lookahead", {"W": 3, "N": 4, "G": 4}),
]


@pytest.fixture(scope="module")
def models():
    target = tiny_model(0, num_layers=3)
    return target, truncated(target, 1), tiny_model(7, num_layers=1)


def _plain_greedy(model, prompt, n):
    """Greedy decoding by full recomputation, no cache: the independent reference."""
    seq = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            seq.append(int(model(torch.tensor([seq])).logits[0, -1].argmax()))
    return seq[len(prompt):]


def test_ar_equals_recomputed_greedy(models):
    target = models[0]
    out = make_decoder("ar", target).generate(PROMPT, NEW)
    assert out.tokens == _plain_greedy(target, PROMPT, NEW)
    assert len(out.steps) == NEW and all(s.accepted == 1 and s.draft_forwards == 0 for s in out.steps)


@pytest.mark.parametrize("method,config", CONFIGS, ids=[f"{m}-{i}" for i, (m, _) in enumerate(CONFIGS)])
def test_greedy_identity(models, method, config):
    target, shallow, other = models
    reference = make_decoder("ar", target).generate(PROMPT, NEW).tokens
    drafters = [None] if method == "lookahead" else [shallow, other, target]
    for drafter in drafters:
        out = make_decoder(method, target, drafter, **config).generate(PROMPT, NEW)
        assert out.tokens == reference, (method, config)
        assert sum(s.accepted for s in out.steps) == NEW
        assert [s.step for s in out.steps] == list(range(len(out.steps)))
        for s in out.steps:
            assert s.ctx_len >= len(PROMPT) and s.verify_tokens >= 1 and s.draft_s >= 0 and s.overhead_s >= 0
            assert sum(s.accept_mask) == min(s.accepted - 1, len(s.accept_mask)) or s is out.steps[-1]
        if drafter is target:
            depth = config.get("gamma") or len(config["k"].split("x"))
            assert max(s.accepted for s in out.steps) == depth + 1  # a perfect drafter is accepted whole


def test_lookahead_accepts_ngrams_on_repetitive_text():
    """A target that loops makes pool n-grams hit: steps commit several tokens at once."""
    target = tiny_model(11, vocab_size=16, num_layers=2, std=1.0)
    reference = make_decoder("ar", target).generate(PROMPT[:4], 60).tokens
    out = make_decoder("lookahead", target, W=4, N=3, G=4).generate(PROMPT[:4], 60)
    assert out.tokens == reference
    assert max(s.accepted for s in out.steps) >= 2


def test_eos_stops_and_caps(models):
    target = models[0]
    full = make_decoder("ar", target).generate(PROMPT, NEW).tokens
    eos = full[5]
    out = make_decoder("sd", target, models[2], gamma=3).generate(PROMPT, NEW, eos_token_id=eos)
    assert out.tokens == full[: full.index(eos) + 1]


@pytest.mark.parametrize("method,config,match", [
    ("beam", {}, "unknown method 'beam'"),
    ("mcsd", {"k": "4x0"}, "'k'.*factors must be >= 1"),
    ("mcsd", {"k": "abc"}, "'k'.*k-configuration 'abc'"),
    ("sd", {"gamma": 0}, "'gamma' must be in 1.."),
    ("cape", {"gamma": 2, "bins": [1, 2]}, "'bins'.*needs 11 entries"),
    ("lookahead", {"W": 0}, "'W' must be in 1.."),
    ("lookahead", {"N": 1}, "'N' must be in 2.."),
    ("sd", {"gamma": 2, "depth": 3}, "unknown config key 'depth'"),
    ("sd", {"gama": 8}, "unknown config key 'gama'"),
    ("sd", {"drafter_seed": 1}, "unknown config key 'drafter_seed'"),   # another decoder's option
])
def test_bad_configuration(models, method, config, match):
    with pytest.raises(InputError, match=match):
        make_decoder(method, models[0], models[1], **config)


def test_bad_drafter_and_sampling(models):
    with pytest.raises(InputError, match="vocabulary size 65 differs"):
        make_decoder("sd", models[0], tiny_model(0, vocab_size=65), gamma=2)
    with pytest.raises(InputError, match="needs a drafter"):
        make_decoder("sd", models[0], None, gamma=2)
    with pytest.raises(InputError, match="top_p"):
        Sampling(1.0, top_p=0.0)
    assert set(methods.names()) >= {"ar", "sd", "mcsd", "cape", "lookahead"}


def test_every_method_names_its_decoder_class():
    for spec in methods.specs():
        assert spec.decoder_class().method == spec.name, spec.decoder


def test_config_is_the_registry_config_and_options_are_the_decoders(models):
    """Config keys go through the method's config class (its defaults), options stay the decoder's."""
    mcsd = make_decoder("mcsd", models[0], models[1], k="4x2x1")
    assert mcsd.config == methods.get("mcsd").config(k=(4, 2, 1)) and mcsd.options == {}
    assert mcsd.config.replacement and mcsd.replacement
    assert make_decoder("sd", models[0], models[1]).config.gamma == methods.get("sd").config().gamma
    glide = make_decoder("glide", models[0], None, gamma=2, layers=2)
    assert glide.config.label == "glide g2" and glide.options["layers"] == 2
    assert glide.options["drafter_seed"] == type(glide).options["drafter_seed"]


def test_cli_methods_as_json_or_label():
    from runtime.engine.__main__ import parse_method

    assert parse_method('mcsd:{"k": "4x2x1"}') == ("mcsd", {"k": [4, 2, 1], "replacement": True}, None)
    assert parse_method("mcsd k4x2x1 norepl") == ("mcsd", {"k": [4, 2, 1], "replacement": False}, None)
    assert parse_method("lookahead") == ("lookahead", methods.get("lookahead").config().to_dict(), None)
    assert parse_method('coral:{"gamma": 3, "drafter_std": 0.1}') == (
        "coral", {**methods.get("coral").config(gamma=3).to_dict(), "drafter_std": 0.1}, None)
    for text, needle in [("beam", "unknown method 'beam'"), ('sd:{"gama": 8}', "unknown config key 'gama'"),
                         ("sd g4 x9", "token 'x9'"), ('sd:{"drafter": "a.safetensors"}', "unknown config key 'drafter'"),
                         ('kangaroo:{"drafter": "no/such.safetensors"}', "drafter file not found")]:
        with pytest.raises(InputError, match=needle):
            parse_method(text)


def test_top_p_keeps_nucleus():
    probs = Sampling(1.0, top_p=0.6).probs(torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]])))
    assert torch.allclose(probs, torch.tensor([[0.625, 0.375, 0.0, 0.0]], dtype=torch.float64))


# --- output law at temperature > 0 -----------------------------------------------------------

VOCAB = 6


def _two_token_law(model, prompt, sampling):
    with torch.no_grad():
        first = sampling.probs(model(torch.tensor([prompt])).logits[0, -1])
        rows = sampling.probs(model(torch.tensor([[*prompt, t] for t in range(VOCAB)])).logits[:, -1])
    return (first[:, None] * rows).flatten().numpy()


@pytest.mark.slow
@pytest.mark.parametrize("method,config", [
    ("sd", {"gamma": 3}), ("mcsd", {"k": "2x2"}), ("mcsd", {"k": "3x1", "replacement": False}),
    ("cape", {"gamma": 2, "bins": [3] * 11}), ("lookahead", {"W": 2, "N": 2, "G": 2}),
])
def test_sampled_law_of_first_two_tokens(method, config):
    from verification.statistical import statistical_check

    target = tiny_model(2, vocab_size=VOCAB, num_layers=1, std=0.8)
    drafter = tiny_model(3, vocab_size=VOCAB, num_layers=1, std=0.8)
    prompt = [1, 2, 3]
    sampling = Sampling(temperature=1.0, top_p=0.95)
    law = _two_token_law(target, prompt, sampling)

    decoder = make_decoder(method, target, None if method == "lookahead" else drafter,
                           sampling=sampling, **config)

    def sampler(case, rng):
        decoder.seed = int(rng.uniform() * 2**31)
        out = decoder.generate(prompt, 2).tokens
        return out[0] * VOCAB + out[1]

    # 700 draws: a law at TV distance >= 0.15 from the target's fails with high probability
    result = statistical_check(sampler, None, target=law, n=700, alpha=1e-4, seed=5)
    assert result.passed, result.reason
