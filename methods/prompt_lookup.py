"""prompt_lookup: prompt-lookup decoding, no drafter: the context's last n tokens (the longest n in
n_min..n_max that occurred before) are matched against the prompt and what was generated, and the
up to gamma tokens that followed their earliest occurrence are verified as one chain (vLLM's
`ngram` with `prompt_lookup_min/max`, SGLang's `NGRAM`, transformers' `prompt_lookup_num_tokens`).

Acceptance is a part of its own (`MatchAcceptance`), fitted on the method's StepTraces: a step
finds a match of length >= n with probability hit * ((1 - tail) decay^(n - 1) + tail) (chance
matches die out geometrically, a share `tail` of them are copies that go on); given its length m
(n_min..n_max), the first proposed token is accepted with alpha_long - (alpha_long - alpha) *
gain^(m - 1) (a longer match predicts better) and each later one, given the one before, with
alpha_next. A step without a match verifies the pending token alone; one with a match verifies it
and its gamma proposals (`step_shape` prices that distribution). A match whose first occurrence
ends fewer than gamma tokens before the context's end proposes fewer; the fit reads each step's
own proposals, the closed form takes every proposal as gamma long.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from common.errors import InputError
from costmodel.leviathan import generation_tokens
from costmodel.step import StepShape
from methods.config import Int, MethodConfig, param
from methods.draws import Sampler, StepDraws
from methods.engines import HF_PROMPT_LOOKUP, EngineConfig, sglang_requires, vllm_requires
from methods.spec import MethodSpec, PlotSpec

GAMMAS = tuple(range(1, 11))          # the sweep's draft lengths
NGRAMS = tuple(range(1, 7))           # the sweep's match lengths
PARAMETERS = ("hit", "decay", "tail", "alpha", "alpha_long", "gain", "alpha_next")


@dataclass(frozen=True)
class PromptLookupConfig(MethodConfig):
    method = "prompt_lookup"
    gamma: int = param(Int("g", "tokens proposed after a match", low=1, high=64), 4)
    n_min: int = param(Int("nmin", "shortest n-gram matched", low=1, high=32), 1)
    n_max: int = param(Int("nmax", "longest n-gram matched (the longest that matches is used)", low=1, high=32), 3)

    def validate(self):
        if self.n_min > self.n_max:
            raise InputError(f"prompt_lookup: n_min ({self.n_min}) exceeds n_max ({self.n_max})")


@dataclass(frozen=True)
class MatchAcceptance:
    """The method's part of a Profile acceptance entry (module docstring), each a probability."""

    hit: float
    decay: float
    tail: float
    alpha: float
    alpha_long: float
    gain: float
    alpha_next: float

    def to_dict(self) -> dict[str, float]:
        return {k: getattr(self, k) for k in PARAMETERS}

    def matches(self, n_min, n_max) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(P(a match), m (M,), P(m | a match) (C, M)) of configurations with these n-gram bounds:
        the longest match at least n_min long, capped at n_max."""
        n_min, n_max = np.broadcast_arrays(np.atleast_1d(np.asarray(n_min, np.int64)),
                                           np.atleast_1d(np.asarray(n_max, np.int64)))
        m = np.arange(1, int(n_max.max()) + 1)
        at_least = self.hit * ((1 - self.tail) * self.decay ** (m - 1.0) + self.tail)   # P(longest match >= m)
        exact = np.where(m[None, :] < n_max[:, None], (at_least - np.append(at_least[1:], 0.0))[None, :],
                         at_least[None, :])                          # m = n_max takes every longer match
        exact = exact * ((m[None, :] >= n_min[:, None]) & (m[None, :] <= n_max[:, None]))
        found = at_least[n_min - 1]
        return found, m, exact / np.maximum(found[:, None], 1e-300)

    def first(self, m) -> np.ndarray:
        """P(the first proposed token is accepted | a match of length m)."""
        return self.alpha_long - (self.alpha_long - self.alpha) * self.gain ** (np.asarray(m, float) - 1.0)

    def reach(self, n_min, n_max, gamma) -> np.ndarray:
        """(C, max gamma) P(a step accepts more than i proposals), i = 0..: a match, then a chain."""
        found, m, weight = self.matches(n_min, n_max)
        gamma = np.atleast_1d(np.asarray(gamma, np.int64))
        first = (weight * self.first(m)[None, :]).sum(axis=1)
        i = np.arange(int(gamma.max()))
        return (found * first)[:, None] * self.alpha_next ** i[None, :] * (i[None, :] < gamma[:, None])


class MatchSampler(Sampler):
    """The simulator's draws of one configuration: a match (its length drawn), then its chain."""

    def __init__(self, config: PromptLookupConfig, part: MatchAcceptance):
        self.gamma = config.gamma
        found, m, weight = part.matches(config.n_min, config.n_max)
        self.found, self.lengths, self.cum = float(found[0]), m, np.cumsum(weight[0])
        self.first, self.next = part.first(m), part.alpha_next

    def draw(self, rng, n, state=None):
        hit = rng.random(n) < self.found
        m = np.minimum(np.searchsorted(self.cum, rng.random(n) * self.cum[-1], side="right"), self.cum.size - 1)
        first = rng.random(n) < self.first[m]
        run = np.minimum(rng.geometric(1.0 - self.next, n) - 1, self.gamma - 1) if self.next < 1 else \
            np.full(n, self.gamma - 1)
        accepted = 1 + np.where(hit & first, 1 + run, 0)
        verify = 1 + np.where(hit, self.gamma, 0)
        return StepDraws(accepted.astype(np.int64), np.zeros(n, np.int64), verify.astype(np.int64)), None


def _probabilities(x: np.ndarray) -> dict[str, float]:
    return dict(zip(PARAMETERS, (1.0 / (1.0 + np.exp(-np.asarray(x, float)))).tolist()))


def _log_likelihood(part: MatchAcceptance, steps: pd.DataFrame) -> float:
    """Of measured steps (columns n_min, n_max, drafted, hits: proposals accepted before the first
    miss, all when none missed): a match or not, then the chain of the match's length."""
    found, m, weight = part.matches(steps["n_min"].to_numpy(), steps["n_max"].to_numpy())
    d, j = steps["drafted"].to_numpy(np.int64), steps["hits"].to_numpy(np.int64)
    a, b = np.clip(part.first(m), 1e-9, 1 - 1e-9)[None, :], min(max(part.alpha_next, 1e-9), 1 - 1e-9)
    chain = np.where(j[:, None] == 0, 1 - a, a * b ** np.maximum(j[:, None] - 1, 0) * np.where(j[:, None] < d[:, None], 1 - b, 1))
    matched = np.log(np.maximum(found, 1e-300)) + np.log(np.maximum((weight * chain).sum(axis=1), 1e-300))
    return float(np.where(d > 0, matched, np.log(np.maximum(1 - found, 1e-300))).sum())


LOGIT_BOUND = 12.0      # parameters are fitted as logits within +-12: a probability within 6e-6 of 0 or 1


def fit_matches(steps: pd.DataFrame, starts: int = 4, seed: int = 0) -> MatchAcceptance:
    """Maximum likelihood of `MatchAcceptance` (its parameters as bounded logits), the best of a fixed
    start and `starts - 1` seeded random ones."""
    from scipy.optimize import minimize

    loss = lambda x: -_log_likelihood(MatchAcceptance(**_probabilities(x)), steps)   # noqa: E731
    rng = np.random.default_rng(seed)
    tries = [np.array([1.0, -1.0, -2.0, 0.0, 1.0, 0.0, 1.0])] + [rng.normal(0.0, 1.5, len(PARAMETERS))
                                                                    for _ in range(starts - 1)]
    fits = [minimize(loss, x0, method="L-BFGS-B", bounds=[(-LOGIT_BOUND, LOGIT_BOUND)] * len(PARAMETERS)) for x0 in tries]
    return MatchAcceptance(**_probabilities(min(fits, key=lambda r: r.fun).x))


def at_bound(part: MatchAcceptance) -> list[str]:
    """The parameters the fit left on a bound of their range (a finding to report, not a value to trust)."""
    edge = 1.0 / (1.0 + np.exp(LOGIT_BOUND - 1e-3))
    return [k for k, v in part.to_dict().items() if v <= edge or v >= 1.0 - edge]


class PromptLookup(MethodSpec):
    name, config, summary = "prompt_lookup", PromptLookupConfig, "n-gram match in the context, no drafter"
    needs = "prompt_lookup"
    decoder = "runtime.engine.prompt_lookup:PromptLookup"
    calibration = ("prompt_lookup g2 nmin1 nmax1", "prompt_lookup g4 nmin2 nmax2", "prompt_lookup g6 nmin3 nmax3",
                   "prompt_lookup g4 nmin4 nmax4", "prompt_lookup g4 nmin1 nmax3", "prompt_lookup g8 nmin2 nmax4",
                   "prompt_lookup g4 nmin3 nmax5")     # n_min = n_max fixes the match length: hit and first by length
    campaign = ("prompt_lookup g3 nmin1 nmax3", "prompt_lookup g5 nmin2 nmax4")
    plot = PlotSpec(x="gamma", hue="n_max")

    def drafters(self, arch):
        return {self.name: {"kind": self.name}}        # no model: the entry holds its own acceptance

    def space(self, setup, gammas=GAMMAS, ngrams=NGRAMS):
        rows = [(g, lo, hi) for g in gammas for lo in ngrams for hi in ngrams if lo <= hi]
        frame = pd.DataFrame(rows, columns=["gamma", "n_min", "n_max"]).astype(np.int64)
        frame["config"] = self.config.labels(frame)
        return frame

    def _part(self, setup) -> MatchAcceptance:
        return setup.need(self.name, self.name)

    def _columns(self, frame):
        return (frame[c].to_numpy(np.int64) for c in ("n_min", "n_max", "gamma"))

    def expected_tokens(self, setup, frame):
        return generation_tokens(self._part(setup).reach(*self._columns(frame)), setup.new_tokens)

    def step_shape(self, setup, frame):
        """One target forward of the pending token, and of the gamma proposals when a match was found
        (every step, where the acceptance entry has no part of this method: a campaign that replays
        recorded steps prices each at its own tokens)."""
        n_min, n_max, gamma = self._columns(frame)
        has_part = setup.acceptance_key and setup.acceptance.has(self.name)
        found = self._part(setup).matches(n_min, n_max)[0] if has_part else np.ones(len(frame))
        tokens = np.stack([np.ones(len(frame)), 1.0 + gamma], axis=1)
        prob = np.stack([1.0 - found, found], axis=1)
        return StepShape(setup.target, 1.0 + found * gamma, draft_width=np.zeros((len(frame), 0), dtype=np.int64),
                         overhead_s=setup.overhead_s, verify_dist=(tokens, prob))

    def sampler(self, setup, config, **options):
        return MatchSampler(config, self._part(setup))

    def acceptance_part(self, raw, where):
        if not isinstance(raw, dict) or any(k not in raw for k in PARAMETERS):
            raise InputError(f"{where}: {self.name} needs {', '.join(repr(k) for k in PARAMETERS)}")
        for key in PARAMETERS:
            value = raw[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                raise InputError(f"{where}: {self.name}.{key} must be a probability in [0, 1], got {value!r}")
        return MatchAcceptance(**{k: float(raw[k]) for k in PARAMETERS})

    def fit_steps(self, frame, *, dataset, temperature, source):
        """`MatchAcceptance` by maximum likelihood of every measured step of two or more
        configurations but each generation's last (cut at its length), with each configuration's
        tokens per step predicted with it left out of the fit (`fit.configs`)."""
        steps = self._steps(frame, source)
        part = fit_matches(steps)
        configs = []
        for label, rows in steps.groupby("config"):
            held = fit_matches(steps[steps["config"] != label], starts=2)
            config = self.parse(label)
            predicted = float(1.0 + held.reach(config.n_min, config.n_max, config.gamma).sum())
            configs.append({"config": label, "steps": int(len(rows)), "tokens_per_step": round(float(rows["accepted"].mean()), 4),
                            "heldout_tokens_per_step": round(predicted, 4)})
        errors = [abs(c["heldout_tokens_per_step"] / c["tokens_per_step"] - 1.0) for c in configs]
        return {"drafter": self.name, "temperature": float(temperature), "dataset": dataset, "alpha": part.alpha,
                self.name: {k: round(v, 6) for k, v in part.to_dict().items()},
                "fit": {"model": "n-gram match and chain (methods.prompt_lookup)", "configs": configs,
                        "at_bound": at_bound(part),
                        "heldout_error_median": round(float(np.median(errors)), 4),
                        "heldout_error_max": round(float(np.max(errors)), 4)},
                "source": f"{source}: maximum likelihood over every measured step"}

    def _steps(self, frame, source) -> pd.DataFrame:
        rows = frame[frame["method"] == self.name].copy()
        configs = rows["config"].map(self.parse)
        if configs.map(lambda c: c.label).nunique() < 2:
            raise InputError(f"{source}: fitting {self.name} needs two or more configurations, got "
                             f"{configs.map(lambda c: c.label).nunique()}")
        rows["config"] = configs.map(lambda c: c.label)
        rows["n_min"], rows["n_max"] = configs.map(lambda c: c.n_min), configs.map(lambda c: c.n_max)
        last = rows.groupby(["run_id", "prompt_id"])["step"].transform("max") == rows["step"]
        rows = rows[~last]
        rows["drafted"] = rows["verify_tokens"].astype(np.int64) - 1
        rows["hits"] = np.minimum(rows["accepted"].astype(np.int64) - 1, rows["drafted"])
        return rows

    def to_engine(self, engine, setup, config):
        c = config
        if engine == "vllm":
            return EngineConfig("vllm", {"method": "ngram", "num_speculative_tokens": c.gamma, "prompt_lookup_min": c.n_min,
                                         "prompt_lookup_max": c.n_max}, "exact", requires=vllm_requires("ngram"))
        if engine == "sglang":
            return EngineConfig("sglang", {"--speculative-algorithm": "NGRAM", "--speculative-num-draft-tokens": c.gamma + 1,
                                           "--speculative-ngram-min-match-window-size": c.n_min,
                                           "--speculative-ngram-max-match-window-size": c.n_max,
                                           "--speculative-ngram-min-bfs-breadth": 1,
                                           "--speculative-ngram-max-bfs-breadth": 1}, "approximate",
                                "SGLang's n-gram cache also holds other requests' tokens and proposes from a trie of "
                                "them, not only the earliest match in this request's own context",
                                requires=sglang_requires("NGRAM"))
        settings = {"prompt_lookup_num_tokens": c.gamma, "max_matching_ngram_size": c.n_max}   # generate() options
        if c.n_min == 1:
            return EngineConfig("hf", settings, "exact", requires=HF_PROMPT_LOOKUP)
        return EngineConfig("hf", settings, "approximate",
                            f"transformers falls back to matches shorter than n_min={c.n_min}, down to one token",
                            requires=HF_PROMPT_LOOKUP)


SPEC = PromptLookup()
ORDER = 8
