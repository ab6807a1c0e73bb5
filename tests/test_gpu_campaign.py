"""The GPU campaign script: bad input, its configuration list, and a whole --tiny run on the CPU."""
import pandas as pd
import pytest

from experiments import gpu_campaign
from traces.schema import read_trace

ISSUE_8_METHODS = {"sd", "mcsd", "cape", "lookahead", "kangaroo", "coral"}


def test_at_least_30_configurations_over_every_issue_8_method():
    methods = [m for m, _ in gpu_campaign.CONFIGS]
    assert len(gpu_campaign.CONFIGS) >= 30
    assert ISSUE_8_METHODS <= set(methods)


@pytest.mark.parametrize("argv,needle", [
    (["--repeats", "0", "--tiny"], "must be >= 1"),
    (["--device", "cpu"], "needs a GPU"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, capsys, argv, needle):
    assert gpu_campaign.main(["--out", str(tmp_path / "o"), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and needle in err and err.count("\n") == 1


@pytest.mark.slow
def test_tiny_campaign_runs_end_to_end(tmp_path):
    out = tmp_path / "campaign"
    code = gpu_campaign.main(["--tiny", "--out", str(out), "--max-new-tokens", "8", "--prompts", "1",
                              "--repeats", "2", "--prompt-len", "8"])
    assert code == 0
    latency, meta = read_trace(out / "latency_tiny.parquet", "latency")
    assert {"target", "draft"} <= set(latency.role)
    drafters, _ = read_trace(out / "drafter_latency.parquet", "latency")
    assert {"glide@tiny", "kangaroo-l2@tiny", "eagle@tiny", "eagle-router16:2@tiny"} <= set(drafters.model)
    steps, smeta = read_trace(out / "replayed_steps.parquet", "step")
    assert smeta.extra["mode"] == "replayed acceptance"
    table = pd.read_csv(out / "fidelity.csv")
    assert len(table) == len(gpu_campaign.CONFIGS) + 1           # + the ar baseline
    assert ISSUE_8_METHODS <= set(table.method)
    assert (table.measured_tps > 0).all() and (table.predicted_tps > 0).all() and (table.repeats == 2).all()
    assert "median" in (out / "report.md").read_text()
    coeffs = pd.read_csv(out / "coefficients.csv")
    assert {"layers:1", "glide@tiny", "eagle-router16:2@tiny"} <= set(coeffs.drafter)
    assert (coeffs.c > 0).all() and coeffs.bandwidth_fraction.isna().all()   # tiny is no registry architecture
