"""lookahead: Lookahead decoding (Fu et al.): no drafter; one forward runs a window of W x (N-1)
Jacobi tokens and G candidate n-grams from the pool (costmodel.lookahead, Eq. 7)."""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import pandas as pd

from costmodel.lookahead import compression_ratio
from costmodel.step import StepShape
from methods.config import Flag, Int, MethodConfig, param
from methods.spec import MethodSpec, PlotSpec, register

WINDOWS = tuple(range(1, 21))
NGRAMS = tuple(range(2, 9))


@dataclass(frozen=True)
class LookaheadConfig(MethodConfig):
    method = "lookahead"
    W: int = param(Int("W", "window size", low=1, high=256), 5)
    N: int = param(Int("N", "n-gram size", low=2, high=32), 3)
    G: int = param(Int("G", "candidate n-grams verified per step", low=1, high=256), 5)
    prompt_ngrams: bool = param(Flag("+prompt", "also take n-grams from the prompt", off=""), False)


def forward_tokens(W, N, G):
    """Query tokens of one lookahead forward: (W + G)(N - 1) + 1."""
    return (np.asarray(W) + np.asarray(G)) * (np.asarray(N) - 1) + 1


class Lookahead(MethodSpec):
    name, config, summary = "lookahead", LookaheadConfig, "Jacobi window + n-gram pool, no drafter"
    needs = "lookahead"
    decoder = "runtime.engine.lookahead:Lookahead"
    plot = PlotSpec(x="W", hue="N", y="G")

    def space(self, setup, windows=WINDOWS, ngrams=NGRAMS, prompt_ngrams=(False,)):
        """W x N x G in {1, W/2, W, 2W}; prompt n-grams off only (Eq. 7 does not model them)."""
        rows = [(w, n, g, p) for w, n, p in itertools.product(windows, ngrams, prompt_ngrams)
                for g in sorted({1, max(1, w // 2), w, 2 * w})]
        frame = pd.DataFrame(rows, columns=["W", "N", "G", "prompt_ngrams"])
        frame["tokens_per_forward"] = forward_tokens(frame.W, frame.N, frame.G)
        frame["config"] = [LookaheadConfig(*r).label for r in rows]
        return frame

    def expected_tokens(self, setup, frame):
        la = setup.need("lookahead", self.name)
        n, w, g = (frame[c].to_numpy(np.int64) for c in ("N", "W", "G"))
        return compression_ratio(la.alpha, la.f, n, w, g)

    def step_shape(self, setup, frame):
        verify = forward_tokens(*(frame[c].to_numpy(np.int64) for c in ("W", "N", "G"))).astype(float)
        return StepShape(setup.target, verify, draft_width=np.zeros((len(frame), 0), dtype=np.int64),
                         overhead_s=setup.overhead_s)

    def sampler(self, setup, config, **options):
        from simulator.acceptance import LookaheadSampler
        la = setup.need("lookahead", self.name)
        return LookaheadSampler(config.W, config.N, config.G, la.alpha, la.f)


SPEC = register(Lookahead())
