"""Acceptance replayed exactly from a TokenTrace: the steps `traces.replay` walks, as StepDraws.

Which tokens each step commits is `traces.replay.replay_steps` (the one place that logic lives);
this module adds what the simulator needs to price the steps: draft positions proposed and query
tokens in the verify forward, which follow from the method's shape and, for CAPE and Kangaroo,
from the recorded drafter confidences at the step's positions.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from simulator.acceptance import StepDraws
from simulator.methods import parse_config
from traces import replay as trace_replay
from traces.schema import read_trace, validate
from common.errors import InputError

# simulator method -> method name in traces.replay
REPLAYABLE = {"sd": "sd", "mcsd": "mcsd", "cape": "cape", "glide": "sd", "kangaroo": "kangaroo"}


def load_token_trace(source) -> pd.DataFrame:
    """A TokenTrace frame from a frame or a parquet path, checked against the contract."""
    if isinstance(source, pd.DataFrame):
        return validate(source, "token", source="token trace")
    frame, _ = read_trace(Path(source), kind="token")
    return frame


def replay_draws(trace, method: str, config, prompt_id: str) -> StepDraws:
    """The steps of one prompt of a TokenTrace under `method`/`config`, with their shapes."""
    if method not in REPLAYABLE:
        raise InputError(f"method {method} cannot be replayed from a TokenTrace (replayable: {', '.join(REPLAYABLE)})")
    frame = load_token_trace(trace)
    config = parse_config(config)
    replay_method = "cape" if method == "glide" and "bins" in config else REPLAYABLE[method]
    known = {"gamma", "k", "bins", "eta"}
    replay_config = trace_replay.normalise_config(replay_method, {k: v for k, v in config.items() if k in known})
    rows = frame[frame["prompt_id"].astype(str) == str(prompt_id)]
    if rows.empty:
        raise InputError(f"token trace has no prompt '{prompt_id}'")
    table = trace_replay.TokenTable.from_frame(rows)
    steps = trace_replay.replay_steps(table, replay_method, replay_config)
    accepted = steps["accepted"].to_numpy(np.int64)
    pos = steps["pos"].to_numpy(np.int64)
    conf = table.draft_conf
    n = conf.size
    if replay_method == "mcsd":
        ks = trace_replay.parse_k_config(replay_config["k"])
        drafted = np.full(pos.size, len(ks), np.int64)
        verify = np.full(pos.size, int(np.sum(np.cumprod(ks))) + 1, np.int64)
        return StepDraws(accepted, drafted, verify)
    gamma = int(replay_config["gamma"])
    window = pos[:, None] + np.arange(gamma)[None, :]
    conf_w = np.where(window < n, conf[np.minimum(window, n - 1)], 1.0)
    if replay_method == "kangaroo":
        low = conf_w <= replay_config["eta"]
        drafted = np.where(low.any(axis=1), low.argmax(axis=1) + 1, gamma).astype(np.int64)
        return StepDraws(accepted, drafted, drafted + 1)
    drafted = np.full(pos.size, gamma, np.int64)
    if replay_method == "cape":
        bins = np.asarray(replay_config["bins"], np.int64)
        sizes = np.maximum(bins[np.clip(np.floor(10 * conf_w).astype(np.int64), 0, 10)], 1)
        return StepDraws(accepted, drafted, 1 + sizes.sum(axis=1))
    return StepDraws(accepted, drafted, drafted + 1)


def prompt_ids(trace) -> list[str]:
    return sorted(load_token_trace(trace)["prompt_id"].astype(str).unique())

