"""costmodel.params: parameter counts and KV-cache bytes against the published model sizes."""
import pytest

from costmodel.params import (
    ARCHITECTURES, Arch, drafter_arch, embedding_params, get_arch, kv_bytes_per_token, non_embedding_params,
    total_params,
)

PUBLISHED = {  # total parameters from the model cards (Hugging Face safetensors counts)
    "vicuna-7b": 6.738e9, "vicuna-13b": 13.016e9, "vicuna-33b": 32.529e9, "mistral-7b": 7.242e9,
    "llama-3-8b": 8.030e9, "qwen2.5-7b": 7.616e9, "smollm2-135m": 134.5e6, "llama-68m": 68.0e6,
    "llama-160m": 162.4e6, "llama-2-70b": 68.977e9,
}


@pytest.mark.parametrize("name,count", sorted(PUBLISHED.items()))
def test_total_params_match_published(name, count):
    assert total_params(get_arch(name)) == pytest.approx(count, rel=2e-3)


def test_embeddings_counted_apart():
    a = get_arch("llama-3-8b")
    assert embedding_params(a) == 128256 * 4096
    assert total_params(a) == pytest.approx(non_embedding_params(a) + 2 * embedding_params(a))
    tied = get_arch("smollm2-135m")
    assert total_params(tied) == pytest.approx(non_embedding_params(tied) + embedding_params(tied))


def test_kv_bytes_per_token_with_gqa():
    assert kv_bytes_per_token(get_arch("vicuna-7b"), 2) == 2 * 32 * 4096 * 2          # 512 KiB, MHA
    assert kv_bytes_per_token(get_arch("mistral-7b"), 2) == 2 * 32 * 8 * 128 * 2      # 128 KiB, GQA 8
    assert kv_bytes_per_token(get_arch("qwen2.5-7b"), 2) == 2 * 28 * 4 * 128 * 2


def test_drafter_architectures():
    t = get_arch("vicuna-7b")
    eagle = Arch.from_dict(drafter_arch("coral", t))
    router = Arch.from_dict(drafter_arch("coral", t, top_n=2, groups=16))
    assert router.lm_head_fraction == pytest.approx(2 / 16)
    assert non_embedding_params(router) - non_embedding_params(eagle) == pytest.approx(4096 * 16)
    glide = Arch.from_dict(drafter_arch("glide", t))
    assert glide.cross_kv_layers == 1 and glide.n_layers == 1
    kangaroo = Arch.from_dict(drafter_arch("kangaroo", t, exit_layer=2))
    assert kangaroo.n_layers == 2 and kangaroo.extra_kv_layers == 1
    with pytest.raises(ValueError, match="exit_layer 40"):
        drafter_arch("kangaroo", t, exit_layer=40)
    with pytest.raises(ValueError, match="top_n 0"):
        drafter_arch("coral", t, top_n=0, groups=8)


def test_bad_architectures_name_the_field():
    with pytest.raises(ValueError, match="unknown architecture 'gpt-9'.*vicuna-7b"):
        get_arch("gpt-9")
    with pytest.raises(ValueError, match="missing 'vocab'"):
        Arch.from_dict({k: v for k, v in ARCHITECTURES["vicuna-7b"].items() if k != "vocab"})
    with pytest.raises(ValueError, match="not a multiple of n_kv_heads"):
        Arch.from_dict(dict(ARCHITECTURES["vicuna-7b"], n_kv_heads=5))


def test_engine_registry_agrees_with_costmodel_registry():
    """runtime.models keeps HF-named copies of the same architectures: they must not drift apart."""
    models = pytest.importorskip("runtime.models")
    for name, config in models.ARCHITECTURES.items():
        ours = get_arch(name)
        theirs = Arch.from_dict(config, name)
        assert total_params(theirs) == total_params(ours), name
        assert kv_bytes_per_token(theirs, 2) == kv_bytes_per_token(ours, 2), name
