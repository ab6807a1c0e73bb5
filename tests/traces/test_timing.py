"""`python -m traces.timing`: a LatencyTrace over the grid, every role, one-line bad input."""
from __future__ import annotations

from dataclasses import replace

import pandas as pd
import pytest
import torch

from profiles.machine import Machine, recorded_in, this_machine
from traces import forwards, schema, timing
from traces.timer import Timer, across_rounds


def run(tmp_path, *extra):
    out = tmp_path / "lat.parquet"
    code = timing.main(["--model", "tiny", "--tokens", "1,3", "--ctx", "0,5", "--batch", "1,2",
                         "--warmup", "0", "--repeats", "2", "--min-repeats", "1", "--quiet", "--out", str(out),
                         "--device", "cpu", "--threads", "1", *extra])
    return code, out


def test_grid_rows_roles_and_metadata(tmp_path):
    code, out = run(tmp_path, "--drafter", "layers:1", "--router", "4:1", "--router", "4:4")
    assert code == 0
    frame, meta = schema.read_trace(out, "latency")
    counts = frame.groupby("role").size().to_dict()
    assert counts == {"target": 8, "draft": 8, "lm_head": 4, "router_head": 8}
    target = frame[frame.role == "target"]
    assert sorted(set(zip(target.n_tokens, target.ctx_len, target.batch))) == \
        [(n, c, b) for n in (1, 3) for c in (0, 5) for b in (1, 2)]
    assert (frame.seconds > 0).all() and frame.repeats.between(1, 2).all()
    assert set(frame[frame.role == "router_head"].model) == {"tiny:router4:1", "tiny:router4:4"}
    assert (frame[frame.role.isin(["lm_head", "router_head"])].ctx_len == 0).all()
    assert meta.hardware == "CPU" and meta.dtype == "fp32" and meta.extra["tokens"] == [1, 3]
    # where it was timed, as a Profile records it (a Profile built from it later, or elsewhere, says so)
    assert recorded_in(meta.extra, str(out), Machine()) == this_machine(meta.extra["threads"])


def test_plain_linear_times_the_projections_as_f_linear(tmp_path, monkeypatch):
    from runtime import linear

    seen = []
    real = linear.linear
    monkeypatch.setattr(linear, "linear", lambda *a, **k: seen.append(linear._enabled) or real(*a, **k))
    code, out = run(tmp_path, "--linear", "plain")
    assert code == 0 and schema.read_trace(out, "latency")[1].extra["linear"] == "plain"
    assert seen and not any(seen) and linear._enabled          # off while timing, back on after
    seen.clear()
    assert run(tmp_path / "b", "--overwrite")[0] == 0 and seen and all(seen)   # the default: the few-row path


def test_rounds_pass_over_the_grid_again_and_keep_the_lower_median_of_their_medians(tmp_path):
    code, out = run(tmp_path, "--rounds", "3")
    assert code == 0
    frame, meta = schema.read_trace(out, "latency")
    assert len(frame) == 8 and meta.extra["rounds"] == 3 and frame.repeats.between(3, 6).all()
    rounds = pd.DataFrame({"model": ["m"] * 4, "n_tokens": [1, 1, 1, 4], "seconds": [0.1, 0.5, 0.2, 0.3],
                           "repeats": [2, 2, 2, 5]})
    combined = across_rounds(rounds)
    assert combined.to_dict("records") == [{"model": "m", "n_tokens": 1, "seconds": 0.2, "repeats": 6},
                                           {"model": "m", "n_tokens": 4, "seconds": 0.3, "repeats": 5}]
    two = across_rounds(rounds.iloc[:2])        # of two passes, one with a slow spell: the faster, not the mean
    assert two.seconds.tolist() == [0.1]


def test_timer_median_and_budget():
    calls = []
    timer = Timer(torch.device("cpu"), warmup=2, repeats=5, min_repeats=2, point_seconds=0.0)
    seconds, repeats = timer.median(lambda: calls.append("run"), lambda: calls.append("reset"))
    assert repeats == 2 and len(calls) == 2 * (2 + 2) and seconds >= 0
    timer = Timer(torch.device("cpu"), warmup=0, repeats=3)
    assert timer.median(lambda: None, lambda: None)[1] == 3


def test_filled_cache_has_length_and_room():
    from runtime.models import tiny_model

    model = tiny_model()
    cache = forwards.filled_cache(model, batch=2, ctx_len=7, extra=3, seed=0)
    assert cache.length == 7 and cache.keys[0].shape[0] == 2 and cache.keys[0].shape[2] == 10
    assert cache.keys[0][:, :, :7].abs().sum() > 0


@pytest.mark.parametrize("extra,needle", [
    (["--tokens", "0"], "--tokens needs integers >= 1"),
    (["--batch", "a,b"], "--batch must be comma-separated"),
    (["--router", "4:8"], "top-n <= groups"),
    (["--router", "x"], "GROUPS:TOP_N"),
    (["--drafter", "layers:9"], "truncated drafter"),
    (["--drafter", "random:llama-68m"], "vocabulary size"),
    (["--model", "./no/such/model"], "model path not found"),
    (["--repeats", "0"], "--repeats"),
    (["--rounds", "0"], "--rounds >= 1"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys, extra, needle):
    code, out = run(tmp_path, *extra)
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("error: ") and needle in err and "\n" not in err
    assert not out.exists() and not list(tmp_path.iterdir())


def stalled_copy(out, path, meta_change=None, factor=10.0):
    """`out`'s trace with its target's (3, 5, 2) point made `factor` times slower (a slow spell)."""
    frame, meta = schema.read_trace(out, "latency")
    hit = (frame.role == "target") & (frame.n_tokens == 3) & (frame.ctx_len == 5) & (frame.batch == 2)
    frame.loc[hit, "seconds"] *= factor
    if meta_change:
        meta = replace(meta, extra={**meta.extra, **meta_change(meta.extra)})
    schema.write_trace(path, frame, meta)
    return frame, hit


def test_retime_times_only_the_stalled_points_of_an_earlier_grid_again(tmp_path):
    code, out = run(tmp_path)
    stalled, hit = stalled_copy(out, tmp_path / "stalled.parquet")
    code, repaired = run(tmp_path / "r", "--retime", str(tmp_path / "stalled.parquet"))
    frame, meta = schema.read_trace(repaired, "latency")
    # the stalled point is timed again and the rest kept as measured, but for the tiny model's own stalls (its two
    # timed runs a point on a loaded machine hold one now and then): `retimed_points` counts the points that differ
    assert code == 0 and 1 <= meta.extra["retimed_points"] <= 3
    assert meta.extra["retimed_from"].endswith("stalled.parquet")
    assert (frame.loc[hit, "seconds"] < stalled.loc[hit, "seconds"]).all()


@pytest.mark.parametrize("change,extra,needle", [
    (lambda e: {"machine": {**e["machine"], "cpu": "Another CPU"}}, [], "re-time a grid on the machine that timed it"),
    (lambda e: {}, ["--linear", "plain"], "timed with --linear few-row"),
    (lambda e: {}, ["--tokens", "1,2"], "timed --tokens 1,3"),
    (lambda e: {}, ["--rounds", "2"], "no --rounds"),
    (lambda e: {}, ["--mode", "static"], "timed in mode eager, this command has --mode static"),
    (lambda e: {}, ["--model", "tiny:3"], "holds no target rows of tiny:3"),
])
def test_retime_refuses_another_machine_or_other_options(tmp_path, capsys, change, extra, needle):
    code, out = run(tmp_path)
    stalled_copy(out, tmp_path / "stalled.parquet", change)
    capsys.readouterr()
    code, repaired = run(tmp_path / "r", "--retime", str(tmp_path / "stalled.parquet"), *extra)
    err = capsys.readouterr().err.strip()
    assert code == 2 and needle in err and "\n" not in err and not repaired.exists()
