"""Capacity planning: SLO checks, the max-load search, GPU counts and one-line errors."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

import pytest

from experiments import capacity as capacity_cli
from capacity import plan as capacity
from capacity import report as capacity_report
from simulator.workload import read_trace
from sweep.executor import LocalExecutor
from tests.experiments.test_sweep import toy_profile

SD = {"gamma": 4, "drafter": "llama-68m", "acceptance": "llama-68m"}


def test_slo_violation_ratio():
    slo = capacity.Slo(tpot_p99=0.02, ttft_p99=1.0)
    ok = {"tpot_s_p99": 0.01, "ttft_s_p99": 0.5, "oom": 0, "completed": 5}
    assert slo.violation(ok) == pytest.approx(0.5)
    assert slo.violation({**ok, "tpot_s_p99": 0.03}) == pytest.approx(1.5)
    assert slo.violation({**ok, "oom": 1}) == math.inf
    assert "tpot p99 <= 20 ms" in slo.describe()


def test_max_load_search_brackets_the_slo():
    profile = toy_profile().to_dict()
    load = capacity.LoadSpec(prompt_len="fixed:128", output_len="fixed:64", duration_s=8.0, max_batch=16)
    slo = capacity.Slo(tpot_p99=0.05)
    out = capacity.max_load_task(capacity.LoadTask(profile, "sd", "sd", SD, load, slo, seed=1, start_rate=2.0,
                                                   bisections=3))
    assert out["max_rate"] > 0 and out["violation"] <= 1.0
    above = capacity.run_task(capacity.RunTask(profile, "sd", "sd", SD, load, 4 * out["max_rate"], seed=1))
    assert not capacity._passes(slo, above)           # four times the found rate breaks the SLO


def test_plan_and_report(tmp_path):
    opts = capacity.CapacityOptions(methods=["sd"], target_rate=6.0, slo=capacity.Slo(tpot_p99=0.05),
                                    load=capacity.LoadSpec(prompt_len="fixed:128", output_len="fixed:64",
                                                           duration_s=6.0, max_batch=16), batches=(1, 8))
    result = capacity.plan(toy_profile(), opts, LocalExecutor(workers=1, progress=False))
    best = result["best"].set_index("method")
    assert set(best.index) == {"ar", "sd"}
    assert best.loc["sd", "max_rate"] > best.loc["ar", "max_rate"] > 0
    assert best.loc["sd", "gpus"] <= best.loc["ar", "gpus"]
    path = capacity_report.write_report(result, opts, tmp_path, "python -m experiments.capacity ...")
    text = path.read_text()
    assert "![curves](curves.png)" in text and (tmp_path / "curves.png").exists()
    assert (tmp_path / "crossover" / "crossover.csv").exists()


def test_the_highest_rate_and_the_gpus_carry_the_profiles_heldout_error():
    best = pd.DataFrame({"max_rate": [10.0, 4.0], "tp": [1, 2]})
    got = capacity.with_rate_interval(best, 0.25, target_rate=21.0)
    assert got["max_rate_lo"].tolist() == pytest.approx([8.0, 3.2])
    assert got["max_rate_hi"].tolist() == pytest.approx([10 / 0.75, 4 / 0.75])
    assert got["gpus_lo"].tolist() == [2, 8] and got["gpus_hi"].tolist() == [3, 14]    # TP x replicas
    assert got["gpus_lo"].to_csv(index=False).split() == ["gpus_lo", "2", "8"]          # whole numbers in the CSVs
    assert capacity.replicas_at(21.0, [0.0, 7.0]).tolist() == [pd.NA, 3]               # none where nothing is served
    assert capacity.with_rate_interval(best, None, 21.0)["max_rate_lo"].isna().all()


def test_unmeetable_slo_says_so_and_shows_the_closest(tmp_path, capsys):
    path = toy_profile().save(tmp_path / "toy.json")
    code = capacity_cli.main(["--profile", str(path), "--methods", "sd", "--slo-tpot-p50", "0.01", "--duration", "4",
                          "--out", str(tmp_path / "o"), "--workers", "1", "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("error: no configuration meets the SLO") and "closest:" in err
    assert "\n" not in err


@pytest.mark.parametrize("args,message", [
    (["--hardware", "TPUv9"], "unknown hardware 'TPUv9' (known: V100"),
    (["--methods", "medusa"], "unknown method 'medusa'"),
    (["--profile", "/nonexistent.json"], "profile file not found"),
    (["--slo-tpot-p99", "-3"], "--slo-tpot-p99 must be > 0"),
])
def test_bad_input_one_line(args, message, capsys):
    assert capacity_cli.main(args + ["--out", "/tmp/never"]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


def test_curves_name_each_configuration_once_and_draw_every_slo(tmp_path, monkeypatch):
    figures = []
    monkeypatch.setattr(capacity_report.atomic, "save_figure", lambda path, fig: figures.append(fig) or path)
    curves = pd.DataFrame([{"label": label, "rate": r, "throughput_tok_s": 100.0 * r, "tpot_s_p50": 0.01 + 0.001 * r,
                            "tpot_s_p99": 0.015 + 0.001 * r, "ttft_s_p99": 0.05 * r}
                           for label in ("glide g4 (drafter glide)", "no speculation") for r in (1, 2, 4)])
    opts = capacity.CapacityOptions()
    capacity_report.curves_plot(curves, opts, "toy", tmp_path / "curves.png")
    fig = figures[0]
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["glide g4 (drafter glide)", "no speculation"]
    slo = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert slo == ["SLO 20 ms", "SLO 30 ms", "SLO 1000 ms"]
    for ax, limit in zip(fig.axes, (20, 30, 1000)):
        low, high = ax.get_ylim()
        assert low < limit < high                    # the limit is in view, not off the axes



def test_curves_shade_each_throughput_over_the_profiles_interval(tmp_path, monkeypatch):
    """With a held-out error each curve's throughput is shaded over [x / (1 + e), x / (1 - e)] (the
    deployment table's interval) and the title says so; without one nothing is shaded."""
    figures = []
    monkeypatch.setattr(capacity_report.atomic, "save_figure", lambda path, fig: figures.append(fig) or path)
    curves = pd.DataFrame([{"label": "no speculation", "rate": r, "throughput_tok_s": 100.0 * r, "tpot_s_p50": 0.01,
                            "tpot_s_p99": 0.02, "ttft_s_p99": 0.1} for r in (1, 2, 4)])
    capacity_report.curves_plot(curves, capacity.CapacityOptions(), "toy", tmp_path / "a.png", error=0.25)
    capacity_report.curves_plot(curves, capacity.CapacityOptions(), "toy", tmp_path / "b.png")
    shaded, plain = figures
    band = shaded.axes[0].collections[0].get_paths()[0].vertices
    assert band[:, 0].min() == pytest.approx(100.0 / 1.25) and band[:, 0].max() == pytest.approx(400.0 / 0.75)
    assert "held-out error 25%" in shaded.texts[0].get_text()
    assert not plain.axes[0].collections and "shaded" not in plain.texts[0].get_text()

def test_a_trace_load_is_searched_at_its_shape_not_its_recorded_rate(tmp_path):
    """One shape recorded at 2 and at 300 req/s plans alike, near what Poisson arrivals give: replayed
    as recorded at every rate tried, the slow trace passed every rate and the fast one none; the
    report's header names the trace and where the lengths come from."""
    gaps = np.random.default_rng(0).exponential(1.0, 400)
    found = {}
    for name, mean_gap in (("slow", 0.5), ("fast", 1 / 300)):
        path = tmp_path / f"{name}.csv"
        pd.DataFrame({"arrival_s": np.cumsum(gaps * mean_gap)}).to_csv(path, index=False)
        load = capacity.LoadSpec(prompt_len="fixed:128", output_len="fixed:64", arrival="trace",
                                 trace=read_trace(path), duration_s=6.0, max_batch=16)
        opts = capacity.CapacityOptions(methods=["sd"], target_rate=6.0, slo=capacity.Slo(tpot_p99=0.05), load=load,
                                        batches=(1,))
        found[name] = capacity.plan(toy_profile(), opts, LocalExecutor(workers=1, progress=False))["best"]
        header = load.workload(6.0).describe("each rate tried")
        assert header.startswith(f"arrivals of {path}: 400 requests over") and "gaps scaled to each rate tried" in header
        assert "prompt fixed:128, output fixed:64 tokens" in header
    slow, fast = (found[k].set_index("method")["max_rate"] for k in ("slow", "fast"))
    assert slow.to_dict() == pytest.approx(fast.to_dict(), rel=1e-6) and 0 < slow["ar"] < slow["sd"] < 100
