"""runtime.cache / runtime.graph: the static and graph modes decode exactly as the eager mode.

On a CPU the graph mode runs its whole path (width buckets, padding, static input buffers,
"replay" by calling the recorded function again) except the CUDA capture itself.
"""
import pytest
import torch

import methods
from common.errors import InputError
from runtime.engine import make_decoder
from runtime.engine.tree import with_prefix
from runtime.graph import GraphRunner, mode_agreement
from runtime.models import tiny_model, truncated

PROMPT = [3, 7, 1, 9, 12, 5, 3, 7, 1, 9]
NEW = 24
CONFIGS = {"sd": {"gamma": 3}, "mcsd": {"k": "3x2x1"}, "cape": {"gamma": 3, "bins": [4, 4, 3, 3, 2, 2, 1, 1, 1, 1, 1]},
           "glide": {"gamma": 3}, "lookahead": {"W": 3, "N": 3, "G": 3}, "kangaroo": {"gamma": 3, "exit_layer": 1},
           "coral": {"gamma": 3, "groups": 4, "top_n": 4}, "ar": {}}


@pytest.fixture(scope="module")
def models():
    target = tiny_model(0, num_layers=3)
    return target, truncated(target, 1)


def _decoder(name, models, mode):
    target, shallow = models
    drafter = shallow if methods.get(name).decoder_class().needs_drafter else None
    return make_decoder(name, target, drafter, mode=mode, **CONFIGS.get(name, {}))


@pytest.mark.parametrize("name", methods.names())
def test_static_and_graph_modes_decode_as_eager(models, name):
    eager = _decoder(name, models, "eager").generate(PROMPT, NEW)
    assert name == "ar" or any(not all(s.accept_mask) for s in eager.steps)   # rejections: crops ran
    for mode in ("static", "graph"):
        decoder = _decoder(name, models, mode)
        out = decoder.generate(PROMPT, NEW)
        assert out.tokens == eager.tokens, (name, mode)
        assert [s.accepted for s in out.steps] == [s.accepted for s in eager.steps], (name, mode)
        assert {s.mode for s in out.steps} == {mode} and {s.mode for s in eager.steps} == {"eager"}
        if mode == "graph":  # a second prompt reuses the caches and the recorded shapes
            runner = decoder.runner
            seen = runner.captures
            again = decoder.generate(PROMPT, NEW)
            assert again.tokens == eager.tokens and runner.captures == seen and runner.replays > 0


def test_padding_does_not_change_a_tree_forward(models):
    target = models[0]
    tree = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=torch.bool)
    ids, prompt = torch.tensor([[4, 5, 6]]), torch.tensor([PROMPT])
    results = []
    for mode, runner in (("eager", None), ("static", None), ("graph", GraphRunner("cpu"))):
        cache = target.new_cache(capacity=64, mode=mode, runner=runner)
        target(prompt, cache)
        logits = target(ids, cache, position_ids=torch.tensor([10, 11, 11]), mask=with_prefix(10, tree)).logits
        cache.keep(11, [12])                       # the accepted path: the second branch
        nxt = target(torch.tensor([[2]]), cache).logits
        results.append((logits, nxt, cache.length))
    assert GraphRunner.width(3) == 4               # the graph-mode tree forward was padded by one row
    for logits, nxt, length in results[1:]:
        torch.testing.assert_close(logits, results[0][0], rtol=0, atol=1e-12)
        torch.testing.assert_close(nxt, results[0][1], rtol=0, atol=1e-12)
        assert length == results[0][2] == 13


def test_static_cache_refuses_to_overflow_and_bad_modes(models):
    target = models[0]
    cache = target.new_cache(capacity=8, mode="static")
    with pytest.raises(InputError, match="static KV cache is full: 11 entries asked, capacity 8"):
        target(torch.tensor([PROMPT + [1]]), cache)
    with pytest.raises(InputError, match="mode must be one of eager, static, graph"):
        make_decoder("ar", target, mode="fast")


def test_mode_agreement_compares_logits(models):
    target = models[0]
    report = mode_agreement(target, "static", tokens=(1, 4), ctx_len=12, seed=0)
    assert report.ok and report.max_abs < 1e-9 and len(report.points) == 2
    broken = mode_agreement(target, "static", tokens=(1,), ctx_len=12, seed=0, atol=-1.0)
    assert not broken.ok


def test_latency_rows_say_their_mode_and_old_files_read_as_eager(tmp_path):
    import pandas as pd

    from traces import schema, timing
    out = tmp_path / "lat.parquet"
    assert timing.main(["--model", "tiny", "--tokens", "1,3", "--ctx", "0,5", "--batch", "1", "--warmup", "1",
                        "--repeats", "2", "--min-repeats", "1", "--quiet", "--out", str(out), "--device", "cpu",
                        "--threads", "1", "--mode", "graph", "--router", "4:4"]) == 0
    frame, _ = schema.read_trace(out, "latency")
    assert set(frame[frame.role == "target"]["mode"]) == {"graph"} and set(frame[frame.role != "target"]["mode"]) == {"eager"}
    old = frame.drop(columns=["mode"])
    assert set(schema.validate(old, "latency")["mode"]) == {"eager"}
    with pytest.raises(InputError, match="column 'mode' must be one of eager, static, graph, got 'fast'"):
        schema.validate(old.assign(mode="fast"), "latency")
    steps = pd.DataFrame([{"run_id": "r", "method": "ar", "config": "{}", "prompt_id": "p", "step": 0, "ctx_len": 3,
                           "draft_forwards": 0, "draft_s": 0.0, "verify_tokens": 1, "verify_s": 0.1,
                           "overhead_s": 0.0, "accepted": 1, "accept_mask": [], "confidences": []}])
    assert list(schema.validate(steps, "step")["mode"]) == ["eager"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graph capture needs a GPU")
@pytest.mark.parametrize("name", methods.names())
def test_captured_graphs_decode_as_eager_on_cuda(name):
    target = tiny_model(0, num_layers=3).to("cuda")
    models = (target, truncated(target, 1))
    eager = _decoder(name, models, "eager").generate(PROMPT, NEW)
    decoder = _decoder(name, models, "graph")
    assert decoder.runner.capture
    for _ in range(2):   # captured on the first prompt, replayed on both
        assert decoder.generate(PROMPT, NEW).tokens == eager.tokens, name
    assert decoder.runner.replays > 0 and all(e.graph is not None for e in decoder.runner.entries.values())
