"""The sweep's answers as a person reads them: numbers that depend on their own task only, deployments
that do not fit said so, plain decoding's own numbers, ties marked, latencies with their load."""
from __future__ import annotations

import pandas as pd
import pytest

from common.bundled import bundled
from calibrate.profile import Profile
from experiments.sweep import run as sweep
from experiments.sweep.executor import LocalExecutor

CORAL = bundled("profiles", "coral-llama-3-8b-a6000.json")
GLIDE = bundled("profiles", "glide-vicuna-7b-h800.json")


def _sweep(paths, **options):
    opts = sweep.SweepOptions(**{"methods": ["sd", "glide", "coral"], "sim_repeats": 3, "sim_tokens": 128,
                                 "batch_sizes": [1, 4], **options})
    return sweep.run_sweep([Profile.load(p) for p in paths], opts, LocalExecutor(workers=1, progress=False))


def _rows(frame: pd.DataFrame, profile: str) -> pd.DataFrame:
    rows = frame[frame["profile"] == profile].reset_index(drop=True).dropna(axis=1, how="all")
    return rows[sorted(rows.columns)]     # without the columns only another profile's methods fill


def test_a_profile_swept_alone_or_among_others_gets_the_same_rows():
    """Every simulated number is a function of its own (profile, configuration, load, seed): the
    simulator's re-score and the served deployments of coral-llama-3-8b do not move when another
    profile is swept beside it, before or after it."""
    alone = _sweep([CORAL])
    among = _sweep([GLIDE, CORAL])
    name = Profile.load(CORAL).name
    for part in ("best", "served", "deployments"):
        pd.testing.assert_frame_equal(_rows(getattr(alone, part), name), _rows(getattr(among, part), name),
                                      check_exact=True, check_dtype=False, obj=part)
