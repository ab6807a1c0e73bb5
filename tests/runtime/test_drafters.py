"""GLIDE, Kangaroo and CORAL drafters and their engine methods, on tiny random models.

A 6-token vocabulary makes random drafters agree with the target often enough that multi-token
acceptances, full acceptances (bonus tokens) and rollbacks all happen within a few dozen tokens.
"""
import pytest
import torch

from runtime.drafters.coral import FeatureDrafter
from runtime.drafters.glide import GlideDrafter, block_cross_mask, causal_cross_mask
from runtime.drafters.io import load_drafter, save_drafter
from runtime.drafters.kangaroo import KangarooAdapter
from runtime.drafters.router import LMHeadRouter
from runtime.linear import linear
from runtime.engine import Sampling, make_decoder
from common.errors import InputError
from runtime.models import tiny_model

PROMPT = [1, 5, 3, 2, 0]
NEW = 24


@pytest.fixture(scope="module")
def target():
    torch.manual_seed(0)
    return tiny_model(0, num_layers=4, vocab_size=6)


@pytest.fixture(scope="module")
def reference(target):
    return make_decoder("ar", target).generate(PROMPT, NEW).tokens


CONFIGS = [
    ("glide", dict(gamma=4, drafter_std=0.3)),
    ("glide", dict(gamma=3, bins=[4] * 11, layers=2, hidden=16, drafter_std=0.3)),
    ("kangaroo", dict(gamma=5, eta=0.2, exit_layer=3, drafter_std=0.3)),
    ("kangaroo", dict(gamma=3, eta=0.0, exit_layer=1, drafter_std=0.3)),
    ("coral", dict(gamma=4, drafter_std=0.3)),
    ("coral", dict(gamma=3, groups=3, top_n=2, drafter_std=0.3)),
]


@pytest.mark.parametrize("method,config", CONFIGS, ids=[f"{m}-{i}" for i, (m, _) in enumerate(CONFIGS)])
def test_greedy_identity_with_untrained_drafters(target, reference, method, config):
    out = make_decoder(method, target, None, **config).generate(PROMPT, NEW)
    assert out.tokens == reference
    assert sum(s.accepted for s in out.steps) >= NEW
    assert all(1 <= s.accepted <= config["gamma"] + 2 for s in out.steps)


def test_untrained_drafters_do_get_tokens_accepted(target, reference):
    """The identity tests above exercise acceptance, not only the correction path."""
    for method, config in (CONFIGS[0], CONFIGS[2], CONFIGS[4]):
        steps = make_decoder(method, target, None, **config).generate(PROMPT, NEW).steps
        assert max(s.accepted for s in steps) >= 2, method


def _identity_upper_layers(base, exit_layer):
    """A copy of `base` whose layers >= exit_layer add nothing (zero output projections)."""
    model = tiny_model(0, num_layers=4, vocab_size=6)
    model.load_state_dict(base.state_dict())
    with torch.no_grad():
        for layer in model.layers[exit_layer:]:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
    return model


def test_kangaroo_perfect_adapter_accepts_every_draft(target):
    """Adapter = identity and target's final norm, upper layers inert: drafts are the target's own
    predictions, so every step drafts gamma, accepts all and adds the bonus token (the path where
    the adapter lags one feature behind)."""
    model = _identity_upper_layers(target, 2)
    adapter = KangarooAdapter.for_target(model, 2, seed=1)
    with torch.no_grad():
        adapter.attn.o_proj.weight.zero_()
        adapter.norm_out.weight.copy_(model.norm.weight)
    ref = make_decoder("ar", model).generate(PROMPT, 17).tokens
    out = make_decoder("kangaroo", model, adapter, gamma=3, eta=0.0, exit_layer=2).generate(PROMPT, 17)
    assert out.tokens == ref
    assert [s.accepted for s in out.steps[:-1]] == [4] * (len(out.steps) - 1)
    assert all(s.accept_mask == [True] * 3 for s in out.steps[:-1])


def test_kangaroo_stops_after_first_low_confidence_draft(target):
    steps = make_decoder("kangaroo", target, None, gamma=6, eta=0.5, exit_layer=2, drafter_std=0.3).generate(PROMPT, NEW).steps
    for s in steps:
        conf = s.confidences
        assert all(c > 0.5 for c in conf[:-1])
        assert len(conf) == 6 or conf[-1] <= 0.5


def test_router_full_top_n_is_the_plain_head():
    torch.manual_seed(0)
    router = LMHeadRouter(8, 50, n_groups=5, top_n=5).double()
    hidden, weight = torch.randn(3, 8, dtype=torch.float64), torch.randn(50, 8, dtype=torch.float64)
    assert torch.equal(router.routed_logits(hidden, weight), linear(hidden, weight))   # the plain head's product


def test_router_partial_top_n_renormalises_over_active_groups():
    torch.manual_seed(1)
    router = LMHeadRouter(8, 50, n_groups=5, top_n=2).double()
    hidden, weight = torch.randn(4, 8, dtype=torch.float64), torch.randn(50, 8, dtype=torch.float64)
    q = torch.softmax(router.routed_logits(hidden, weight), dim=-1)
    plain = torch.softmax(hidden @ weight.T, dim=-1)
    for row in range(4):
        groups = router.active_groups(hidden[row]).tolist()
        active = router.group_rows(groups, "cpu")
        assert len(active) == 20 and float(q[row].sum()) == pytest.approx(1.0)
        outside = torch.ones(50, dtype=torch.bool)
        outside[active] = False
        assert torch.all(q[row, outside] == 0)
        expected = plain[row, active] / plain[row, active].sum()
        assert torch.allclose(q[row, active], expected, atol=1e-12)


def test_router_uneven_groups_cover_the_vocabulary():
    router = LMHeadRouter(4, 10, n_groups=3, top_n=1)
    rows = router.group_rows([0, 1, 2], "cpu").tolist()
    assert rows == list(range(10))


def test_coral_router_with_all_groups_matches_no_router(target):
    plain = FeatureDrafter.for_target(target, seed=3, std=0.3)
    full = plain.with_router(3, 3)
    features = torch.randn(1, 4, target.config.hidden_size, dtype=target.dtype)
    assert torch.equal(plain.logits(features, target), full.logits(features, target))


def test_glide_layer_m_reads_target_layer_nt_minus_nd_plus_m(target):
    drafter = GlideDrafter.for_target(target, num_layers=2, seed=1, std=0.3)
    assert [drafter.config.target_layer(m) for m in range(2)] == [2, 3]
    cache = target.new_cache()
    target(torch.tensor([PROMPT]), cache, logits=False)
    ids = torch.tensor([[4]])
    at = torch.tensor([5])  # after the cached prompt, so every cached position is visible
    base = drafter(ids, drafter.target_kv(cache), target.rope, position_ids=at).logits
    for layer, changes in ((1, False), (2, True), (3, True)):
        cache.values[layer][:, :, :5] += 1.0
        moved = drafter(ids, drafter.target_kv(cache), target.rope, position_ids=at).logits
        cache.values[layer][:, :, :5] -= 1.0
        assert (not torch.allclose(moved, base)) == changes, layer


def test_glide_cross_masks():
    assert block_cross_mask(6, 2).tolist()[3] == [True, True, False, False, False, False]
    m = causal_cross_mask(torch.tensor([[0, 2]]), 3)[0, 0]
    assert m.tolist() == [[False, False, False], [True, True, False]]
    with pytest.raises(InputError):
        block_cross_mask(4, 0)


@pytest.mark.parametrize("kind", ["glide", "kangaroo", "coral"])
def test_save_load_round_trip(tmp_path, target, kind):
    if kind == "glide":
        drafter = GlideDrafter.for_target(target, seed=4, std=0.3)
    elif kind == "kangaroo":
        drafter = KangarooAdapter.for_target(target, 2, seed=4, std=0.3)
    else:
        drafter = FeatureDrafter.for_target(target, router_groups=3, router_top_n=1, seed=4, std=0.3)
    path = save_drafter(tmp_path / f"{kind}.safetensors", drafter)
    loaded = load_drafter(path, target)
    for (name, a), (_, b) in zip(drafter.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), name
    config = {"glide": {}, "kangaroo": {"exit_layer": 2}, "coral": {"groups": 3, "top_n": 1}}[kind]
    a = make_decoder(kind, target, drafter, gamma=3, **config).generate(PROMPT, 8).steps
    b = make_decoder(kind, target, str(path), gamma=3, **config).generate(PROMPT, 8).steps
    assert [s.confidences for s in a] == [s.confidences for s in b]


def test_load_rejects_bad_files(tmp_path, target):
    with pytest.raises(InputError, match="not found"):
        load_drafter(tmp_path / "missing.safetensors", target)
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"not a safetensors file")
    with pytest.raises(InputError, match="not a safetensors"):
        load_drafter(junk, target)
    other = tiny_model(1, num_layers=2, vocab_size=6)
    path = save_drafter(tmp_path / "k.safetensors", KangarooAdapter.for_target(target, 2))
    with pytest.raises(InputError, match="another shape"):
        load_drafter(path, other)


@pytest.mark.parametrize("method,config,needle", [
    ("kangaroo", {"exit_layer": 4}, "exit_layer"),
    ("kangaroo", {"eta": 1.5}, "eta"),
    ("coral", {"groups": 3, "top_n": 4}, "top_n"),
    ("coral", {"groups": 7}, "groups"),
    ("glide", {"gamma": 0}, "gamma"),
    ("glide", {"layers": 9}, "layers"),
    ("glide", {"colour": "red"}, "colour"),
])
def test_bad_configuration_is_one_clear_error(target, method, config, needle):
    with pytest.raises(InputError, match=needle):
        make_decoder(method, target, None, **config)


def test_wrong_drafter_kind_is_rejected(target):
    with pytest.raises(InputError, match="expected a coral drafter"):
        make_decoder("coral", target, GlideDrafter.for_target(target))


# --------------------------------------------------------------------------- output law (sampling)

def _two_token_law(model, temperature):
    """Exact law of the first two sampled tokens of plain sampling from `model`, as a vector over 36."""
    sampling = Sampling(temperature)
    with torch.no_grad():
        p1 = sampling.probs(model(torch.tensor([PROMPT])).logits[0, -1])
        rows = torch.stack([sampling.probs(model(torch.tensor([PROMPT + [x]])).logits[0, -1]) for x in range(6)])
    return (p1[:, None] * rows).flatten().numpy()


@pytest.mark.slow
@pytest.mark.parametrize("method,config", [
    ("glide", dict(gamma=2, drafter_std=0.3)),
    ("kangaroo", dict(gamma=2, eta=0.1, exit_layer=2, drafter_std=0.3)),
    ("coral", dict(gamma=2, groups=3, top_n=2, drafter_std=0.3)),
])
def test_sampling_output_law_is_the_targets(target, method, config):
    from verification.statistical import statistical_check

    temperature = 0.8
    law = _two_token_law(target, temperature)
    decoder = make_decoder(method, target, None, sampling=Sampling(temperature), **config)

    def sampler(case, rng):
        decoder.seed = int(rng.rng.integers(2**31))
        a, b = decoder.generate(PROMPT, 2).tokens
        return 6 * a + b

    result = statistical_check(sampler, None, target=law, n=1000, alpha=1e-4, tests=3)
    assert result.passed, result.reason
