"""A served load's measured quantiles carry their spread over the load's requests: the bench judges every
bundled served run against its targets and against twice that spread, from the files alone."""
from __future__ import annotations

import pandas as pd
import pytest

from common.bundled import bundled
from experiments.bench import served_spread

EXAMPLES = bundled("profiles").parents[1] / "examples"


def test_every_bundled_served_run_is_judged_against_its_spread(tmp_path, capsys):
    assert served_spread.main(["--out", str(tmp_path / "points.csv")]) == 0
    points = pd.read_csv(tmp_path / "points.csv")
    assert any(run.endswith("served_load_smollm2_drafters/session") for run in set(points["run"]))
    repredicted = points[points["run"].str.endswith("served_load_smollm2_b32")]
    assert len(repredicted) and not repredicted["predicted_first"].any()   # priced after its measurement
    assert set(points["metric"]) == {"tpot_s_p50", "ttft_s_p90", "tpot_s_p90"}
    assert (points["spread"] > 0).all() and (points["in_2x_spread"] == (points["abs_error"] <= 2 * points["spread"])).all()
    out = capsys.readouterr().out
    assert "over the " in out and "runs predicted first:" in out and "requests a load resolve 5%" in out


def test_a_folder_without_served_runs_is_refused(tmp_path, capsys):
    assert served_spread.main(["--runs", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == f"error: --runs {tmp_path} holds no finished run of experiments.serve_load"
    assert served_spread.main(["--runs", str(tmp_path / "nope")]) == 2
    assert "is not a folder" in capsys.readouterr().err


def test_the_session_run_lies_within_twice_its_spread():
    """The served run predicted by a Profile recorded the same morning: every latency error inside twice
    the load's own spread (docs/results.md, "A served load")."""
    points = served_spread.judged(EXAMPLES / "served_load_smollm2_drafters" / "session")
    assert points["in_2x_spread"].all() and len(points) == 18
    assert points.loc[points["metric"] == "tpot_s_p50", "spread"].median() == pytest.approx(0.074, abs=0.005)
