"""Acceptance replayed exactly from a TokenTrace: the steps `traces.replay` walks, as StepDraws.

Which tokens each step commits is `traces.replay.replay_steps`; what the simulator needs beside
them to price the steps, the draft forwards run and the verify forward's query tokens, is the
method's `replay_shapes`: the step's shape, read at the recorded confidences where the method's
replay rules make it depend on them (`methods.replay`), exactly as the replay reads them.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

import methods
from common.errors import InputError
from methods.draws import StepDraws
from methods.replay import TokenTable
from simulator.methods import build_step_model
from traces.replay import replay_steps
from traces.schema import read_trace, validate


def load_token_trace(source) -> pd.DataFrame:
    """A TokenTrace frame from a frame or a parquet path, checked against the contract."""
    if isinstance(source, pd.DataFrame):
        return validate(source, "token", source="token trace")
    frame, _ = read_trace(Path(source), kind="token")
    return frame


def replay_draws(trace, profile, method: str, config, prompt_id: str) -> StepDraws:
    """The steps of one prompt of a TokenTrace under `method`/`config` (as `build_step_model`
    reads it on `profile`), with the shapes of that step."""
    frame = load_token_trace(trace)
    rows = frame[frame["prompt_id"].astype(str) == str(prompt_id)]
    if rows.empty:
        raise InputError(f"token trace has no prompt '{prompt_id}'")
    table = TokenTable.from_frame(rows)
    step = build_step_model(profile, method, config)
    steps = replay_steps(table, method, step.config)
    pos = steps["pos"].to_numpy(np.int64)
    drafted, verify = methods.get(method).replay_shapes(table, pos, step.config, step.shape)
    return StepDraws(steps["accepted"].to_numpy(np.int64), drafted, verify)


def prompt_ids(trace) -> list[str]:
    return sorted(load_token_trace(trace)["prompt_id"].astype(str).unique())
