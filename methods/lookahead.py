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
from methods.engines import HF_PROMPT_LOOKUP, EngineConfig, sglang_requires, vllm_requires
from methods.spec import MethodSpec, PlotSpec
from methods.draws import Sampler, StepDraws, check_prob, first_failure
from costmodel.lookahead import collected_ngrams, hit_probability, prefix_tail

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


class NgramSampler(Sampler):
    """Candidate n-grams verified in one forward, no draft forward (Fu et al. Eq. 5 + Eq. 7): with
    probability 1/f a step holds `candidates` n-grams of `length` tokens, each token accepted with
    alpha independently, and commits 1 + the longest accepted prefix; otherwise it commits one
    token. The verify forward carries `verify_tokens` query tokens."""

    stateful = False

    def __init__(self, candidates: int, length: int, alpha: float, f: float, verify_tokens: int):
        self.candidates, self.length = int(candidates), int(length)
        self.alpha = check_prob(alpha, "n-gram alpha")
        if not f >= 1:
            raise InputError(f"n-gram f must be >= 1, got {f!r}")
        self.f = float(f)
        self.verify = int(verify_tokens)
        self.fixed_shape = (0, self.verify)

    def draw(self, rng, n, state=None):
        g, k = self.length, self.candidates
        hits = rng.random((n, k, g)) < self.alpha
        longest = first_failure(hits.reshape(n * k, g)).reshape(n, k).max(axis=1) if g else np.zeros(n, dtype=np.int64)
        good = rng.random(n) < 1.0 / self.f
        accepted = 1 + np.where(good, longest, 0)
        return StepDraws(accepted.astype(np.int64), np.zeros(n, dtype=np.int64), np.full(n, self.verify, dtype=np.int64)), None


class PoolSampler(Sampler):
    """Lookahead under the pool's growth (costmodel.lookahead): at a sequence's step t the pool
    holds W max(0, t - N + 2) n-grams, the step finds candidates with the hit probability they
    give, verifies K = min(G, 1 + Poisson(pool)) of them and commits 1 + the longest accepted
    prefix (alpha, then alpha_next per token; Eq. 5's tail with b = 1 + spread (K - 1)). The state is each sequence's step index;
    the query tokens follow the window's levels and the candidates."""

    stateful = True
    fixed_shape = None          # the verify forward grows with the window and the candidates

    def __init__(self, w: int, n: int, g: int, model):
        self.w, self.n, self.g, self.model = int(w), int(n), int(g), model

    def initial_state(self, n: int) -> np.ndarray:
        return np.zeros(n, dtype=np.int64)

    def draw(self, rng, n, state=None):
        step = self.initial_state(n) if state is None else np.asarray(state, dtype=np.int64)
        return self.at(rng, step), step + 1

    def stream(self, rng, n_steps, done, state=None):
        """The sequence's next n_steps step indices."""
        return self.at(rng, np.arange(done, done + n_steps, dtype=np.int64)), state

    def at(self, rng: np.random.Generator, step: np.ndarray) -> StepDraws:
        """One draw per entry of `step` (the step index of a sequence)."""
        m, size = self.model, step.size
        found = rng.random(size) < hit_probability(m.hit, m.fill, collected_ngrams(self.n, self.w, step))
        cands = np.where(found, np.minimum(self.g, 1 + rng.poisson(m.pool, size)), 0)
        tail = prefix_tail(m, self.n - 1, np.maximum(cands, 1))
        longest = np.where(found, (rng.random(size)[:, None] < tail).sum(axis=1), 0)
        verify = 1 + self.w * np.minimum(step + 1, self.n - 1) + cands * (self.n - 1)
        return StepDraws((1 + longest).astype(np.int64), np.zeros(size, dtype=np.int64), verify.astype(np.int64))


class Lookahead(MethodSpec):
    name, config, summary = "lookahead", LookaheadConfig, "Jacobi window + n-gram pool, no drafter"
    needs = "lookahead"
    decoder = "runtime.engine.lookahead:Lookahead"
    calibration = ("lookahead W2 N3 G2", "lookahead W5 N3 G5", "lookahead W7 N4 G7", "lookahead W10 N6 G5",
                   "lookahead W4 N8 G4")
    campaign = ("lookahead W5 N3 G5", "lookahead W7 N4 G7", "lookahead W15 N5 G15")
    plot = PlotSpec(x="W", hue="N", y="G")

    def drafters(self, arch):
        return {self.name: {"kind": self.name}}        # no model: the entry holds its own acceptance

    def space(self, setup, windows=WINDOWS, ngrams=NGRAMS, prompt_ngrams=(False,)):
        """W x N x G in {1, W/2, W, 2W}; prompt n-grams off only (Eq. 7 does not model them)."""
        rows = [(w, n, g, p) for w, n, p in itertools.product(windows, ngrams, prompt_ngrams)
                for g in sorted({1, max(1, w // 2), w, 2 * w})]
        frame = pd.DataFrame(rows, columns=["W", "N", "G", "prompt_ngrams"])
        frame["tokens_per_forward"] = expected_forward_tokens(frame.N, frame.W, frame.G).astype(np.int64)
        frame["config"] = self.config.labels(frame)
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
        la = setup.need("lookahead", self.name)
        if la.grows:
            return PoolSampler(config.W, config.N, config.G, la)
        verify = float(expected_forward_tokens(config.N, config.W, config.G, la.pool))
        return NgramSampler(config.G, config.N - 1, la.alpha, la.f, int(round(verify)))

    def to_engine(self, engine, setup, config):
        """The engines' n-gram drafters, matched on the pending token alone as Lookahead's pool is
        keyed (a window of exactly one token)."""
        window = (f"Lookahead's Jacobi window (W={config.W}) and its {config.G} pooled candidates have no "
                  "counterpart")
        if engine == "vllm":
            return EngineConfig("vllm", {"method": "ngram", "num_speculative_tokens": config.N - 1,
                                         "prompt_lookup_min": 1, "prompt_lookup_max": 1}, "approximate",
                                "vLLM's ngram proposes one continuation of the pending token matched in the "
                                f"request's own context; {window}", requires=vllm_requires("ngram"))
        if engine == "sglang":
            return EngineConfig("sglang", {"--speculative-algorithm": "NGRAM",
                                           "--speculative-num-draft-tokens": config.G * (config.N - 1) + 1,
                                           "--speculative-ngram-min-match-window-size": 1,
                                           "--speculative-ngram-max-match-window-size": 1,
                                           "--speculative-ngram-max-bfs-breadth": config.G}, "approximate",
                                "SGLang's NGRAM fills its cache from generated tokens, not from a Jacobi window "
                                f"(W={config.W} has no counterpart); G candidates of N-1 tokens become its BFS "
                                "breadth and draft tokens", requires=sglang_requires("NGRAM"))
        return EngineConfig("hf", {"prompt_lookup_num_tokens": config.N - 1, "max_matching_ngram_size": 1},
                            "approximate", f"prompt lookup proposes one continuation matched in the input; {window}",
                            requires=HF_PROMPT_LOOKUP)

    def acceptance_part(self, raw, where, part=None):
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
