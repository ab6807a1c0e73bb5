"""cape: GLIDE's confidence-aware proposal expansion (CAPE): a chain of gamma drafts, and at each
position the drafter's top-S[b] tokens verified, b = floor(10 * confidence) (costmodel.cape)."""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import pandas as pd

from costmodel.cape import N_BINS, PAPER_BINS, cape_expected_tokens, cape_verify_distribution, cape_verify_tokens, format_bins, parse_bins
from costmodel.step import DraftPart, StepShape, chain_width
from methods.config import Int, IntTuple, MethodConfig, param
from methods.sd import MAX_DEPTH, drafter_model, own_kv
from methods.spec import MethodSpec, PlotSpec

GAMMAS = tuple(range(1, 9))
VALUES = (1, 2, 4, 6, 8)       # candidates per position the sweep tries (the paper's array uses 8, 6, 4, 2)


def bins_param(optional: bool = False) -> IntTuple:
    return IntTuple("S", "candidates per confidence bin floor(10 conf), the chain token included",
                    omit=None if optional else NotImplemented, parser=parse_bins, text=format_bins)


@dataclass(frozen=True)
class CAPEConfig(MethodConfig):
    method = "cape"
    gamma: int = param(Int("g", "draft length", low=1, high=MAX_DEPTH), 4)
    bins: tuple = param(bins_param(), PAPER_BINS)


def nonincreasing_arrays(length: int = N_BINS, values=VALUES) -> np.ndarray:
    """(n, length) every array of `values`, non-increasing left to right: low confidence keeps more."""
    vals = sorted(set(int(v) for v in values), reverse=True)
    rows = [[vals[j] for j in combo] for combo in itertools.combinations_with_replacement(range(len(vals)), length)]
    return np.asarray(rows, dtype=np.int64).reshape(-1, length)


def bin_matrix(frame: pd.DataFrame) -> np.ndarray:
    return np.asarray([tuple(b) for b in frame["bins"]], dtype=np.int64).reshape(len(frame), N_BINS)


def expansion_tokens(setup, frame, method: str) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """(expected tokens, verified tokens, their distribution) of CAPE steps: 1 + hS sum_i h1^(i-1);
    1 + gamma E[S]; 1 + the sum of gamma independent S[bin]."""
    conf = setup.need("conf_bins", method)
    gamma = frame["gamma"].to_numpy(np.int64)
    bins = bin_matrix(frame)
    hits = {int(k): v for k, v in conf.topk_hit.items()}
    tokens = cape_expected_tokens(bins, conf.freq, hits, gamma, new_tokens=setup.new_tokens)
    return tokens, 1.0 + cape_verify_tokens(bins, conf.freq, gamma), cape_verify_distribution(bins, conf.freq, gamma)


def expansion_sampler(setup, config, method: str):
    from simulator.acceptance import CapeSampler
    conf = setup.need("conf_bins", method)
    return CapeSampler(config.gamma, list(config.bins), conf.freq, conf.topk_hit)


def bins_space(setup, method: str, gammas=GAMMAS, most_values: int = 5) -> pd.DataFrame:
    """gamma x every non-increasing bin array over the candidate counts the acceptance entry
    records top-K hits for (CAPE's space; GLIDE's with bins)."""
    recorded = sorted(int(k) for k in setup.need("conf_bins", method).topk_hit)
    arrays = nonincreasing_arrays(N_BINS, tuple(recorded[:most_values]))
    g = np.repeat(np.asarray(gammas, dtype=np.int64), len(arrays))
    s = np.tile(arrays, (len(gammas), 1))
    texts = [format_bins(row) for row in arrays]
    return pd.DataFrame({"gamma": g, "bins": [tuple(int(v) for v in row) for row in s],
                         "bins_mean": s.mean(axis=1), "bins_max": s.max(axis=1),
                         "config": [f"{method} g{gi} S{texts[i % len(arrays)]}" for i, gi in enumerate(g)]})


class CAPE(MethodSpec):
    name, config, summary = "cape", CAPEConfig, "chain + confidence-aware expansion sets"
    drafter_kinds = ("draft_model",)      # on a GLIDE drafter it is method glide with bins
    needs = "conf_bins"
    decoder = "runtime.engine.draft_methods:CAPE"
    calibration = ("cape g2 S88886666442", "cape g4 S88886666442", "cape g8 S88886666442")
    plot = PlotSpec(x="gamma", hue="bins_mean")

    def space(self, setup, gammas=GAMMAS, most_values: int = 5):
        return bins_space(setup, self.name, gammas, most_values)

    def expected_tokens(self, setup, frame):
        return expansion_tokens(setup, frame, self.name)[0]

    def step_shape(self, setup, frame):
        gamma = frame["gamma"].to_numpy(np.int64)
        _, verify, dist = expansion_tokens(setup, frame, self.name)
        return StepShape(setup.target, verify, (DraftPart(drafter_model(setup)),), chain_width(gamma),
                         overhead_s=setup.overhead_s, draft_kv_model=own_kv(setup), verify_dist=dist)

    def sampler(self, setup, config, **options):
        return expansion_sampler(setup, config, self.name)

    def replay_lengths(self, table, config):
        from traces.replay import chain_lengths
        return chain_lengths(table, (1,) * config.gamma, bins=config.bins)


SPEC = CAPE()
ORDER = 3
