"""`traces.timing --engine transformers`: transformers' own forwards timed over the grid, each forward
the one an assisted step runs after that much context, and one-line bad input."""
from __future__ import annotations

import pytest
import torch

from traces import schema, timing
from traces.timing_transformers import FilledCache, TransformersForward, first_layers


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
                         num_hidden_layers=3, max_position_embeddings=256, initializer_range=0.4)
    path = tmp_path_factory.mktemp("hf")
    LlamaForCausalLM(config).eval().save_pretrained(path)
    return path


def run(tmp_path, model, *extra):
    out = tmp_path / "lat.parquet"
    code = timing.main(["--model", str(model), "--engine", "transformers", "--tokens", "1,3", "--ctx", "0,5",
                        "--batch", "1", "--warmup", "0", "--repeats", "1", "--min-repeats", "1", "--quiet",
                        "--device", "cpu", "--threads", "1", "--out", str(out), *extra])
    return code, out


def test_grid_rows_of_the_target_and_its_first_layers(tmp_path, hf_dir):
    code, out = run(tmp_path, hf_dir, "--drafter", "layers:1")
    assert code == 0
    frame, meta = schema.read_trace(out, "latency")
    assert frame.groupby("role").size().to_dict() == {"draft": 4, "target": 4}
    assert set(frame[frame.role == "draft"].model) == {"layers:1"}
    assert sorted(set(zip(frame.n_tokens, frame.ctx_len))) == [(1, 0), (1, 5), (3, 0), (3, 5)]
    assert (frame.seconds > 0).all() and meta.extra["engine"] == "transformers"


def test_a_forward_after_the_filled_cache_is_the_forward_after_that_context(hf_dir):
    """The timed forward is the real one: after a cache holding a prefix's keys and values it gives
    the logits of the whole sequence's last positions (positions and mask follow the cache)."""
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(hf_dir).eval()
    forward = TransformersForward(hf)
    ids = torch.tensor([[5, 9, 2, 40, 7, 7, 13, 1]])
    with torch.no_grad():
        whole = hf(input_ids=ids).logits
        prefix = hf(input_ids=ids[:, :5], use_cache=True).past_key_values
        layers = [(prefix.layers[i].keys, prefix.layers[i].values) for i in range(forward.config.num_layers)]
        cache = FilledCache(layers)
        assert torch.allclose(forward(ids[:, 5:], cache), whole[:, 5:], atol=1e-5)
        cache.crop(5)                       # back to the prefix alone: the same forward again
        assert cache.dynamic.get_seq_length() == 5
        assert torch.allclose(forward(ids[:, 5:], cache), whole[:, 5:], atol=1e-5)


def test_first_layers_share_the_targets_weights(hf_dir):
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(hf_dir).eval()
    small = first_layers(hf, 1)
    assert small.config.num_hidden_layers == 1 and len(small.model.layers) == 1
    assert small.model.layers[0] is hf.model.layers[0] and small.lm_head is hf.lm_head


@pytest.mark.parametrize("extra,needle", [
    (["--drafter", "layers:9"], "layers:9: the target has 3 layers"),
    (["--drafter", "layers:x"], "layers:K needs a whole number"),
    (["--router", "4:1"], "--engine transformers times eager forwards only"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys, hf_dir, extra, needle):
    work = tmp_path / "w"
    work.mkdir()
    code, out = run(work, hf_dir, *extra)
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("error: ") and needle in err and "\n" not in err
    assert not out.exists() and not list(work.iterdir())
