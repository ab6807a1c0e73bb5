"""Acceptance replayed exactly from a TokenTrace: the steps `traces.replay` walks, as StepDraws.

Which tokens each step commits is `traces.replay.replay_steps` (the method module's
`replay_lengths`, the one place that logic lives); this module adds what the simulator needs to
price the steps: draft forwards run and query tokens in the verify forward. They follow from the
step's shape, and where the config makes them depend on the drafter's confidence (drafting stops
after a token with confidence <= `eta`; `bins` expands each position by its confidence bin) from
the recorded confidences at the step's positions, exactly as the replay reads them.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from common.errors import InputError
from costmodel.cape import confidence_bin
from simulator.acceptance import StepDraws, first_failure
from simulator.methods import build_step_model
from traces import replay as trace_replay
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
    table = trace_replay.TokenTable.from_frame(rows)
    step = build_step_model(profile, method, config)
    steps = trace_replay.replay_steps(table, method, step.config)
    drafted, verify = _shapes(step, table.draft_conf, steps["pos"].to_numpy(np.int64))
    return StepDraws(steps["accepted"].to_numpy(np.int64), drafted, verify)


def _shapes(step, conf: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(draft forwards, verify query tokens) of the steps starting at `pos`: the step's fixed shape,
    unless its config stops drafting at low confidence (eta) or expands by confidence bin (bins)."""
    depth = step.shape.max_drafted
    eta = float(getattr(step.config, "eta", 0.0) or 0.0)
    bins = getattr(step.config, "bins", None)
    window = pos[:, None] + np.arange(depth)[None, :]
    conf_w = np.where(window < conf.size, conf[np.minimum(window, max(conf.size - 1, 0))], 1.0)
    drafted = np.full(pos.size, depth, np.int64)
    verify = np.full(pos.size, float(np.asarray(step.shape.verify_tokens).reshape(-1)[0]))
    if eta > 0:       # the low-confidence token is still verified; a chain verifies its drafts + 1
        drafted = np.minimum(first_failure(conf_w > eta) + 1, depth).astype(np.int64)
        verify = drafted + 1.0
    if bins is not None:
        sizes = np.maximum(np.asarray(bins, np.int64)[confidence_bin(conf_w)], 1)
        verify = 1.0 + (sizes * (np.arange(depth)[None, :] < drafted[:, None])).sum(axis=1)
    return drafted, np.rint(verify).astype(np.int64)


def prompt_ids(trace) -> list[str]:
    return sorted(load_token_trace(trace)["prompt_id"].astype(str).unique())
