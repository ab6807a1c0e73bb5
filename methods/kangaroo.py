"""kangaroo: Kangaroo self-drafting: the target's first `exit_layer` layers plus an adapter draft
up to gamma tokens, stopping after the first whose confidence is <= eta; the verify forward runs
the remaining layers over the drafts' early features (costmodel.kangaroo)."""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import pandas as pd

from common.errors import InputError
from costmodel.cape import N_BINS
from costmodel.kangaroo import continue_probability, early_exit
from costmodel.step import DraftPart, StepShape, chain_width
from methods.config import Float, Int, MethodConfig, param
from methods.sd import MAX_DEPTH, chain_replay, chain_sampler, chain_tokens
from methods.spec import MethodSpec, PlotSpec

STEPS = tuple(range(1, 11))
ETAS = tuple(np.round(np.arange(0.0, 1.0, 0.05), 2))


@dataclass(frozen=True)
class KangarooConfig(MethodConfig):
    method = "kangaroo"
    exit_layer: int = param(Int("L", "early-exit layer the drafts read", low=1), 2)
    gamma: int = param(Int("g", "most draft steps", low=1, high=MAX_DEPTH), 6)
    eta: float = param(Float("eta", "stop drafting after a token with confidence <= eta"), 0.6)


class Kangaroo(MethodSpec):
    name, config, summary = "kangaroo", KangarooConfig, "shallow layers + adapter, early exit at eta"
    drafter_kinds = ("kangaroo",)
    decoder = "runtime.drafters.kangaroo:Kangaroo"
    calibration = ("kangaroo L2 g2 eta0.3", "kangaroo L2 g6 eta0.6", "kangaroo L2 g8 eta0")
    plot = PlotSpec(x="eta", hue="gamma")

    def space(self, setup, steps=STEPS, etas=ETAS):
        """The drafter's exit layer x steps x eta (eta = 0 only where confidence bins are not recorded)."""
        layer = int(setup.drafter_spec.get("exit_layer", KangarooConfig.exit_layer))
        if setup.acceptance.conf_bins is None:
            etas = (0.0,)
        rows = list(itertools.product((layer,), steps, etas))
        frame = pd.DataFrame(rows, columns=["exit_layer", "gamma", "eta"]).astype(
            {"exit_layer": np.int64, "gamma": np.int64, "eta": float})
        frame["config"] = [f"kangaroo L{l} g{g} eta{e:g}" for l, g, e in rows]
        return frame

    def _reach(self, setup, frame) -> tuple[np.ndarray, np.ndarray]:
        """(expected tokens, (C, gamma) probability that draft forward i runs)."""
        gamma = frame["gamma"].to_numpy(np.int64)
        eta = frame["eta"].to_numpy(float)
        tokens = np.empty(len(frame))
        reach = np.ones((len(frame), int(gamma.max())))
        chain = eta <= 0
        if chain.any():
            tokens[chain] = chain_tokens(setup, gamma[chain])
        if (~chain).any():
            conf = setup.need("conf_bins", self.name)
            _, cr = early_exit(conf.freq, conf.hit(1), eta[~chain][:, None], gamma[~chain][:, None],
                               new_tokens=setup.new_tokens)
            tokens[~chain] = cr[:, 0]
            go_on = (conf.freq * continue_probability(eta[~chain])).sum(axis=-1)
            reach[~chain] = go_on[:, None] ** np.arange(reach.shape[1])[None, :]
        return tokens, reach

    def expected_tokens(self, setup, frame):
        return self._reach(setup, frame)[0]

    def layer_share(self, setup, exit_layer) -> np.ndarray:
        n_layers = setup.target_layers
        layer = np.asarray(exit_layer, dtype=np.int64)
        if np.any((layer < 1) | (layer >= n_layers)):
            bad = int(layer[(layer < 1) | (layer >= n_layers)].reshape(-1)[0])
            raise InputError(f"kangaroo exit_layer must lie in 1..{n_layers - 1}, got {bad}")
        return layer / n_layers

    def step_shape(self, setup, frame):
        """Draft forward = shallow layers (their share of the target) + adapter, or the drafter's
        own `model` where the Profile prices it whole; verify = the remaining layers."""
        gamma = frame["gamma"].to_numpy(np.int64)
        share = self.layer_share(setup, frame["exit_layer"].to_numpy(np.int64))
        spec = setup.drafter_spec
        if spec.get("model"):
            parts = (DraftPart(spec["model"]),)
        else:
            adapter = spec.get("adapter_model")
            parts = (DraftPart(setup.target, share),) + ((DraftPart(adapter),) if adapter else ())
        _, reach = self._reach(setup, frame)
        width = chain_width(gamma, reach.shape[1])
        drafted = (reach * width).sum(axis=1)
        return StepShape(setup.target, drafted + 1.0, parts, width, reach, verify_scale=1.0 - share,
                         overhead_s=setup.overhead_s)

    def sampler(self, setup, config, acceptance_model="independent", **options):
        self.layer_share(setup, config.exit_layer)
        if config.eta > 0:
            from simulator.acceptance import EarlyExitSampler
            conf = setup.need("conf_bins", self.name)
            return EarlyExitSampler(config.gamma, continue_probability(config.eta, N_BINS), conf.freq, conf.hit(1))
        return chain_sampler(setup, config, config.gamma, acceptance_model=acceptance_model)

    def replay_lengths(self, table, config):
        return chain_replay(table, config.gamma, eta=config.eta)


SPEC = Kangaroo()
ORDER = 6
