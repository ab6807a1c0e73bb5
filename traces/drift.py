"""Paired plain-decoding references: how fast the machine ran while each generation was measured.

A shared CPU's speed wanders by tens of percent within a minute, so a configuration measured
minutes away from the plain decoding it is divided by can gain or lose as much by timing alone.
`campaigns.measure` therefore runs plain decoding (ar) on the same prompt right next to every
other generation: the two form a pair and share an id in the StepTrace column `pair` (-1: not
paired). Two uses, one rule:

- a measured speedup is a generation's tokens/s over its own partner's (`campaigns.measure.rates`);
- before a calibration fits step times, each step is rescaled to the machine's typical speed
  (`pair_factors`, `normalise`): divided by its pair's factor, the partner's mean plain step over
  what it is expected to cost (the isolated forward's latency table at its context), over the
  median of that ratio across every pair of every prompt, so a dataset recorded later, in a
  slower hour, is put on the same scale as the others, not on its own;
- the fidelity report's drift between runs (`run_factors`): each pair's plain step over the
  median of its prompt's plain generations.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from methods import BASELINE
from common.errors import InputError
from traces.schema import step_wall_s

PARTS = ("draft_s", "verify_s", "overhead_s")


def pair_factors(steps: pd.DataFrame, expected_s) -> pd.Series:
    """(prompt id, pair id) -> how much slower than typical the machine ran during that pair (1.0:
    typical), from the paired plain-decoding (ar) steps in `steps`. Empty when nothing is paired.
    `expected_s` (per row of `steps`, aligned by position): what each step should cost at its context."""
    plain = _paired_plain(steps)
    if plain.empty:
        return pd.Series(dtype=float)
    if len(expected_s) != len(steps):
        raise InputError(f"{len(expected_s)} expected plain steps for {len(steps)} steps")
    expected = pd.Series(np.asarray(expected_s, float), index=steps.index).loc[plain.index]   # by position
    if not (expected > 0).all():
        raise InputError("the expected plain step must be positive at every paired step")
    means = plain.assign(step_s=step_wall_s(plain), expected=expected).groupby(["prompt_id", "pair"])[
        ["step_s", "expected"]].mean()
    per_pair = means["step_s"] / means["expected"]
    return (per_pair / per_pair.median()).rename("factor")


def run_factors(runs: pd.DataFrame) -> pd.Series:
    """`pair_factors` from one row per generation (campaigns.measure's runs: decode_s, steps)."""
    plain = _paired_plain(runs)
    return _factors(plain.assign(step_s=plain["decode_s"] / plain["steps"]))


def _paired_plain(frame: pd.DataFrame) -> pd.DataFrame:
    if "pair" not in frame:
        return frame.iloc[:0]
    return frame[(frame["method"] == BASELINE) & (frame["pair"] >= 0)]


def _factors(plain: pd.DataFrame) -> pd.Series:
    if plain.empty:
        return pd.Series(dtype=float)
    per_pair = plain.groupby(["prompt_id", "pair"])["step_s"].mean()
    typical = per_pair.groupby(level="prompt_id").transform("median")
    return (per_pair / typical).rename("factor")


def normalise(steps: pd.DataFrame, factors: pd.Series) -> pd.DataFrame:
    """`steps` with each paired step's parts divided by its pair's factor (unpaired rows unchanged)."""
    if factors.empty or "pair" not in steps:
        return steps
    paired = (steps["pair"] >= 0).to_numpy()
    keys = pd.MultiIndex.from_frame(steps[["prompt_id", "pair"]])
    factor = factors.reindex(keys).to_numpy(float)
    lost = paired & pd.isna(factor)
    if lost.any():
        prompt, pair = keys[int(lost.argmax())]
        raise InputError(f"pair {pair} (prompt {prompt}) has no plain-decoding partner among the step traces: "
                         "calibrate on the plain-decoding trace recorded with them")
    factor = pd.Series(factor).where(paired, 1.0).to_numpy(float)
    out = steps.copy()
    for part in PARTS:
        out[part] = out[part].to_numpy(float) / factor
    return out


def summary(factors: pd.Series) -> dict | None:
    """What the Profile records of the drift `pair_factors` found and its calibration removed
    (None: nothing was paired)."""
    if factors.empty:
        return None
    return {"scheme": "each generation beside plain decoding of the same prompt; steps divided by the partner's "
                      "mean plain step over the median over every pair of its ratio to the isolated forward at the "
                      "same context", "pairs": int(len(factors)),
            "factor_p10": round(float(factors.quantile(0.1)), 4), "factor_median": round(float(factors.median()), 4),
            "factor_p90": round(float(factors.quantile(0.9)), 4)}
