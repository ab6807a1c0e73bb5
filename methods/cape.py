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
from methods.sd import MAX_DEPTH, chain_betas, drafter_model, own_kv
from methods.engines import ENGINES
from methods.spec import MethodSpec, PlotSpec, verdict
from methods.draws import Sampler, StepDraws, first_failure

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


def measured_chain(setup, gamma: np.ndarray) -> np.ndarray | None:
    """The chain's own per-position acceptance where the entry records chains of each length (a
    greedy TokenTrace: `methods.sd.chain_betas`), else None (every position at the bins' h1)."""
    return chain_betas(setup.acceptance, gamma) if setup.acceptance.alpha_by_position_at_gamma else None


def expansion_tokens(setup, frame, method: str) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """(expected tokens, verified tokens, their distribution) of CAPE steps: 1 + hS sum_i h1^(i-1)
    (or on the measured chain, `costmodel.cape.cape_expected_tokens`); 1 + gamma E[S]; 1 + the sum
    of gamma independent S[bin]."""
    conf = setup.need("conf_bins", method)
    gamma = frame["gamma"].to_numpy(np.int64)
    bins = bin_matrix(frame)
    hits = {int(k): v for k, v in conf.topk_hit.items()}
    tokens = cape_expected_tokens(bins, conf.freq, hits, gamma, new_tokens=setup.new_tokens,
                                  chain=measured_chain(setup, gamma))
    return tokens, 1.0 + cape_verify_tokens(bins, conf.freq, gamma), cape_verify_distribution(bins, conf.freq, gamma)


class CapeSampler(Sampler):
    """CAPE on a chain of gamma: each position's confidence bin b ~ freq sets an expansion set of
    S[b] top-ranked tokens. Top-1 hits continue the chain; a miss whose target token is inside the
    expansion set commits that token and ends the step; otherwise the step ends at the miss. With
    a measured `chain` (beta_1..beta_gamma) position i's top-1 rates by bin average beta_i (`_rates_at`)."""

    stateful = False

    def __init__(self, gamma: int, bins: list[int], freq, topk_hit: dict[int, np.ndarray], chain=None):
        self.gamma = int(gamma)
        self.bins = np.asarray(bins, dtype=np.int64)          # checked by the config's Param
        self.freq = np.asarray(freq, dtype=float) / float(np.sum(freq))
        self.cum = np.cumsum(self.freq)
        hit1 = np.asarray(topk_hit[1], dtype=float)
        # P(target in top-S[b] | bin b), looked up per bin at the configured expansion size
        hit_s = np.array([_topk_hit_at(topk_hit, int(self.bins[b]), b) for b in range(N_BINS)])
        self.p_exp_given_miss = np.where(hit1 < 1, (hit_s - hit1) / np.maximum(1 - hit1, 1e-12), 0.0)
        self.top1 = np.tile(hit1, (self.gamma, 1)) if chain is None else _rates_at(hit1, self.freq, chain[: self.gamma])

    def draw(self, rng, n, state=None):
        g = self.gamma
        b = np.minimum(np.searchsorted(self.cum, rng.random((n, g)), side="right"), N_BINS - 1)
        top1 = rng.random((n, g)) < self.top1[np.arange(g)[None, :], b]
        k = first_failure(top1)
        miss_bin = b[np.arange(n), np.minimum(k, g - 1)]
        saved = (k < g) & (rng.random(n) < self.p_exp_given_miss[miss_bin])
        accepted = k + 1 + saved
        verify = 1 + (self.bins[b]).sum(axis=1)
        return StepDraws(accepted.astype(np.int64), np.full(n, g, dtype=np.int64), verify.astype(np.int64)), None


def _rates_at(hit1: np.ndarray, freq: np.ndarray, chain) -> np.ndarray:
    """(gamma, bins) top-1 rates by bin whose mean over the bins is each position's beta_i: the
    bins' hits scaled down to it, or their misses scaled down to its miss (no rate passes 1)."""
    beta = np.asarray(chain, dtype=float)[:, None]
    mean = float(freq @ hit1)
    lower = hit1[None, :] * np.divide(beta, mean, out=np.ones_like(beta), where=mean > 0)
    higher = 1.0 - (1.0 - hit1[None, :]) * np.divide(1.0 - beta, 1.0 - mean, out=np.zeros_like(beta), where=mean < 1)
    return np.where(beta <= mean, lower, higher)


def _topk_hit_at(topk_hit: dict[int, np.ndarray], k: int, b: int) -> float:
    """P(target in the drafter's top-k | bin b); between recorded k, the largest recorded k <= k."""
    known = sorted(topk_hit)
    usable = [kk for kk in known if kk <= k]
    return float(np.asarray(topk_hit[usable[-1]])[b])


def expansion_sampler(setup, config, method: str):
    conf = setup.need("conf_bins", method)
    chain = measured_chain(setup, np.array([config.gamma]))
    return CapeSampler(config.gamma, list(config.bins), conf.freq, conf.topk_hit,
                       chain=None if chain is None else chain[0])


def bins_space(setup, config_class, gammas=GAMMAS, most_values: int = 5) -> pd.DataFrame:
    """gamma x every non-increasing bin array over the candidate counts the acceptance entry
    records top-K hits for (CAPE's space; GLIDE's with bins)."""
    recorded = sorted(int(k) for k in setup.need("conf_bins", config_class.method).topk_hit)
    arrays = nonincreasing_arrays(N_BINS, tuple(recorded[:most_values]))
    g = np.repeat(np.asarray(gammas, dtype=np.int64), len(arrays))
    s = np.tile(arrays, (len(gammas), 1))
    frame = pd.DataFrame({"gamma": g, "bins": [tuple(int(v) for v in row) for row in s],
                          "bins_mean": s.mean(axis=1), "bins_max": s.max(axis=1)})
    frame["config"] = config_class.labels(frame)
    return frame


class CAPE(MethodSpec):
    name, config, summary = "cape", CAPEConfig, "chain + confidence-aware expansion sets"
    drafter_kinds = ("draft_model",)      # on a GLIDE drafter it is method glide with bins

    def claims(self, evidence):
        """Acceptance rises with the drafter's confidence (GLIDE Fig. 1b, CAPE's premise): each draft
        model's top-1 hit by confidence decile, per dataset."""
        lines = []
        for dataset in evidence.datasets:
            for drafter in evidence.drafters_of("draft_model"):
                keys = evidence.profile.acceptance_for(drafter, temperature=0.0, dataset=dataset, needs="conf_bins")
                bins = evidence.profile.acceptance_model(keys[0]).conf_bins if keys else None
                if bins is None or 1 not in bins.topk_hit:
                    continue
                hit, filled = bins.hit(1), bins.freq > 0.005
                low, high = hit[filled][: filled.sum() // 2], hit[filled][filled.sum() // 2:]
                corr = float(np.corrcoef(np.arange(hit.size)[filled], hit[filled])[0, 1]) if filled.sum() > 2 else float("nan")
                lines.append(f"acceptance rises with the drafter's confidence (GLIDE Fig. 1b, {drafter}, {dataset}): top-1 "
                             "hit by confidence decile " + " ".join(f"{h:.2f}" if f else "-" for h, f in zip(hit, filled))
                             + f"; correlation {corr:.2f}, lower-half mean {low.mean():.2f} vs upper-half "
                             f"{high.mean():.2f} -> {verdict(corr > 0.5)}")
        return lines
    needs = "conf_bins"
    decoder = "runtime.engine.cape:CAPE"
    calibration = ("cape g2 S88886666442", "cape g4 S88886666442", "cape g8 S88886666442")
    batch_calibration = ("cape g1 S44442222111",)
    campaign = ("cape g3 S88886666442", "cape g5 S88886666442", "cape g4 S44444444444")
    plot = PlotSpec(x="gamma", hue="bins_mean", labels={"bins_mean": "mean candidates per confidence bin"})
    no_counterpart = {engine: "CAPE's confidence-dependent candidate sets are not offered" for engine in ENGINES}

    def space(self, setup, gammas=GAMMAS, most_values: int = 5):
        return bins_space(setup, self.config, gammas, most_values)

    def expected_tokens(self, setup, frame):
        return expansion_tokens(setup, frame, self.name)[0]

    def step_shape(self, setup, frame):
        gamma = frame["gamma"].to_numpy(np.int64)
        _, verify, dist = expansion_tokens(setup, frame, self.name)
        return StepShape(setup.target, verify, (DraftPart(drafter_model(setup)),), chain_width(gamma),
                         overhead_s=setup.overhead_s, draft_kv_model=own_kv(setup), verify_dist=dist)

    def sampler(self, setup, config, **options):
        return expansion_sampler(setup, config, self.name)

    def replay_rules(self, config):
        return {"levels": (1,) * config.gamma, "bins": config.bins}


SPEC = CAPE()
ORDER = 3
