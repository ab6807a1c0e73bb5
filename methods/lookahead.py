"""lookahead: Lookahead decoding (Fu et al.): no drafter; one forward runs a window of W x (N-1)
Jacobi tokens and G candidate n-grams from the pool (costmodel.lookahead, Eq. 7)."""
from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from costmodel.lookahead import (compression_ratio, expected_forward_tokens, fit_pool_growth,
                                 pool_trajectory)
from common.errors import InputError
from costmodel.step import StepShape
from methods.config import Flag, Int, MethodConfig, param
from methods.spec import MethodSpec, PlotSpec

WINDOWS = tuple(range(1, 21))
NGRAMS = tuple(range(2, 9))


@dataclass(frozen=True)
class NgramAcceptance:
    """The acceptance part of an entry, one of two models (costmodel.lookahead). Eq. 7 (the
    papers' profiles): alpha (n-gram token acceptance), f (steps per good speculation) and the
    pool's fill (mean stored n-grams matching the pending token; None: a full pool of G). The
    pool's growth (`hit` set; fitted on the engine's steps): alpha and alpha_next (a candidate's
    first token, and each later one given those before), spread (how independent the candidates
    are), hit and fill (P(any candidate) against n-grams collected), pool (candidates beyond the
    first, Poisson mean)."""

    alpha: float
    f: float | None = None
    pool: float | None = None
    hit: float | None = None
    fill: float | None = None
    spread: float | None = None
    alpha_next: float | None = None

    @property
    def grows(self) -> bool:
        return self.hit is not None

    def to_dict(self) -> dict[str, float]:
        return {k: v for k, v in (("alpha", self.alpha), ("alpha_next", self.alpha_next), ("f", self.f), ("pool", self.pool),
                                   ("hit", self.hit), ("fill", self.fill), ("spread", self.spread)) if v is not None}


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


def trajectory(la: NgramAcceptance, n, w, g, new_tokens):
    """`costmodel.lookahead.pool_trajectory`, computed once for a space's tokens and its step shape
    (scoring asks both of the same configurations)."""
    arrays = [np.ascontiguousarray(a, dtype=np.int64) for a in (n, w, g)]
    return _trajectory(la, *(a.tobytes() for a in arrays), new_tokens)


@functools.lru_cache(maxsize=4)
def _trajectory(la, n, w, g, new_tokens):
    tokens, grid, prob = pool_trajectory(la, *(np.frombuffer(a, dtype=np.int64) for a in (n, w, g)), new_tokens)
    for a in (tokens, grid, prob):
        a.flags.writeable = False           # shared between callers
    return tokens, grid, prob


class Lookahead(MethodSpec):
    name, config, summary = "lookahead", LookaheadConfig, "Jacobi window + n-gram pool, no drafter"
    needs = "lookahead"
    decoder = "runtime.engine.lookahead:Lookahead"
    calibration = ("lookahead W2 N3 G2", "lookahead W5 N3 G5", "lookahead W7 N4 G7", "lookahead W10 N6 G5",
                   "lookahead W4 N8 G4")
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
        if la.grows:
            return trajectory(la, n, w, g, setup.new_tokens)[0]
        return compression_ratio(la.alpha, la.f, n, w, g)

    def step_shape(self, setup, frame):
        """One target forward of the window and the candidates the pool holds (a full pool of G
        where the Profile has no measured fill: the papers' profiles; the pool's growth over the
        generation where it has a fitted one, priced over its distribution of verify sizes)."""
        la = setup.acceptance.part(self.name) if setup.acceptance_key and setup.acceptance.has(self.name) else None
        n, w, g = (frame[c].to_numpy(np.int64) for c in ("N", "W", "G"))
        dist = None
        if la is not None and la.grows:
            _, grid, prob = trajectory(la, n, w, g, setup.new_tokens)
            verify, dist = prob @ grid, (np.broadcast_to(grid, prob.shape), prob)
        else:
            verify = expected_forward_tokens(n, w, g, None if la is None else la.pool)
        return StepShape(setup.target, verify, draft_width=np.zeros((len(frame), 0), dtype=np.int64),
                         overhead_s=setup.overhead_s, verify_dist=dist)

    def sampler(self, setup, config, **options):
        from simulator.acceptance import NgramSampler, PoolSampler
        la = setup.need("lookahead", self.name)
        if la.grows:
            return PoolSampler(config.W, config.N, config.G, la)
        verify = float(expected_forward_tokens(config.N, config.W, config.G, la.pool))
        return NgramSampler(config.G, config.N - 1, la.alpha, la.f, int(round(verify)))

    def acceptance_part(self, raw, where):
        grows = isinstance(raw, dict) and "hit" in raw
        needed = ("alpha", "alpha_next", "spread", "hit", "fill", "pool") if grows else ("alpha", "f")
        if not isinstance(raw, dict) or any(k not in raw for k in needed):
            raise InputError(f"{where}: {self.name} needs {', '.join(repr(k) for k in needed)}")
        bounds = {"alpha": (0.0, 1.0), "alpha_next": (0.0, 1.0), "f": (1.0, math.inf), "pool": (0.0, 1e6), "hit": (0.0, 1.0),
                  "fill": (1e-9, math.inf), "spread": (0.0, 1.0)}
        for key, (low, high) in bounds.items():
            value = raw.get(key)
            if value is None and key not in needed:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
                raise InputError(f"{where}: {self.name}.{key} must be a number in [{low:g}, {high:g}], got {value!r}")
        return NgramAcceptance(**{k: float(raw[k]) for k in bounds if raw.get(k) is not None})

    def fit_steps(self, frame, *, dataset, temperature, source):
        """The pool-growth model (costmodel.lookahead.fit_pool_growth) from every measured step of
        two or more (N, W, G): the candidates a step verified are its query tokens beyond the window."""
        rows = frame[frame["method"] == self.name]
        if rows.empty:
            raise InputError(f"{source}: no {self.name} steps")
        configs = rows["config"].map(self.parse)
        n, w, g = (configs.map(lambda c, k=k: getattr(c, k)).to_numpy(np.int64) for k in ("N", "W", "G"))
        keys = pd.Series(list(zip(n, w, g)), index=rows.index)
        if keys.nunique() < 2:
            raise InputError(f"{source}: fitting the pool needs two or more (N, W, G) configurations, "
                             f"got {keys.nunique()}")
        step = rows["step"].to_numpy(np.int64)
        cands = (rows["verify_tokens"].to_numpy(float) - 1 - window_tokens(w, n, step)) / (n - 1)
        try:
            model = fit_pool_growth(n, w, g, step, cands, rows["accepted"].to_numpy(float))
        except ValueError as exc:
            raise InputError(f"{source}: {exc}") from None
        fitted = NgramAcceptance(**model)
        measured = rows.groupby(keys)["accepted"].agg(["mean", "size"])
        predicted = {(a, b, c): float(pool_trajectory(fitted, a, b, c)[0][0]) for a, b, c in measured.index}
        return {"drafter": self.name, "temperature": float(temperature), "dataset": dataset, "alpha": model["alpha"],
                self.name: {k: round(v, 5) for k, v in model.items()},
                "fit": {"model": "pool growth (costmodel.lookahead)",
                        "hit_share": round(float(np.mean(cands > 0.5)), 4),
                        "configs": [{"N": int(a), "W": int(b), "G": int(c), "S": float(v), "steps": int(z),
                                     "S_steady_state": round(predicted[(a, b, c)], 4)}
                                    for (a, b, c), v, z in zip(measured.index, measured["mean"], measured["size"])]},
                "source": f"{source}: the pool's growth fitted to every measured step"}


SPEC = Lookahead()
ORDER = 5
