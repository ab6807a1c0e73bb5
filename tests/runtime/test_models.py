"""runtime.llama and runtime.models: our forward matches HF's, the cache edits are exact, loaders."""
import pytest
import torch

from common.errors import InputError
from runtime.cache import causal_mask
from runtime.llama import from_hf
from runtime.models import (
    ARCHITECTURES, LoadedModel, architecture_config, check_same_vocabulary, load_model, random_architecture,
    tiny_model, truncated,
)


def _hf_pair(kind: str):
    from transformers import LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    shape = dict(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=256)
    if kind == "llama3":
        rope = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
        hf = LlamaForCausalLM(LlamaConfig(**shape, tie_word_embeddings=True, rope_parameters=rope))
    elif kind == "qwen2":
        hf = Qwen2ForCausalLM(Qwen2Config(**shape))
    elif kind == "mistral":
        hf = MistralForCausalLM(MistralConfig(**shape))
    else:
        hf = LlamaForCausalLM(LlamaConfig(**shape))
    hf = hf.double().eval()
    return hf, from_hf(hf)


@pytest.mark.parametrize("kind", ["llama", "llama3", "qwen2", "mistral"])
def test_logits_match_hf(kind):
    hf, ours = _hf_pair(kind)
    ids = torch.randint(0, 97, (2, 11), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = hf(ids).logits
        full = ours(ids).logits
        cache = ours.new_cache(batch=2, capacity=3)  # forces the cache to grow
        split = torch.cat([ours(ids[:, :6], cache).logits, ours(ids[:, 6:9], cache).logits,
                           ours(ids[:, 9:], cache).logits], dim=1)
    assert torch.allclose(full, ref, atol=1e-6, rtol=0)
    assert torch.allclose(split, ref, atol=1e-6, rtol=0)


def test_tree_mask_and_keep_equal_plain_path():
    """Two branches verified at once with a tree mask; keeping one branch equals decoding it alone."""
    model = tiny_model(3)
    prompt = torch.tensor([[5, 9, 2, 7]])
    branch_a, branch_b = [11, 12], [21, 22]
    with torch.no_grad():
        ref_cache = model.new_cache()
        model(prompt, ref_cache)
        ref = model(torch.tensor([branch_b]), ref_cache).logits[0]
        cache = model.new_cache()
        model(prompt, cache)
        past = cache.length
        tree = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 1, 1]], dtype=torch.bool)
        mask = torch.cat([torch.ones(4, past, dtype=torch.bool), tree], dim=1)
        pos = torch.tensor([past, past + 1, past, past + 1])
        out = model(torch.tensor([branch_a + branch_b]), cache, position_ids=pos, mask=mask).logits[0]
        assert torch.allclose(out[2:], ref, atol=1e-10)
        cache.keep(past, [past + 2, past + 3])
        assert cache.length == past + 2
        nxt = model(torch.tensor([[3]]), cache).logits[0]
        model(torch.tensor([[3]]), ref_cache)
        ref_k, _ = ref_cache.layer_kv(1)
        k, _ = cache.layer_kv(1)
        assert torch.allclose(k, ref_k, atol=1e-10)
        ref_cache.crop(past + 2)
        assert torch.allclose(nxt, model(torch.tensor([[3]]), ref_cache).logits[0], atol=1e-10)


def test_layer_range_resume_and_hidden_states():
    model = tiny_model(4, num_layers=3)
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    with torch.no_grad():
        whole = model(ids, output_hidden_states=True)
        cache = model.new_cache()
        low = model(ids, cache, layers=range(0, 1))
        assert low.logits is None and cache.lengths == [5, 0, 0]
        high = model(cache=cache, hidden=low.hidden, layers=range(1, 3))
    assert torch.allclose(high.logits, whole.logits, atol=1e-12)
    assert len(whole.hidden_states) == 4 and torch.allclose(whole.hidden_states[1], low.hidden)
    cache.crop(4, range(1, 2))
    with pytest.raises(ValueError, match="different cache lengths"):
        model(torch.tensor([[1]]), cache, layers=range(0, 2))


def test_causal_mask_shape():
    mask = causal_mask(2, 3)
    assert mask.shape == (3, 5) and mask[0].tolist() == [True, True, True, False, False]


def test_truncated_shares_weights_and_matches_first_layers():
    model = tiny_model(5, num_layers=3)
    small = truncated(model, 1)
    ids = torch.tensor([[4, 8, 15]])
    with torch.no_grad():
        h = model(ids, layers=range(0, 1)).hidden
        assert torch.allclose(small(ids).logits, model.head(h))
    assert small.embed_tokens.weight is model.embed_tokens.weight
    with pytest.raises(InputError, match="1..3 layers"):
        truncated(model, 4)


def test_registry_shapes_and_random_architecture():
    cfg = architecture_config("Mistral-7B")
    assert (cfg.num_layers, cfg.hidden_size, cfg.num_kv_heads, cfg.head_dim) == (32, 4096, 8, 128)
    assert architecture_config("qwen2.5-7b").qkv_bias
    for name in ("vicuna-7b", "vicuna-13b", "vicuna-33b", "llama-68m", "llama-160m", "llama-2-7b",
                 "llama-2-13b", "llama-3-8b", "qwen2.5-7b"):
        assert name in ARCHITECTURES
    model = random_architecture("llama-68m", num_layers=1, device="cpu", seed=1)
    again = random_architecture("llama-68m", num_layers=1, device="cpu", seed=1)
    assert model.dtype == torch.float32 and torch.equal(model.lm_head.weight, again.lm_head.weight)
    with torch.no_grad():
        assert model(torch.tensor([[1, 2]])).logits.shape == (1, 2, 32000)
    with pytest.raises(InputError, match="unknown architecture"):
        architecture_config("gpt-5")


def test_loader_errors():
    with pytest.raises(InputError, match="not found"):
        load_model("/nonexistent/model")
    with pytest.raises(InputError, match="not found"):
        load_model("./missing.gguf")
    a = LoadedModel(tiny_model(0), None, "a")
    b = LoadedModel(tiny_model(0, vocab_size=65), None, "b")
    with pytest.raises(InputError, match="vocabulary size 65"):
        check_same_vocabulary(a, b)
    check_same_vocabulary(a, LoadedModel(tiny_model(1), None, "c"))


@pytest.mark.slow
def test_smollm2_matches_hf():
    from transformers import AutoModelForCausalLM

    from runtime.models import smollm2_gguf_path

    path = smollm2_gguf_path()
    hf = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32).eval()
    ours = from_hf(hf)
    ids = torch.tensor([[1, 4093, 2, 198, 14804, 314, 253, 1345, 30, 657, 5248]])
    with torch.no_grad():
        ref, got = hf(ids).logits, ours(ids).logits
    assert (ref - got).abs().max() < 1e-3 * ref.abs().max()
    assert torch.equal(ref.argmax(-1), got.argmax(-1))


def test_an_unknown_hub_model_offline_is_refused_at_once(monkeypatch):
    """transformers retries an unreachable hub for half a minute; a name that is neither here nor in
    the cache is refused in one line as soon as the hub does not answer."""
    import time

    from runtime import models

    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)     # the tests' conftest sets it
    monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", "http://127.0.0.1:9")   # nothing listens there
    with pytest.raises(InputError, match="model 'a b' is not a file or folder here, nor a model name"):
        models.load_model("a b")
    start = time.perf_counter()
    with pytest.raises(InputError, match=r"model 'nope' is not a file or folder here, nor in the Hugging Face "
                                         r"cache, and http://127.0.0.1:9 cannot be reached"):
        models.load_model("nope")
    assert time.perf_counter() - start < 5.0                   # was 25 s of retries
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    with pytest.raises(InputError, match="model 'nope' .* and HF_HUB_OFFLINE is set"):
        models.load_model("nope")


def test_a_cached_hub_model_loads_from_the_cache_when_offline(monkeypatch):
    from runtime import models

    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    monkeypatch.setattr(models, "_reachable", lambda url: False)
    monkeypatch.setattr("huggingface_hub.try_to_load_from_cache", lambda repo, name: f"/cache/{repo}/{name}")
    assert models.hub_source("org/model") == {"local_files_only": True}
    monkeypatch.setattr(models, "_reachable", lambda url: True)
    assert models.hub_source("org/model") == {}
