"""The shared contracts reject malformed input with one clear message and round-trip valid data."""
import json

import pandas as pd
import pytest

from profiles.profile import Profile
from common.errors import InputError
from common.cli import cli_entry
from traces.schema import RunMetadata, read_trace, write_trace


def _latency_frame():
    return pd.DataFrame(
        {"model": ["m"], "hardware": ["cpu"], "dtype": ["fp32"], "role": ["target"], "n_tokens": [1],
         "ctx_len": [0], "batch": [1], "seconds": [0.01], "repeats": [3]}
    )


def test_trace_round_trip(tmp_path):
    path = tmp_path / "lat.parquet"
    write_trace(path, _latency_frame(), RunMetadata(kind="latency", hardware="cpu"))
    frame, meta = read_trace(path, kind="latency")
    assert meta.hardware == "cpu" and frame["seconds"].iloc[0] == pytest.approx(0.01)
    assert not list(tmp_path.glob(".*.tmp")), "atomic write left a temp file behind"


def test_trace_missing_column_is_named(tmp_path):
    with pytest.raises(InputError, match="missing column.*seconds"):
        write_trace(tmp_path / "x.parquet", _latency_frame().drop(columns=["seconds"]), RunMetadata(kind="latency"))
    assert not (tmp_path / "x.parquet").exists()


def test_trace_wrong_kind(tmp_path):
    path = tmp_path / "lat.parquet"
    write_trace(path, _latency_frame(), RunMetadata(kind="latency"))
    with pytest.raises(InputError, match="expected a token trace"):
        read_trace(path, kind="token")


def _profile_dict():
    return {
        "schema_version": 2, "name": "p", "hardware": "A100-80G", "dtype": "fp16", "target": "t",
        "models": {"t": {"params": 1.0}},
        "latency": {"t": {"kind": "table", "params": {"n_tokens": [1], "ctx_len": [0], "batch": [1],
                                                      "seconds": [[[0.01]]]}}},
        "acceptance": {"d": {"alpha": 0.5, "temperature": 0.0}},
    }


def test_profile_round_trip(tmp_path):
    prof = Profile.from_dict(_profile_dict())
    prof.save(tmp_path / "p.json")
    assert Profile.load(tmp_path / "p.json").to_dict() == prof.to_dict()


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.pop("latency"), "missing field 'latency'"),
        (lambda d: d.update(schema_version=99), "schema version 99"),
        (lambda d: d["acceptance"]["d"].update(alpha=1.5), "alpha = 1.5 is outside"),
        (lambda d: d.update(target="nope"), "target 'nope'"),
    ],
)
def test_profile_bad_fields(tmp_path, mutate, message):
    raw = _profile_dict()
    mutate(raw)
    (tmp_path / "p.json").write_text(json.dumps(raw))
    with pytest.raises(InputError, match=message):
        Profile.load(tmp_path / "p.json")


def test_cli_entry_exit_code(capsys):
    @cli_entry
    def main():
        raise InputError("gamma must be >= 1, got 0")

    assert main() == 2
    assert capsys.readouterr().err.strip() == "error: gamma must be >= 1, got 0"


def test_atomic_write_uses_normal_file_mode(tmp_path):
    import os
    import stat

    from common import atomic

    mask = os.umask(0o022)
    try:
        path = atomic.write_text(tmp_path / "r.md", "x")
    finally:
        os.umask(mask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
