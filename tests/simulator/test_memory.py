"""KV memory of every drafter kind against its architecture, counted by hand: what a drafter borrows
from its target (Kangaroo's shallow layers and their cache, EAGLE's embeddings and LM head) is
stored once; a deployment that does not fit says so with the arithmetic."""
import pytest

from common.bundled import bundled
from common.errors import InputError
from simulator.memory import memory_of, replica_memory
from simulator.methods import build_step_model, load_profile

FP16 = 2


def _extra(profile_name: str, drafter: str):
    """(weight bytes, KV bytes per token) the drafter adds beside plain decoding."""
    profile = load_profile(bundled("profiles", f"{profile_name}.json"))
    plain, with_drafter = memory_of(profile), memory_of(profile, drafter)
    return (with_drafter.weight_bytes - plain.weight_bytes,
            with_drafter.bytes_per_token - plain.bytes_per_token, profile)


def test_kangaroo_stores_its_adapter_and_caches_its_adapter_layer_only():
    """Vicuna-13B, exit layer 3: the shallow layers, their KV and the embeddings are the target's;
    the adapter is one attention block (4 h^2) and two norms, with a one-layer KV cache."""
    weights, kv, _ = _extra("kangaroo-vicuna-13b-v100", "kangaroo")
    h = 5120
    assert weights == FP16 * (4 * h * h + 2 * h + h)   # + the final norm every architecture counts
    assert kv == FP16 * 2 * h                          # K and V of one layer, 40 heads x 128


def test_eagle_and_coral_drafters_borrow_the_embeddings_and_lm_head():
    """Llama-3-8B (GQA, 8 KV heads of 128): one decoder layer, the fc 2h -> h, a final norm, and the
    CORAL router's h x 16 weights; the 128k x 4096 embedding and head are the target's."""
    h, inter, kv_width = 4096, 14336, 8 * 128
    layer = h * h * 2 + 2 * h * kv_width + 3 * h * inter + 2 * h       # q, o + k, v + SwiGLU + norms
    for drafter, router in (("coral", 0), ("coral-router", h * 16)):
        weights, kv, _ = _extra("coral-llama-3-8b-a6000", drafter)
        assert weights == FP16 * (layer + 2 * h * h + h + h + router), drafter
        assert kv == FP16 * 2 * kv_width, drafter


def test_glide_and_a_draft_model_store_and_cache_their_own_layers():
    """GLIDE on Vicuna-7B: one decoder layer, a cross-attention block reading the target's cache,
    its own (tied) embedding; its self-attention keeps a one-layer cache. llama-68m: all of it."""
    h, inter, vocab = 4096, 11008, 32000
    weights, kv, _ = _extra("glide-vicuna-7b-h800", "glide")
    layer = 4 * h * h + 3 * h * inter + 2 * h
    assert weights == FP16 * (layer + 4 * h * h + h + h + vocab * h)
    assert kv == FP16 * 2 * h
    weights, kv, _ = _extra("glide-vicuna-7b-h800", "llama-68m")
    small = 768
    layer = 4 * small * small + 3 * small * 3072 + 2 * small
    assert weights == FP16 * (2 * layer + small + 2 * vocab * small)        # untied head
    assert kv == FP16 * 2 * 2 * small


def test_kangaroo_on_a_v100_leaves_nearly_the_kv_memory_of_plain_decoding():
    """The issue's case: kangaroo L3 g2 eta0 on Vicuna-13B / V100 left 399 KV tokens against 3,379."""
    profile = load_profile(bundled("profiles", "kangaroo-vicuna-13b-v100.json"))
    ar = replica_memory(profile, build_step_model(profile, "ar", {}))
    kangaroo = replica_memory(profile, build_step_model(profile, "kangaroo", "kangaroo L3 g2 eta0"))
    assert ar.capacity_tokens == 3379
    assert 0.85 * ar.capacity_tokens < kangaroo.capacity_tokens < ar.capacity_tokens


def test_a_deployment_that_does_not_fit_says_so_with_the_arithmetic():
    profile = load_profile(bundled("profiles", "mcsd-llama-33b-a6000.json"))
    memory = memory_of(profile)
    assert not memory.fits and memory.capacity_tokens == 0
    assert memory.describe() == ("weights 65.1 GB of 43.2 GB usable on 1 x 48 GB A6000 (10% reserved): "
                                 "no KV memory left")
    with pytest.raises(InputError, match=r"^does not fit: weights 65.2 GB \(llama-33b 65.1 \+ llama-68m 0.1\) "
                                         r"of 43.2 GB usable on 1 x 48 GB A6000"):
        replica_memory(profile, build_step_model(profile, "sd", {"gamma": 4, "drafter": "llama-68m"}))
