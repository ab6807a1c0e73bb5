"""glide: GLIDE's drafter, which cross-attends to the target's KV cache: a chain like sd, or with
`bins` CAPE's expansion sets (GLIDE + CAPE)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from costmodel.step import DraftPart, StepShape, chain_width
from methods.cape import GAMMAS, bins_param, bins_space, expansion_sampler, expansion_tokens
from methods.config import Int, MethodConfig, param
from methods.engines import ENGINES
from methods.sd import MAX_DEPTH, chain_sampler, chain_tokens, drafter_model
from methods.spec import MethodSpec, PlotSpec, verdict


@dataclass(frozen=True)
class GLIDEConfig(MethodConfig):
    method = "glide"
    gamma: int = param(Int("g", "draft length", low=1, high=MAX_DEPTH), 4)
    bins: tuple | None = param(bins_param(optional=True), None)


class GLIDE(MethodSpec):
    name, config, summary = "glide", GLIDEConfig, "GLIDE drafter (reads the target's KV cache), chain or CAPE"
    drafter_kinds = ("glide",)

    def claims(self, evidence):
        """GLIDE beats a vanilla drafter of the same size (its Table 1): alpha of each GLIDE drafter
        against each draft model, per dataset."""
        table = evidence.acceptance.set_index(["dataset", "drafter"])["alpha"]
        return [f"GLIDE beats a vanilla drafter of the same size ({other}) on {dataset}: alpha "
                f"{table[dataset, glide]:.3f} vs {table[dataset, other]:.3f} -> "
                f"{verdict(table[dataset, glide] > table[dataset, other])}"
                for dataset in evidence.datasets for glide in evidence.drafters_of("glide")
                for other in evidence.drafters_of("draft_model") if (dataset, other) in table and (dataset, glide) in table]
    decoder = "runtime.drafters.glide:Glide"
    calibration = ("glide g2", "glide g4", "glide g8")
    batch_calibration = ("glide g1", "glide g3")
    campaign = ("glide g3", "glide g5")
    plot = PlotSpec(x="gamma", hue="bins_mean", labels={"bins_mean": "mean candidates per confidence bin"})
    no_counterpart = {engine: "no GLIDE drafter (cross-attention to the target's KV cache) can be loaded"
                      for engine in ENGINES}

    def drafters(self, arch):
        return {"glide": {"kind": "glide", "model": f"glide@{arch}", "file": "glide/glide.safetensors"}}

    def space(self, setup, gammas=GAMMAS, most_values: int = 5):
        """Plain chains, and CAPE's bin arrays where the acceptance entry has confidence bins."""
        g = np.asarray(gammas, dtype=np.int64)
        chains = pd.DataFrame({"gamma": g, "bins": [None] * len(g), "bins_mean": 1.0, "bins_max": 1})
        chains["config"] = self.config.labels(chains)
        if not setup.acceptance.has("conf_bins"):
            return chains
        return pd.concat([chains, bins_space(setup, self.config, gammas, most_values)], ignore_index=True)

    def _with_bins(self, frame) -> np.ndarray:
        return np.asarray([b is not None for b in frame["bins"]], dtype=bool) if "bins" in frame else \
            np.zeros(len(frame), dtype=bool)

    def expected_tokens(self, setup, frame):
        gamma = frame["gamma"].to_numpy(np.int64)
        tokens = chain_tokens(setup, gamma)
        cape = self._with_bins(frame)
        if cape.any():
            tokens[cape] = expansion_tokens(setup, frame[cape], self.name)[0]
        return tokens

    def step_shape(self, setup, frame):
        gamma = frame["gamma"].to_numpy(np.int64)
        verify = gamma + 1.0
        cape = self._with_bins(frame)
        dist = None
        if cape.any():               # chains verify gamma + 1 tokens; rows with bins a distribution
            _, verify[cape], (tokens, prob) = expansion_tokens(setup, frame[cape], self.name)
            width = max(tokens.shape[1], int(gamma.max()) + 2)
            dist_tokens = np.broadcast_to(1.0 + np.arange(width), (len(frame), width))
            dist_prob = np.zeros((len(frame), width))
            dist_prob[~cape, gamma[~cape]] = 1.0
            dist_prob[cape, : tokens.shape[1]] = prob
            dist = (dist_tokens, dist_prob)
        return StepShape(setup.target, verify, (DraftPart(drafter_model(setup)),), chain_width(gamma),
                         overhead_s=setup.overhead_s, verify_dist=dist)

    def sampler(self, setup, config, acceptance_model="independent", **options):
        if config.bins is not None:
            return expansion_sampler(setup, config, self.name)
        return chain_sampler(setup, config, config.gamma, acceptance_model=acceptance_model)

    def replay_rules(self, config):
        return {"levels": (1,) * config.gamma, "bins": config.bins}


SPEC = GLIDE()
ORDER = 4
