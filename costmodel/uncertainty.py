"""How sure a predicted speedup is: its interval, and the prompts a comparison needs to be told apart.

Two things move a measured speedup off the prediction:
- the step model's own error: the Profile's held-out relative error (its engine calibration, one
  configuration left out in turn, 90th percentile; `Profile.heldout_error`), which prices the steps
  at the tokens per step measured;
- which prompts were run: one prompt's seconds per token (a run's speed is its tokens over its
  seconds) strays from its dataset's by a relative standard deviation sd = spread x (T - 1) / T
  (`Workload.prompt_spread`, fitted by `calibrate.spread.prompt_spreads` with each step priced by the
  step model; T the predicted tokens per step: a prompt strays in what the drafts add, not in the
  token every step commits), so a mean over n prompts strays by sd / sqrt(n),
  and the acceptance the prediction used, a mean over the calibration's prompts, strays as well.
Both are relative errors of the prediction against the measurement, combined in quadrature: half-width
h = sqrt(e^2 + z^2 sd^2 (1/n + 1/n_cal)) at z for a two-sided 90%, and the measurement is expected in
[prediction / (1 + h), prediction / (1 - h)] (relative error = prediction / measurement - 1 in [-h, h]).
Timing noise of the measuring machine is not in it: it is unknown before measuring.
"""
from __future__ import annotations

import numpy as np

Z90 = 1.6448536269514722      # two-sided 90%: the held-out error is a 90th percentile too


def prompt_sd(tokens_per_step, spread) -> np.ndarray:
    """Relative standard deviation of one prompt's speedup: spread x (T - 1) / T (0 at T = 1)."""
    t = np.maximum(np.asarray(tokens_per_step, dtype=float), 1.0)
    return np.asarray(spread, dtype=float) * (t - 1.0) / t


def half_width(heldout_error, sd, prompts=None, calibration_prompts=None, z: float = Z90) -> np.ndarray:
    """h of the interval over a measurement of `prompts` prompts (None: a deployment's long run,
    where the prompts average out) whose acceptance was calibrated on `calibration_prompts` (None:
    many); NaN parts count as 0."""
    error = np.nan_to_num(np.asarray(heldout_error, dtype=float))
    sd = np.nan_to_num(np.asarray(sd, dtype=float))
    share = sum(0.0 if n is None else 1.0 / np.asarray(n, dtype=float) for n in (prompts, calibration_prompts))
    return np.sqrt(error ** 2 + (z * sd) ** 2 * share)


def interval(speedup, half) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) of the measured speedup a prediction allows at half-width `half`; high is
    infinite where the half-width reaches 1 (the prediction bounds nothing above)."""
    s, h = np.asarray(speedup, dtype=float), np.asarray(half, dtype=float)
    with np.errstate(divide="ignore"):
        high = np.where(h < 1.0, s / np.maximum(1.0 - h, 1e-300), np.inf)
    return s / (1.0 + h), high


def verdict(speedup, error) -> np.ndarray:
    """"speculate" where the interval a relative error allows (`interval`) lies above 1, "don't"
    where it lies below, "tie" where it holds 1: what a prediction of that error decides."""
    low, high = interval(speedup, error)
    return np.where(low > 1.0, "speculate", np.where(high < 1.0, "don't", "tie"))


def prompts_to_resolve(ratio, sd, z: float = Z90) -> np.ndarray:
    """Prompts a measurement needs before a speedup ratio (a configuration over plain decoding, or
    over another configuration) stands clear of its prompt-to-prompt noise at 90%:
    ceil((z sd / |ln ratio|)^2), at least 1; infinite for a ratio of 1. `sd` is the relative
    standard deviation of one prompt's ratio (two configurations: combine theirs)."""
    gap = np.abs(np.log(np.asarray(ratio, dtype=float)))
    sd = np.asarray(sd, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        need = np.where(gap > 0, np.ceil((z * sd / np.where(gap > 0, gap, 1.0)) ** 2), np.inf)
    return np.maximum(need, 1.0)

