"""experiments.smollm2_cpu: the SmolLM2 campaign's CLI checks and the pieces of its tables."""
import numpy as np
import pandas as pd
import pytest

from experiments import smollm2_cpu
from experiments.smollm2_report import _pick, decode_rate
from traces.errors import InputError


def test_unknown_stage_and_bad_numbers_are_one_line_exit_2(capsys, tmp_path):
    assert smollm2_cpu.main(["--stages", "latency,nope", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == "error: unknown stage 'nope' (known: latency, tokens, steps, profile, tables)"
    assert smollm2_cpu.main(["--limit", "0", "--out", str(tmp_path)]) == 2


def test_a_missing_drafter_names_the_training_command(tmp_path):
    args = smollm2_cpu.build_parser().parse_args(["--drafters", str(tmp_path)])
    with pytest.raises(InputError, match="python -m traces.train router"):
        smollm2_cpu.drafter_file(args, "coral-router")
    with pytest.raises(InputError, match="python -m traces.train glide"):
        smollm2_cpu.drafter_file(args, "glide")


def test_every_run_has_a_prediction_and_a_known_drafter():
    labels = {label for label, *_ in smollm2_cpu.RUNS}
    from experiments.smollm2_report import PREDICT
    assert set(PREDICT) == labels - {"ar"}
    for _label, _method, _config, drafter in smollm2_cpu.RUNS:
        assert drafter is None or drafter in smollm2_cpu.DRAFTERS


def test_decode_rate_is_wall_clock_per_committed_token():
    steps = pd.DataFrame({"draft_s": [0.1, 0.2], "verify_s": [0.3, 0.3], "overhead_s": [0.0, 0.1],
                          "accepted": [3, 1], "ctx_len": [100, 103]})
    per_token, per_step, ctx = decode_rate(steps)
    assert per_token == pytest.approx(1.0 / 4) and per_step == 2.0 and ctx == 101.5


def test_pick_matches_tuples_floats_and_drafters():
    table = pd.DataFrame({"drafter": ["a", "a", "b"], "gamma": [4, 4, 4], "eta": [0.6, 0.65, 0.6],
                          "bins": [(8, 4), (8, 2), (8, 4)], "speedup": [1.0, 2.0, 3.0]})
    assert _pick(table, "a", {"gamma": 4, "eta": 0.6})["speedup"] == 1.0
    assert _pick(table, "a", {"bins": (8, 2)})["speedup"] == 2.0
    assert _pick(table, "b", {"eta": 0.6})["speedup"] == 3.0
    with pytest.raises(InputError, match="no scored configuration"):
        _pick(table, "a", {"gamma": 5})
