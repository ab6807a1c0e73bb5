"""Capacity planning's deployments: tensor parallelism, the batch cap, GPUs and cost per million
output tokens with and without speculation, latency as `vllm bench serve` reports it, bad input."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from capacity import deploy
from common.bundled import bundled
from capacity import plan as capacity
from capacity import report as capacity_report
from experiments import capacity as capacity_cli
from profiles.profile import Profile
from simulator.memory import memory_of
from sweep.executor import LocalExecutor
from tests.experiments.test_sweep import toy_profile

BIG = capacity.DEFAULT_PROFILE.with_name("glide-vicuna-33b-h800.json")     # 65 GB of weights


@pytest.mark.parametrize("args,message", [
    (["--gpu-hour-price", "0"], "--gpu-hour-price must be > 0 USD per GPU-hour, got 0.0"),
    (["--gpu-hour-price", "-1"], "--gpu-hour-price must be > 0 USD per GPU-hour, got -1.0"),
    (["--gpu-hour-price", "nan"], "--gpu-hour-price must be > 0 USD per GPU-hour, got nan"),
    (["--tp", "3"], "--tp 3 does not divide the attention heads of vicuna-7b (32 query heads, 32 KV heads)"),
    (["--tp", "1,3"], "--tp 3 does not divide the attention heads of vicuna-7b (32 query heads, 32 KV heads)"),
    (["--tp", "0"], "--tp must be whole numbers >= 1, got 0"),
    (["--max-batch", "0"], "--max-batch must be a finite number > 0, got 0"),
])
def test_bad_input_one_line_exit_2_nothing_written(tmp_path, capsys, args, message):
    out = tmp_path / "out"
    assert capacity_cli.main(args + ["--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: {message}"
    assert not out.exists()


def test_the_batch_cap_is_what_fits_in_kv_memory_unless_given():
    profile = toy_profile()
    load = capacity.LoadSpec(prompt_len="fixed:1000", output_len="fixed:200")
    cap, source = deploy.batch_cap(profile, "ar", {}, load, 1, 0)
    kv = memory_of(profile, None).capacity_tokens
    assert source == deploy.KV_CAP and cap * 1201 <= kv < (cap + 1) * 1201
    two, _ = deploy.batch_cap(profile, "ar", {}, load, 2, 0)
    assert two > 2 * cap                                    # two GPUs: the weights split, the cache more than doubles
    assert deploy.batch_cap(profile, "ar", {}, capacity.LoadSpec(max_batch=32), 1, 0) == (32, deploy.GIVEN_CAP)


def test_the_batch_cap_stops_at_the_batches_the_latency_tables_measured():
    """SmolLM2's CPU Profile measured its target at batch 1-2 and GLIDE's drafter at batch 1: plain decoding is
    capped at 2, GLIDE at 1, given or not; a Profile measured at 1-32 keeps the cap given."""
    cpu = Profile.load(bundled("profiles", "smollm2-135m-cpu.json"))
    for load in (capacity.LoadSpec(), capacity.LoadSpec(max_batch=32)):
        assert deploy.batch_cap(cpu, "ar", {}, load, 1, 0) == (2, deploy.MEASURED_CAP)
        assert deploy.batch_cap(cpu, "glide", {"gamma": 2}, load, 1, 0) == (1, deploy.MEASURED_CAP)
    batch = Profile.load(bundled("profiles", "batch/smollm2-135m-cpu-batch-drafters.json"))
    assert deploy.batch_cap(batch, "ar", {}, capacity.LoadSpec(max_batch=16), 1, 0) == (16, deploy.GIVEN_CAP)


def test_cheapest_shape_is_the_fewest_gpus_then_the_smaller_tp():
    per_tp = pd.DataFrame({"method": ["sd"] * 3 + ["ar"] * 2 + ["glide"] * 2, "tp": [1, 2, 4, 1, 2, 1, 2],
                           "gpus": [4, 4, 8, np.nan, np.nan, 6, 4], "rate_per_gpu": [5.0, 4.0, 3.0, 1.0, 2.0, 4.0, 5.0]})
    best = deploy.cheapest(per_tp).set_index("method")
    assert best.loc["sd", "tp"] == 1 and best.loc["sd", "gpus"] == 4
    assert best.loc["glide", "tp"] == 2 and best.loc["glide", "gpus"] == 4
    assert best.loc["ar", "tp"] == 2 and math.isnan(best.loc["ar", "gpus"])   # none served: the best per GPU


def test_costs_with_and_without_speculation():
    best = pd.DataFrame({"method": ["sd", "ar"], "tp": [2, 1], "gpus": [2, 4], "max_rate": [12.0, 3.0]})
    out = deploy.add_costs(best, target_rate=10.0, mean_output=100.0, gpu_hour_price=3.6).set_index("method")
    # 10 req/s x 100 tokens = 1000 tok/s = 3.6 M tokens an hour: 1 USD per GPU per million
    assert out.loc["sd", "usd_per_m_tok"] == pytest.approx(2.0) and out.loc["ar", "usd_per_m_tok"] == pytest.approx(4.0)
    assert out.loc["sd", "saving"] == pytest.approx(0.5) and out.loc["ar", "saving"] == pytest.approx(0.0)
    assert out.loc["sd", "usd_per_m_tok_at_max"] == pytest.approx(2 * 3.6 / (1200 * 3600) * 1e6)


def test_plan_reports_cost_and_vllm_bench_latency(tmp_path):
    opts = capacity.CapacityOptions(methods=["sd"], target_rate=6.0, slo=capacity.Slo(tpot_p99=0.05),
                                    load=capacity.LoadSpec(prompt_len="fixed:128", output_len="fixed:64",
                                                           duration_s=6.0, arrival="fixed"),
                                    batches=(1,), gpu_hour_price=4.0)
    result = capacity.plan(toy_profile(), opts, LocalExecutor(workers=1, progress=False))
    best = result["best"].set_index("method")
    assert (best["cap_source"] == deploy.KV_CAP).all()
    assert best.loc["sd", "batch_cap"] == deploy.batch_cap(toy_profile(), "sd", best.loc["sd", "config"], opts.load, 1, 0)[0]
    for method in ("sd", "ar"):
        row = best.loc[method]
        assert row["gpus"] == row["replicas"] * row["tp"]
        assert row["usd_per_m_tok"] == pytest.approx(row["gpus"] * 4.0 / (6.0 * 64 * 3600) * 1e6)
        assert row["target_throughput_req_s"] > 0 and row["target_ttft_s_p99"] >= row["target_ttft_s_p50"]
    assert best.loc["sd", "saving"] == pytest.approx(1 - best.loc["sd", "gpus"] / best.loc["ar", "gpus"])
    assert best.loc["sd", "target_itl_s_mean"] > 1.5 * best.loc["sd", "target_tpot_s_mean"]   # several tokens a step
    text = capacity_report.write_report(result, opts, tmp_path, "python -m experiments.capacity ...").read_text()
    assert "Fixed-rate (evenly spaced) arrivals" in text and "4.00 USD per GPU-hour" in text
    assert "| method | request throughput (req/s) | output token throughput (tok/s) | TTFT mean / median / p99 (ms) |" in text
    assert "KV memory" in text and "own latency" not in text


def test_a_model_that_does_not_fit_one_gpu_is_planned_on_two(tmp_path):
    """Vicuna-33B (65 GB) on 48 GB A6000s: TP 1 does not fit, TP 2 does; the plan is on TP 2."""
    opts = capacity.CapacityOptions(methods=["sd"], hardware="A6000", target_rate=2.0, tp=(1, 2),
                                    slo=capacity.Slo(tpot_p99=0.2),
                                    load=capacity.LoadSpec(prompt_len="fixed:128", output_len="fixed:16", duration_s=10.0),
                                    batches=(1,))
    result = capacity.plan(Profile.load(BIG), opts, LocalExecutor(workers=1, progress=False))
    tried = result["all"]
    assert set(tried.loc[tried["tp"] == 1, "cap_source"]) == {"does not fit"}
    best = result["best"]
    assert list(best["tp"]) == [2, 2] and (best["gpus"] == 2 * best["replicas"]).all()
    single = capacity.CapacityOptions(**{**opts.__dict__, "tp": (1,)})
    with pytest.raises(capacity.InputError, match=r"^does not fit at --tp 1: weights 65\.\d GB"):
        capacity.plan(Profile.load(BIG), single, LocalExecutor(workers=1, progress=False))


def test_plain_decoding_that_never_meets_the_slo_is_named_and_still_the_crossover_baseline(tmp_path):
    """A TPOT p99 of 7 ms: speculation meets it, plain decoding (about 10 ms a token here) never does."""
    opts = capacity.CapacityOptions(methods=["sd"], target_rate=2.0, slo=capacity.Slo(tpot_p99=0.007),
                                    load=capacity.LoadSpec(prompt_len="fixed:128", output_len="fixed:64",
                                                           duration_s=6.0, max_batch=16), batches=(1,))
    result = capacity.plan(toy_profile(), opts, LocalExecutor(workers=1, progress=False))
    assert list(result["best"]["method"]) == ["sd"] and result["best"]["saving"].isna().all()
    assert "no speculation" in set(result["crossover"]["label"])
    text = capacity_report.write_report(result, opts, tmp_path, "python -m experiments.capacity ...").read_text()
    assert "ar: no rate met the SLO at any TP tried" in text and "--max-batch" in text
    reached = result["best"].assign(peak_batch=16)
    assert capacity_report.cap_note(reached).startswith("Batch cap reached at max load by sd (16, --max-batch)")
    assert capacity_report.cap_note(reached.assign(peak_batch=15)) == ""
