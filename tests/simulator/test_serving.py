"""Serving simulator: Little's law, memory (preemption, OOM, GLIDE Table 4 shapes), arrivals, bad input."""
import re

import numpy as np
import pandas as pd
import pytest

from simulator import Cluster, Parallelism, Workload, simulate_serving
from simulator.memory import replica_memory, static_batch_fits
from simulator.methods import build_step_model, load_profile
from simulator.workload import check_load, make_requests, read_trace, realised_rate
from tests.simulator.fixtures import LINEAR, profile_dict, roofline_profile
from common.errors import InputError
from costmodel.params import arch_dict


def _serve(method="sd", config=None, workload=None, cluster=None, seed=0, **kw):
    return simulate_serving(profile_dict(), method, {"gamma": 4} if config is None else config, workload or Workload(rate=20, duration_s=20),
                            cluster or Cluster(replicas=2, max_batch=16), seed, latencies=LINEAR, **kw)


@pytest.mark.parametrize("method,config", [("ar", {}), ("sd", {"gamma": 4}), ("mcsd", {"k": "4x2x1"}),
                                           ("lookahead", {"W": 4, "N": 4, "G": 4}), ("kangaroo", {"gamma": 5})])
def test_littles_law_holds(method, config):
    res = _serve(method, config, Workload(rate=30, duration_s=30, prompt_len="uniform:32:256",
                                          output_len="lognormal:100:0.5:400"))
    s = res.summary
    assert s["completed"] == s["requests"]
    # L integrated by the simulator over time; lambda * W from the per-request records
    assert s["little_L"] == pytest.approx(s["little_lambda_W"], rel=1e-6)
    lam = s["requests"] / s["duration_s"]
    assert s["little_L"] == pytest.approx(lam * res.requests["e2e_s"].mean(), rel=0.05)


def test_little_integral_is_independent_of_records():
    res = _serve(workload=Workload(rate=25, duration_s=10))
    # a broken departure time (shift every finish) must break the agreement
    shifted = (res.requests["e2e_s"] + 0.5).sum() / np.nanmax(res.requests["finish_s"])
    assert abs(res.summary["little_L"] - shifted) > 0.1


def test_every_request_gets_ttft_before_finish_and_all_tokens():
    res = _serve(workload=Workload(rate=10, duration_s=10, output_len="uniform:2:50"))
    r = res.requests
    assert (r["status"] == "done").all()
    assert (r["generated"] == r["output_len"]).all()
    assert (r["first_token_s"] >= r["arrival_s"]).all() and (r["finish_s"] >= r["first_token_s"]).all()


def test_speculative_decoding_lowers_tpot_at_light_load():
    wl = Workload(rate=2, duration_s=30, output_len="fixed:200")
    ar = _serve("ar", {}, wl).summary
    sd = _serve("sd", {"gamma": 4}, wl).summary
    assert sd["tpot_s_mean"] < 0.7 * ar["tpot_s_mean"]


def test_memory_pressure_preempts_and_still_completes():
    cluster = Cluster(replicas=1, max_batch=64, gpu_mem_gb=16.0, reserve_fraction=0.0)
    # admission is optimistic (prompt + one step); two 1500-token prompts growing by 1000 each
    # outgrow the ~4,500 KV tokens left beside the weights
    res = _serve(workload=Workload(rate=40, n_requests=8, prompt_len="fixed:1500", output_len="fixed:1000"),
                 cluster=cluster)
    s = res.summary
    assert s["kv_capacity_tokens"] < 5_000
    assert s["preemptions"] > 0 and s["completed"] == s["requests"]


def test_request_larger_than_memory_fails_as_oom():
    cluster = Cluster(replicas=1, max_batch=8, gpu_mem_gb=15.0, reserve_fraction=0.0)
    res = _serve(workload=Workload(rate=1, n_requests=3, prompt_len="fixed:4000", output_len="fixed:10"),
                 cluster=cluster)
    assert (res.requests["status"] == "oom").all()


def test_glide_table4_oom_pattern_for_its_shapes():
    """GLIDE Table 4 (H800 80 GB, fp16, duplicated prompts): OOM at batch 32 for 7B, at 16 for 13B
    with GLIDE but not alone, at 4 for 33B. Long prompts (the paper gives no lengths): 2048 + 1950
    generated tokens, GLIDE's own one-layer KV cache counted beside the target's."""
    rows = {}
    for size in ("7b", "13b", "33b"):
        name = f"vicuna-{size}"
        prof = {"schema_version": 2, "name": name, "hardware": "H800", "dtype": "fp16", "target": name,
                "models": {name: arch_dict(name)},
                "latency": {name: {"kind": "table", "params": {"n_tokens": [1], "ctx_len": [0], "batch": [1],
                                                               "seconds": [[[0.02]]]}}},     # memory only
                "drafters": {"glide": {"kind": "glide", "model": "glide"}},
                "acceptance": {"glide": {"alpha": 0.8, "temperature": 0.0}}}
        from costmodel.params import drafter_arch
        prof["models"]["glide"] = drafter_arch("glide", name)
        profile = load_profile(prof)
        for method, config in (("ar", {}), ("glide", {"gamma": 5})):
            step = build_step_model(profile, method, config)
            mem = replica_memory(profile, step, reserve_fraction=0.0)
            rows[(size, method)] = [b for b in (1, 2, 4, 8, 16, 32)
                                    if not static_batch_fits(mem, b, 2048, 1950, step)]
    first_oom = {k: (v[0] if v else None) for k, v in rows.items()}
    assert first_oom == {("7b", "ar"): 32, ("7b", "glide"): 32, ("13b", "ar"): 32, ("13b", "glide"): 16,
                         ("33b", "ar"): 4, ("33b", "glide"): 4}


def test_tensor_parallel_speeds_up_and_adds_memory():
    wl = Workload(rate=5, duration_s=20, output_len="fixed:128")
    prof = roofline_profile()
    one = simulate_serving(prof, "sd", {"gamma": 4}, wl, Cluster(max_batch=16), 0).summary
    two = simulate_serving(prof, "sd", {"gamma": 4}, wl, Cluster(max_batch=16, parallel=Parallelism(tp=2)), 0).summary
    assert two["tpot_s_mean"] < one["tpot_s_mean"]
    assert two["kv_capacity_tokens"] > 2 * one["kv_capacity_tokens"]


def test_tensor_parallelism_must_divide_the_heads():
    prof = roofline_profile()
    arch = load_profile(prof).arch()
    assert arch.n_heads % 3                          # vicuna-7b: 32 heads
    with pytest.raises(InputError, match=rf"^tensor parallelism 3 does not divide the attention heads of "
                                         rf"\S+ \({arch.n_heads} query heads, {arch.n_kv_heads} KV heads\)$"):
        simulate_serving(prof, "ar", {}, Workload(rate=1, duration_s=2), Cluster(parallel=Parallelism(tp=3)), 0)


def test_pipeline_parallel_and_lookahead_parallel_run():
    pp = _serve(cluster=Cluster(replicas=1, max_batch=8, parallel=Parallelism(pp=2)))
    assert pp.summary["completed"] == pp.summary["requests"]
    wl = Workload(rate=2, duration_s=10)
    la1 = _serve("lookahead", {"W": 8, "N": 5, "G": 8}, wl, Cluster(replicas=1)).summary
    la4 = _serve("lookahead", {"W": 8, "N": 5, "G": 8}, wl, Cluster(replicas=1, parallel=Parallelism(lp=4))).summary
    assert la4["tpot_s_mean"] < la1["tpot_s_mean"]


def test_draft_on_own_gpu_frees_target_memory():
    profile = load_profile(profile_dict())
    step = build_step_model(profile, "sd", {"gamma": 4})
    shared = replica_memory(profile, step, Parallelism())
    own = replica_memory(profile, step, Parallelism(draft_on_own_gpu=True))
    assert own.capacity_tokens > shared.capacity_tokens


def test_gamma_arrivals_are_burstier_than_poisson():
    def cv(arrival, **kw):
        t = make_requests(Workload(rate=50, duration_s=200, arrival=arrival, **kw), 1)["arrival_s"].to_numpy()
        gaps = np.diff(t)
        return gaps.std() / gaps.mean(), 1 / gaps.mean()
    cv_p, rate_p = cv("poisson")
    cv_g, rate_g = cv("gamma", cv=3.0)
    assert abs(cv_p - 1) < 0.1 and abs(cv_g - 3) < 0.5
    assert rate_p == pytest.approx(50, rel=0.1) and rate_g == pytest.approx(50, rel=0.25)


def test_fixed_arrivals_are_evenly_spaced_at_the_rate():
    reqs = make_requests(Workload(rate=4, duration_s=10, arrival="fixed"), 0)
    assert np.diff(reqs["arrival_s"].to_numpy()) == pytest.approx(np.full(len(reqs) - 1, 0.25))
    assert len(reqs) == 39 and realised_rate(reqs) == pytest.approx(4)
    assert Workload(rate=4, arrival="fixed").describe().startswith("Fixed-rate (evenly spaced) arrivals")


@pytest.mark.parametrize("method,config", [("ar", {}), ("sd", {"gamma": 4})])
def test_itl_is_the_gap_between_output_chunks(method, config):
    """A chunk is the first token or what one step accepts: a request's ITLs add up to its time from
    first token to finish, one fewer than its chunks; plain decoding emits a token a chunk (ITL mean
    = token-weighted TPOT), speculation several (ITL above TPOT)."""
    res = _serve(method, config, Workload(rate=10, duration_s=10, output_len="uniform:20:80"))
    r, s = res.requests, res.summary
    gaps = int((r["chunks"] - 1).sum())
    assert s["itl_s_mean"] * gaps == pytest.approx((r["finish_s"] - r["first_token_s"]).sum(), rel=1e-9)
    assert (r["chunks"] <= r["generated"]).all() and s["peak_batch"] <= 16
    per_token = (r["finish_s"] - r["first_token_s"]).sum() / (r["generated"] - 1).sum()
    if method == "ar":
        assert (r["chunks"] == r["generated"]).all() and s["itl_s_mean"] == pytest.approx(per_token, rel=1e-9)
    else:
        assert s["itl_s_mean"] > 1.5 * per_token and s["itl_s_p50"] > s["tpot_s_p50"]


def test_replayed_timestamps(tmp_path):
    path = tmp_path / "arrivals.csv"
    pd.DataFrame({"arrival_s": [0.0, 0.5, 0.5, 2.0], "prompt_len": [10, 20, 30, 40],
                  "output_len": [5, 6, 7, 8]}).to_csv(path, index=False)
    res = _serve(workload=Workload(arrival="trace", trace=path))
    assert list(res.requests["arrival_s"]) == [0.0, 0.5, 0.5, 2.0]
    assert list(res.requests["generated"]) == [5, 6, 7, 8]


@pytest.mark.parametrize("make,match", [
    (lambda: Workload(rate=0), "rate must be > 0"),
    (lambda: Workload(rate=-3), "rate must be > 0"),
    (lambda: Cluster(max_batch=0), "batch limit must be >= 1"),
    (lambda: Cluster(replicas=0), "replicas"),
    (lambda: Workload(arrival="gamma", cv=0), "cv > 0"),
    (lambda: Parallelism(tp=0), "tp must be >= 1"),
    (lambda: make_requests(Workload(prompt_len="zipf:3")), "prompt length distribution"),
    (lambda: Workload(acceptance_spread=-0.1), "acceptance_spread must be a finite number >= 0"),
])
def test_bad_input_one_line(make, match):
    with pytest.raises(InputError, match=match) as info:
        make()
    assert "\n" not in str(info.value)


def test_trace_with_missing_columns(tmp_path):
    path = tmp_path / "bad.csv"
    pd.DataFrame({"time": [0.0, 1.0]}).to_csv(path, index=False)
    with pytest.raises(InputError, match="missing column"):
        make_requests(Workload(arrival="trace", trace=path))


@pytest.mark.parametrize("method,config", [("sd", {"gamma": 4}), ("ar", {})])
def test_lookahead_parallel_needs_branches_to_spread(method, config):
    with pytest.raises(InputError, match="lp > 1") as info:
        _serve(method, config, Workload(rate=1, n_requests=2), Cluster(replicas=1, parallel=Parallelism(lp=2)))
    assert "\n" not in str(info.value)


def test_a_trace_served_at_a_rate_keeps_its_shape_and_takes_the_rate(tmp_path):
    """A 2 req/s trace (a burst of three, then a lull) asked for at 20 req/s: its gaps scaled by a
    tenth, copies back to back one mean gap apart, its lengths with their rows; without a rate it is
    replayed as recorded. Replayed as recorded at every rate, a load search saw every rate pass."""
    path = tmp_path / "arrivals.csv"
    pd.DataFrame({"arrival_s": [0.0, 0.1, 0.2, 1.5], "output_len": [5, 6, 7, 8]}).to_csv(path, index=False)
    reqs = make_requests(Workload(rate=20, duration_s=1.0, arrival="trace", trace=path))
    assert reqs["arrival_s"].to_numpy()[:8] == pytest.approx([0, 0.01, 0.02, 0.15, 0.2, 0.21, 0.22, 0.35])
    assert reqs["arrival_s"].max() < 1.0 and realised_rate(reqs) == pytest.approx(20, rel=0.1)
    assert list(reqs["output_len"][:8]) == [5, 6, 7, 8, 5, 6, 7, 8]
    fast = make_requests(Workload(rate=2000, duration_s=1.0, arrival="trace", trace=path))
    assert realised_rate(fast) == pytest.approx(2000, rel=0.01)
    recorded = make_requests(Workload(arrival="trace", trace=path))
    assert list(recorded["arrival_s"]) == [0.0, 0.1, 0.2, 1.5]
    assert "its gaps scaled to each rate tried" in Workload(rate=20, arrival="trace", trace=path).describe(
        "each rate tried") and "output lognormal" not in Workload(rate=20, arrival="trace", trace=path).describe()


@pytest.mark.parametrize("text, message", [
    ("", "arrival trace {path}: empty file (expected a CSV with a header line naming arrival_s)"),
    ("arrival_s\n", "{path}: no requests (a header and no rows)"),
    ("arrival_s\n0\n1\n2\n0.5\n1.5\n", "{path}: row 4 (line 5): arrival_s 0.5 comes before the previous row's 2: "
                                       "timestamps must not go backwards"),
    ("arrival_s,output_len\n0,5\n1,7.5\n", "{path}: row 2 (line 3): output_len is 7.5, not a whole number of tokens"),
    ("arrival_s\n0\nsoon\n", "{path}: row 2 (line 3): arrival_s is 'soon', not a number of seconds >= 0"),
    ("time\n0\n", "{path}: missing column(s) arrival_s (has: time)"),
])
def test_a_trace_is_checked_row_by_row_never_sorted_or_guessed(tmp_path, text, message):
    path = tmp_path / "arrivals.csv"
    path.write_text(text)
    with pytest.raises(InputError, match=re.escape(message.format(path=path))):
        Workload(rate=5, arrival="trace", trace=path)


def test_a_load_too_large_to_simulate_is_refused_before_any_request_is_drawn():
    check_load([Workload(rate=10, duration_s=60)])
    with pytest.raises(InputError, match=r"the simulated load: ~6e\+07 requests, ~[\d.e+]+ output tokens would "
                                         r"take ~.* of CPU to simulate, beyond --max-hours 6; lower the rate"):
        check_load([Workload(rate=1e6, duration_s=60, output_len="fixed:128")])
    with pytest.raises(InputError, match=r"would need ~[\d.e+]+ GB of memory, more than the memory available"):
        check_load([Workload(rate=1e12, duration_s=60)], max_hours=1e12)


def test_a_trace_too_large_to_read_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / "big.csv"
    path.write_text("arrival_s\n" + "".join(f"{i}\n" for i in range(100_000)))
    with pytest.raises(InputError, match=rf"arrival trace {re.escape(str(path))} \(\d+ kB, ~[\d,]+ rows\) would need ~\d+ MB "
                                         r"of memory, more than the limit of 1 MB; give a shorter trace"):
        read_trace(path, limit=1e6)
    assert len(read_trace(path).arrival_s) == 100_000
