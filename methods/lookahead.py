"""lookahead: Lookahead decoding (Fu et al.): no drafter; one forward runs a window of W x (N-1)
Jacobi tokens and G candidate n-grams from the pool (costmodel.lookahead, Eq. 7)."""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from costmodel.lookahead import compression_ratio, expected_forward_tokens, fit_pool
from common.errors import InputError
from costmodel.step import StepShape
from methods.config import Flag, Int, MethodConfig, param
from methods.spec import MethodSpec, PlotSpec

WINDOWS = tuple(range(1, 21))
NGRAMS = tuple(range(2, 9))


@dataclass(frozen=True)
class NgramAcceptance:
    """The acceptance part of an entry: alpha (n-gram token acceptance), f (Eq. 7's scaling) and
    the pool's fill (mean stored n-grams matching the pending token; None: a full pool of G)."""

    alpha: float
    f: float
    pool: float | None = None

    def to_dict(self) -> dict[str, float]:
        return {"alpha": self.alpha, "f": self.f, **({} if self.pool is None else {"pool": self.pool})}


@dataclass(frozen=True)
class LookaheadConfig(MethodConfig):
    method = "lookahead"
    W: int = param(Int("W", "window size", low=1, high=256), 5)
    N: int = param(Int("N", "n-gram size", low=2, high=32), 3)
    G: int = param(Int("G", "candidate n-grams verified per step", low=1, high=256), 5)
    prompt_ngrams: bool = param(Flag("+prompt", "also take n-grams from the prompt", off=""), False)


def window_tokens(W, N, step):
    """The Jacobi window's query tokens at a prompt's `step` (0-based): it grows by a level of W
    per step until it holds N - 1 levels."""
    return np.asarray(W) * np.minimum(np.asarray(step) + 1, np.asarray(N) - 1)


class Lookahead(MethodSpec):
    name, config, summary = "lookahead", LookaheadConfig, "Jacobi window + n-gram pool, no drafter"
    needs = "lookahead"
    decoder = "runtime.engine.lookahead:Lookahead"
    calibration = ("lookahead W2 N3 G2", "lookahead W5 N3 G5", "lookahead W7 N4 G7")   # small windows too
    plot = PlotSpec(x="W", hue="N", y="G")

    def space(self, setup, windows=WINDOWS, ngrams=NGRAMS, prompt_ngrams=(False,)):
        """W x N x G in {1, W/2, W, 2W}; prompt n-grams off only (Eq. 7 does not model them)."""
        rows = [(w, n, g, p) for w, n, p in itertools.product(windows, ngrams, prompt_ngrams)
                for g in sorted({1, max(1, w // 2), w, 2 * w})]
        frame = pd.DataFrame(rows, columns=["W", "N", "G", "prompt_ngrams"])
        frame["tokens_per_forward"] = expected_forward_tokens(frame.N, frame.W, frame.G).astype(np.int64)
        frame["config"] = [LookaheadConfig(*r).label for r in rows]
        return frame

    def expected_tokens(self, setup, frame):
        la = setup.need("lookahead", self.name)
        n, w, g = (frame[c].to_numpy(np.int64) for c in ("N", "W", "G"))
        return compression_ratio(la.alpha, la.f, n, w, g)

    def step_shape(self, setup, frame):
        """One target forward of the window and the candidates the pool holds (a full pool of G
        where the Profile has no measured fill: the papers' profiles)."""
        pool = setup.acceptance.part(self.name).pool if setup.acceptance_key and setup.acceptance.has(self.name) else None
        n, w, g = (frame[c].to_numpy(np.int64) for c in ("N", "W", "G"))
        verify = expected_forward_tokens(n, w, g, pool)
        return StepShape(setup.target, verify, draft_width=np.zeros((len(frame), 0), dtype=np.int64),
                         overhead_s=setup.overhead_s)

    def sampler(self, setup, config, **options):
        from simulator.acceptance import NgramSampler
        la = setup.need("lookahead", self.name)
        verify = float(expected_forward_tokens(config.N, config.W, config.G, la.pool))
        return NgramSampler(config.G, config.N - 1, la.alpha, la.f, int(round(verify)))

    def acceptance_part(self, raw, where):
        if not isinstance(raw, dict) or "alpha" not in raw or "f" not in raw:
            raise InputError(f"{where}: {self.name} needs 'alpha' and 'f'")
        alpha, f, pool = raw["alpha"], raw["f"], raw.get("pool")
        for key, value, low, high in (("alpha", alpha, 0.0, 1.0), ("f", f, 1.0, math.inf), ("pool", pool, 0.0, 1e6)):
            if key == "pool" and value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
                raise InputError(f"{where}: {self.name}.{key} must be a number in [{low:g}, {high:g}], got {value!r}")
        return NgramAcceptance(float(alpha), float(f), None if pool is None else float(pool))

    def fit_steps(self, frame, *, dataset, temperature, source):
        """alpha and f (Eq. 7) from the measured S (mean tokens per step) of two or more (N, W, G)."""
        from costmodel.lookahead import fit_alpha_f

        rows = frame[frame["method"] == self.name]
        if rows.empty:
            raise InputError(f"{source}: no {self.name} steps")
        configs = rows["config"].map(self.parse)
        keys = configs.map(lambda c: (c.N, c.W, c.G))
        measured = rows.groupby(keys)["accepted"].agg(["mean", "size"])
        if len(measured) < 2:
            raise InputError(f"{source}: fitting alpha and f needs two or more (N, W, G) configurations, "
                             f"got {len(measured)}")
        n, w, g = (np.array([k[i] for k in measured.index]) for i in range(3))
        alpha, f, rms = fit_alpha_f(measured["mean"].to_numpy(), n, w, g)
        # the pool's fill: candidates verified per step = the step's query tokens beyond the window
        cands = (rows["verify_tokens"] - 1 - window_tokens(configs.map(lambda c: c.W), configs.map(lambda c: c.N),
                                                           rows["step"])) / (configs.map(lambda c: c.N) - 1)
        per_config = cands.groupby(keys).mean()
        pool = fit_pool(per_config.to_numpy(), np.array([k[2] for k in per_config.index]))
        return {"drafter": self.name, "temperature": float(temperature), "dataset": dataset, "alpha": float(alpha),
                self.name: {"alpha": float(alpha), "f": float(f), "pool": round(pool, 5)},
                "fit": {"rms_rel_error": float(rms),
                        "candidates_per_step": {f"N{a} W{b} G{c}": round(float(v), 4)
                                                for (a, b, c), v in per_config.items()},
                        "configs": [{"N": int(a), "W": int(b), "G": int(c), "S": float(v), "steps": int(z)}
                                    for (a, b, c), v, z in zip(measured.index, measured["mean"], measured["size"])]},
                "source": f"{source}: alpha, f fitted to measured S"}


SPEC = Lookahead()
ORDER = 5
