"""ar: plain autoregressive decoding with the target, one token per step (every method's baseline)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from costmodel.step import StepShape
from methods.config import MethodConfig
from methods.draws import AutoregressiveSampler
from methods.spec import MethodSpec


@dataclass(frozen=True)
class ARConfig(MethodConfig):
    method = "ar"


class AR(MethodSpec):
    name, config, summary = "ar", ARConfig, "plain decoding: one target forward per token"
    decoder = "runtime.engine.ar:AR"
    sweep = False

    def expected_tokens(self, setup, frame):
        return np.ones(len(frame))

    def step_shape(self, setup, frame):
        return StepShape(setup.target, np.ones(len(frame)), overhead_s=setup.overhead_s)

    def sampler(self, setup, config, **options):
        return AutoregressiveSampler()


SPEC = AR()
ORDER = 0
