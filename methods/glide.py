"""glide: GLIDE's drafter, which cross-attends to the target's KV cache: a chain like sd, or with
`bins` CAPE's expansion sets (GLIDE + CAPE)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from costmodel.step import DraftPart, StepShape, chain_width
from methods.cape import bins_param, expansion_sampler, expansion_tokens
from methods.config import Int, MethodConfig, param
from methods.sd import MAX_DEPTH, chain_replay, chain_sampler, chain_tokens, drafter_model
from methods.spec import MethodSpec, PlotSpec, register


@dataclass(frozen=True)
class GLIDEConfig(MethodConfig):
    method = "glide"
    gamma: int = param(Int("g", "draft length", low=1, high=MAX_DEPTH), 4)
    bins: tuple | None = param(bins_param(optional=True), None)


class GLIDE(MethodSpec):
    name, config, summary = "glide", GLIDEConfig, "GLIDE drafter (reads the target's KV cache), chain or CAPE"
    drafter_kinds = ("glide",)
    decoder = "runtime.drafters.methods:Glide"
    plot = PlotSpec(x="gamma")
    sweep = False     # the sweep scores GLIDE drafters through sd-like chains in cape's space

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
        if cape.any():
            verify[cape] = expansion_tokens(setup, frame[cape], self.name)[1]
        return StepShape(setup.target, verify, (DraftPart(drafter_model(setup)),), chain_width(gamma),
                         overhead_s=setup.overhead_s)

    def sampler(self, setup, config, acceptance_model="independent", **options):
        if config.bins is not None:
            return expansion_sampler(setup, config, self.name)
        return chain_sampler(setup, config, config.gamma, acceptance_model=acceptance_model)

    def replay_lengths(self, table, config):
        return chain_replay(table, config.gamma, **({} if config.bins is None else {"bins": config.bins}))


SPEC = register(GLIDE())
