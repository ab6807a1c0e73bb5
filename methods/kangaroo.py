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
from methods.engines import HF_EARLY_EXIT, EngineConfig, hf_chain
from methods.sd import MAX_DEPTH, chain_sampler, chain_tokens
from methods.spec import MethodSpec, PlotSpec
from methods.draws import Sampler, StepDraws, first_failure

STEPS = tuple(range(1, 11))
ETAS = tuple(np.round(np.arange(0.0, 1.0, 0.05), 2))
EXIT_LAYER = 2              # the exit layer of the drafters the campaigns build and train


@dataclass(frozen=True)
class KangarooConfig(MethodConfig):
    method = "kangaroo"
    exit_layer: int = param(Int("L", "early-exit layer the drafts read", low=1), EXIT_LAYER)
    gamma: int = param(Int("g", "most draft steps", low=1, high=MAX_DEPTH), 6)
    eta: float = param(Float("eta", "stop drafting after a token with confidence <= eta"), 0.6)


class EarlyExitSampler(Sampler):
    """An early-exit chain: draft up to gamma positions, stop after the first one whose confidence
    falls below the threshold; the stopped position is still verified.

    A position's confidence bin b ~ freq (conf_bins); it goes on with probability cont[b] (the
    method's share of the bin above its threshold) and hits the target's top-1 with hit1[b]."""

    stateful = False

    def __init__(self, gamma: int, cont, freq, hit1):
        self.gamma = int(gamma)
        self.cum = np.cumsum(np.asarray(freq, dtype=float) / float(np.sum(freq)))
        self.hit1 = np.asarray(hit1, dtype=float)
        self.cont = np.asarray(cont, dtype=float)

    def draw(self, rng, n, state=None):
        g = self.gamma
        b = np.minimum(np.searchsorted(self.cum, rng.random((n, g)), side="right"), N_BINS - 1)
        confident = rng.random((n, g)) < self.cont[b]
        drafted = np.minimum(first_failure(confident) + 1, g)
        hits = rng.random((n, g)) < self.hit1[b]
        hits &= np.arange(g)[None, :] < drafted[:, None]
        accepted = first_failure(hits) + 1
        return StepDraws(accepted, drafted.astype(np.int64), drafted.astype(np.int64) + 1), None


class Kangaroo(MethodSpec):
    name, config, summary = "kangaroo", KangarooConfig, "shallow layers + adapter, early exit at eta"
    drafter_kinds = ("kangaroo",)
    decoder = "runtime.drafters.kangaroo:Kangaroo"
    calibration = ("kangaroo L2 g2 eta0.3", "kangaroo L2 g6 eta0.6", "kangaroo L2 g8 eta0")
    campaign = tuple(f"kangaroo L{EXIT_LAYER} g6 eta{eta}" for eta in (0.2, 0.4, 0.6, 0.8))
    plot = PlotSpec(x="eta", hue="gamma")
    no_counterpart = {"vllm": "no early-exit self-drafting with an adapter",
                      "sglang": "no early-exit self-drafting with an adapter"}

    def drafters(self, arch):
        return {"kangaroo": {"kind": "kangaroo", "exit_layer": EXIT_LAYER, "model": f"kangaroo-l{EXIT_LAYER}@{arch}",
                             "file": "kangaroo/kangaroo.safetensors"}}

    def space(self, setup, steps=STEPS, etas=ETAS):
        """The drafter's exit layer x steps x eta (eta = 0 only where confidence bins are not recorded)."""
        layer = setup.drafter_spec.exit_layer or KangarooConfig.exit_layer
        if setup.acceptance.conf_bins is None:
            etas = (0.0,)
        rows = list(itertools.product((layer,), steps, etas))
        frame = pd.DataFrame(rows, columns=["exit_layer", "gamma", "eta"]).astype(
            {"exit_layer": np.int64, "gamma": np.int64, "eta": float})
        frame["config"] = self.config.labels(frame)
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
        if spec.model:
            parts = (DraftPart(spec.model),)
        else:
            adapter = spec.adapter_model
            parts = (DraftPart(setup.target, share),) + ((DraftPart(adapter),) if adapter else ())
        _, reach = self._reach(setup, frame)
        width = chain_width(gamma, reach.shape[1])
        drafted = (reach * width).sum(axis=1)
        return StepShape(setup.target, drafted + 1.0, parts, width, reach, verify_scale=1.0 - share,
                         overhead_s=setup.overhead_s)

    def sampler(self, setup, config, acceptance_model="independent", **options):
        self.layer_share(setup, config.exit_layer)
        if config.eta > 0:
            conf = setup.need("conf_bins", self.name)
            return EarlyExitSampler(config.gamma, continue_probability(config.eta, N_BINS), conf.freq, conf.hit(1))
        return chain_sampler(setup, config, config.gamma, acceptance_model=acceptance_model)

    def replay_rules(self, config):
        return {"levels": (1,) * config.gamma, "eta": config.eta}

    def to_engine(self, engine, setup, config):
        if engine != "hf":
            return super().to_engine(engine, setup, config)
        # the target drafts for itself: transformers reads the draft length and threshold from the
        # target's generation_config, and keeps the threshold fixed (it adapts it only for a separate assistant)
        return EngineConfig("hf", {"assistant_early_exit": config.exit_layer}, "approximate",
                            "transformers drafts with the target's own LM head on the exit layer's features "
                            "(no Kangaroo adapter) and verifies with a full forward",
                            requires=HF_EARLY_EXIT, generation_config={"target": hf_chain(config.gamma, config.eta)})


SPEC = Kangaroo()
ORDER = 6
