"""costmodel.latency and calibrate.latency: the roofline, its fit from LatencyTraces, the table kind."""
import pickle

import numpy as np
import pytest

from calibrate.latency import fit_latency
from profiles.latency import PastMeasuredBatch, RooflineLatency, TableLatency, latency_model as latency_model_from_dict
from calibrate.synthetic import synthetic_latency_trace
from costmodel.hardware import get_hardware
from costmodel.latency import ForwardShape, forward_bytes_flops, kv_capacity_tokens, ridge_tokens, roofline_seconds
from costmodel.params import arch_dict, forward_params, get_arch
from common.errors import InputError

A100 = get_hardware("A100-80G")


def test_decode_is_memory_bound_and_large_forward_compute_bound():
    shape = ForwardShape.of("vicuna-7b", "fp16")
    one = roofline_seconds(shape, A100, "fp16", 1, 0)
    assert one == pytest.approx(shape.weight_bytes / A100.bandwidth, rel=1e-3)
    big = roofline_seconds(shape, A100, "fp16", 1024, 0)
    flops = 2 * 1024 * forward_params(get_arch("vicuna-7b"))
    assert big == pytest.approx(flops / A100.peak("fp16"), rel=0.05)  # attention adds ~4 per cent
    assert 100 < ridge_tokens(shape, A100, "fp16") < 200


def test_broadcasting_and_monotonicity():
    shape = ForwardShape.of("mistral-7b", "bf16")
    t = roofline_seconds(shape, "H100", "bf16", np.array([1, 8, 64])[:, None, None],
                         np.array([0, 1024, 4096])[None, :, None], np.array([1, 8])[None, None, :])
    assert t.shape == (3, 3, 2)
    assert np.all(np.diff(t, axis=0) >= 0) and np.all(np.diff(t, axis=1) >= 0) and np.all(np.diff(t, axis=2) >= 0)


def test_sliding_window_caps_kv_reads():
    shape = ForwardShape.of("mistral-7b", "fp16")
    a, _ = forward_bytes_flops(shape, 1, 4096, 8)
    b, _ = forward_bytes_flops(shape, 1, 32768, 8)
    assert a == b


def test_kv_capacity():
    tokens = kv_capacity_tokens("vicuna-7b", "A100-80G", "fp16", reserve_fraction=0.0)
    assert tokens == pytest.approx((80e9 - 6.738e9 * 2) / (2 * 32 * 4096 * 2), rel=1e-3)


def test_bad_roofline_arguments():
    shape = ForwardShape.of("vicuna-7b", "fp16")
    with pytest.raises(ValueError, match="n_tokens and batch must be >= 1"):
        roofline_seconds(shape, A100, "fp16", 0, 0)
    with pytest.raises(InputError, match="latency model 'x'.*bw_eff"):
        RooflineLatency(arch=arch_dict("vicuna-7b"), hardware="A100-80G", dtype="fp16", bw_eff=-1, name="x")


TRUTH = dict(bw_eff=0.72, flops_eff=0.55, overhead_s=0.004)


def _truth():
    return RooflineLatency(arch=arch_dict("vicuna-7b"), hardware="A100-80G", dtype="fp16", **TRUTH)


@pytest.mark.parametrize("noise", [0.0, 0.01])
def test_roofline_fit_recovers_known_parameters(noise):
    frame, _ = synthetic_latency_trace(_truth(), noise=noise, seed=3, hardware="A100-80G")
    model = fit_latency(frame, "roofline", arch=arch_dict("vicuna-7b"), hardware="A100-80G", dtype="fp16")
    for key, value in TRUTH.items():  # 1% noise on 300 points: efficiencies within 1%, overhead 3%
        tolerance = 1e-6 if noise == 0 else (0.03 if key == "overhead_s" else 0.01)
        assert getattr(model, key) == pytest.approx(value, rel=tolerance), key
    assert model.fit["n_heldout"] > 20
    assert model.fit["mape_heldout"] < 2.0
    assert model.fit["mape_train"] < 2.0


def test_roofline_round_trip_through_dict():
    model = _truth()
    again = latency_model_from_dict(model.to_dict(), "vicuna-7b")
    grid = (np.array([1, 5, 300]), np.array([0, 77, 3000]), 4)
    assert np.allclose(again.predict(*grid), model.predict(*grid))
    assert set(model.bound([1, 4096], 0)) == {"memory", "compute"}


def test_table_kind_exact_on_grid_and_interpolates():
    frame, _ = synthetic_latency_trace(_truth(), seed=0)
    table = fit_latency(frame, "table")
    assert isinstance(table, TableLatency)
    assert table.fit["mape_train"] < 1e-9
    assert table.fit["mape_heldout"] < 5.0
    t = latency_model_from_dict(table.to_dict(), "t")
    mid = t.predict(3, 192, 3)
    lo, hi = t.predict(2, 128, 2), t.predict(4, 256, 4)
    assert lo < mid < hi


def test_a_table_extrapolating_towards_free_forwards_is_refused_where_asked():
    """A drafter measured at contexts 512 and 1024 whose cost quadruples between them extrapolates
    to a quarter of its cheapest forward at context 0: refused, naming the point and the axis it
    left; inside the grid, and mild extrapolation, are served as before."""
    table = TableLatency(n_tokens=(1.0,), ctx_len=(512.0, 1024.0), batch=(1.0,),
                         seconds=np.array([[[0.010], [0.040]]]), name="drafter")
    assert table.predict(1, 768) == pytest.approx(0.020) and table.predict(1, 2048) == pytest.approx(0.64)
    assert table.predict(1, 300) > 0.005
    with pytest.raises(InputError, match=r"latency model 'drafter' \(a measured table\) predicts 0.0025 s at "
                                         r"n_tokens 1, ctx_len 0, batch 1, below 0.5 x its cheapest measured forward "
                                         r"\(0.01 s\): its extrapolation past ctx_len 0 \(measured 512-1024\)"):
        table.predict(1, [768, 0])


def test_a_table_prices_no_batch_past_the_ones_it_measured():
    """Measured at batch 1 and 2: batch 2 is served, batch 3 refused as PastMeasuredBatch (an InputError) naming
    the model and the batches it measured; a roofline prices any batch."""
    table = TableLatency(n_tokens=(1.0,), ctx_len=(0.0,), batch=(1.0, 2.0), seconds=np.array([[[0.010, 0.012]]]),
                         name="target")
    assert table.max_batch == 2 and table.predict(1, 0, 2) == pytest.approx(0.012)
    with pytest.raises(PastMeasuredBatch, match=r"latency model 'target' \(a measured table\) was measured at batch "
                                                r"1-2; batch 3 lies past it and a batch is not extrapolated"):
        table.predict(1, 0, [1, 3])
    assert issubclass(PastMeasuredBatch, InputError)
    try:
        table.predict(1, 0, 4)
    except PastMeasuredBatch as exc:
        back = pickle.loads(pickle.dumps(exc))        # from a worker process, as the sweep's executor returns it
        assert str(back) == str(exc) and back.short == "latency model 'target' measured at batch 1-2 only"
        assert str(type(exc)(*exc.args)) == str(exc)   # simpy's event loop raises it again from its args
    assert RooflineLatency(arch_dict("vicuna-7b"), "H100", "fp16").max_batch == np.inf


def test_table_needs_full_grid_and_kinds_are_checked():
    frame, _ = synthetic_latency_trace(_truth(), seed=0)
    with pytest.raises(InputError, match="missing point"):
        fit_latency(frame.iloc[1:], "table")
    with pytest.raises(InputError, match="kind 'magic'"):
        latency_model_from_dict({"kind": "magic", "params": {}}, "m")
    with pytest.raises(InputError, match="missing parameter 'arch'"):
        latency_model_from_dict({"kind": "roofline", "params": {"hardware": "H100", "dtype": "fp16"}}, "m")
    with pytest.raises(InputError, match="unknown hardware"):
        latency_model_from_dict({"kind": "roofline", "params": {"hardware": "TPU", "dtype": "fp16",
                                                                 "arch": arch_dict("vicuna-7b")}}, "m")


def test_launch_floor_makes_a_small_model_launch_bound_and_round_trips():
    """seconds = max(device time, launch time) + overhead: a 2-layer drafter waits on the host, a 33B
    target on its bandwidth; the floor is kept through the Profile form and left out when zero."""
    small = RooflineLatency(arch_dict("llama-68m"), "A6000", "fp16", bw_eff=0.8, launch_s=3e-3, overhead_s=1e-4)
    big = RooflineLatency(arch_dict("llama-33b"), "A6000", "fp16", bw_eff=0.8, launch_s=3e-3, overhead_s=1e-4)
    assert float(small.predict(1, 0)) == pytest.approx(3e-3 + 1e-4)
    assert set(small.bound([1, 4], 0)) == {"launch"} and set(big.bound([1], 0)) == {"memory"}
    device = ForwardShape.of("llama-33b", "fp16").weight_bytes / (get_hardware("A6000").bandwidth * 0.8)
    assert float(big.predict(1, 0)) == pytest.approx(device + 1e-4, rel=1e-3)
    again = latency_model_from_dict(small.to_dict(), "d")
    assert again.launch_s == 3e-3 and float(again.predict(1, 0)) == float(small.predict(1, 0))
    assert "launch_s" not in RooflineLatency(arch_dict("llama-68m"), "A6000", "fp16").to_dict()["params"]
    with pytest.raises(InputError, match="launch_s must be a number of seconds >= 0"):
        RooflineLatency(arch_dict("llama-68m"), "A6000", "fp16", launch_s=-1.0)
