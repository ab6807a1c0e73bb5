"""The simulator's figures as a person reads them: one connected line per configuration across loads,
one colour per label in every panel, reference lines named, tick labels as plain numbers; and the
serving simulator's wait in the queue, apart from a request's own latency."""
import numpy as np
import pandas as pd
import pytest

from simulator import Cluster, Workload, simulate_serving
from simulator import report
from simulator.batch_load import BatchLoad
from tests.simulator.fixtures import LINEAR, profile_dict


@pytest.fixture
def drawn(monkeypatch):
    """The figures the report functions draw (saving is skipped)."""
    figures = []

    def keep(path, fig):
        figures.append(fig)
        return path

    monkeypatch.setattr(report.atomic, "save_figure", keep)
    return figures


def test_load_plot_draws_one_connected_line_per_configuration(drawn, tmp_path):
    summaries = pd.DataFrame({"offered_rate": [2.0, 8.0, 16.0, 32.0], "config": ["sd g4"] * 4,
                              "label": [f"{r:g} req/s" for r in (2, 8, 16, 32)],
                              "throughput_tok_s": [400.0, 1500.0, 1900.0, 2000.0], "e2e_s_p99": [5.0, 9.0, 70.0, 200.0]})
    report.load_plot(summaries, tmp_path / "load.png")
    for ax in drawn[0].axes:
        lines = [line for line in ax.lines if len(line.get_xdata()) > 1]
        assert len(lines) == 1 and list(lines[0].get_xdata()) == [2.0, 8.0, 16.0, 32.0]
        assert ax.get_xscale() == "log"                        # the loads double
        labels = [t.get_text() for t in ax.get_xticklabels()]
        assert labels == ["2", "8", "16", "32"], labels


def test_crossover_colours_match_across_panels_and_the_one_line_is_named(drawn, tmp_path):
    table = pd.DataFrame([{"label": label, "batch": b, "throughput_tok_s": base * b * f, "tpot_ms": 10.0}
                          for b in (1, 4, 16, 64) for label, base, f in (("ar", 50, 1.0), ("sd", 80, 0.9),
                                                                         ("glide", 110, 0.85))])
    report.write_crossover_report(tmp_path, table, "ar", "toy", "python -m experiments.simulate crossover",
                                  BatchLoad(256, 128), heldout=0.06)
    left, right = drawn[0].axes[:2]
    colour = {line.get_label(): line.get_color() for line in left.lines if not line.get_label().startswith("_")}
    assert {line.get_label(): line.get_color() for line in right.lines
            if line.get_label() in ("sd", "glide")} == {k: colour[k] for k in ("sd", "glide")}
    assert any("ar = 1.0" in t.get_text() for t in right.texts)
    assert len(right.collections) == 2 and "within the held-out error (6.0%)" in right.get_ylabel()   # a band a line
    assert "Shaded: each speedup within the Profile's held-out error (6.0%)" in (tmp_path / "README.md").read_text()


def test_the_wait_in_the_queue_is_apart_from_a_requests_own_latency():
    """Three requests at once, batch limit 1: the second and third wait for the ones before; each
    one's own latency (admission to its last token) is the same, and e2e = wait + own."""
    workload = Workload(rate=1e9, n_requests=3, prompt_len="fixed:64", output_len="fixed:32")
    res = simulate_serving(profile_dict(), "ar", {}, workload, Cluster(max_batch=1), 0, latencies=LINEAR)
    r = res.requests.sort_values("admitted_s")
    assert np.allclose(r["e2e_s"], r["queue_s"] + r["service_s"])
    assert r["queue_s"].iloc[0] == pytest.approx(0.0, abs=1e-6)
    assert r["queue_s"].iloc[1] == pytest.approx(r["service_s"].iloc[0], rel=1e-6)
    assert np.allclose(r["service_s"], r["service_s"].iloc[0])
    assert res.summary["queue_s_p50"] > 0 and res.summary["service_s_p50"] > 0
