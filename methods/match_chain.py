"""prompt_lookup's acceptance (`MatchAcceptance`, a part of its own in a Profile entry), fitted on
the method's StepTraces or on greedy outputs replayed through its proposer. Answers
alternate between copying an earlier stretch verbatim and writing new text, and a step's fate
depends on which it is in, so the steps form a two-state chain:
- free: a chance match of n_min tokens or more is found with probability hit * decay^(n_min - 1);
  its first proposal is accepted with alpha, each later one (given the one before) with alpha_next;
  the next step starts a copy with probability sigma;
- copy: the match is the stretch being copied and every further token continues it with rho, so a
  step accepts min(R, gamma) proposals, P(R >= k) = rho^k, and stays in the copy while it goes on
  (all gamma accepted and the bonus token copied too). A copy is only found once n_min of its
  tokens have been written, so a longer n_min catches fewer (short copies end first) and later:
  the entry rate is sigma * catch^(n_min - 1).
A generation starts in free text and stops at its length, its last step clipped there, so its
tokens per step are not the stationary chain's: a copy entered with 1% per step barely shows in a
32-token answer however long it lasts once entered, and an answer that enters a copy early also
ends in fewer steps. `generation_counts` gives the chain's own expectation exactly, by a backward
recursion over (tokens committed, state); the stationary chain where no length is given. A
longer gamma spends fewer steps per copy, which a model of independent steps cannot tell. n_max changes which earlier occurrence is proposed; on
the recorded steps its effect is within the fit's noise, and the model leaves it out. A step
without a match verifies the pending token alone, one with a match it and its gamma proposals
(`step_shape` prices that distribution); a match near the context's end proposes fewer, which the
fit reads from each step and the closed form does not.

The chain is a model of seven parameters and misses configurations off its calibration grid by up
to ~8-10% (n_max's effect, proposals cut short near the context's end). Under greedy decoding the
exact answer is free: every configuration's steps follow from the calibration outputs
(`traces.lookup_replay`). So an entry may also hold `replayed`: each sweep configuration's tokens per
step and share of steps that propose, replayed on its calibration outputs of `replayed_new_tokens`
tokens (`replay_table`). The closed form then takes the replay, carried to another generation
length by the chain's own ratio between the two lengths (`replayed_at`); where the entry also holds a
`length_shape` (each configuration replayed on the first L tokens of long answers, at several L), that
shape's ratio carries it instead, linear in log length, and the chain only past the lengths replayed
(`length_factors`): copying grows and fades within an answer in ways a chain of constant parameters
does not follow. The simulator needs a
per-step law, which the replay's averages do not give: it draws from the chain with its hit and
sigma refitted to the configuration's replay (`fitted_to_replay`; at the length it simulates, the
replay carried there, where the entry holds a length shape), so it keeps the chain's streaks and the
replay's averages.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from costmodel.leviathan import generation_tokens
from methods.draws import Sampler, StepDraws

PARAMETERS = ("hit", "decay", "alpha", "alpha_next", "rho", "sigma", "catch")


@dataclass(frozen=True)
class MatchAcceptance:
    """The method's part of a Profile acceptance entry (module docstring), each a probability."""

    hit: float
    decay: float
    alpha: float
    alpha_next: float
    rho: float
    sigma: float
    catch: float = 1.0      # entry per extra token of n_min (1: n_min does not change how copies are found)
    replayed: dict[str, tuple[float, float]] | None = field(default=None, compare=False)   # label -> (tokens/step, proposing share)
    replayed_new_tokens: int | None = None   # the generation length the replay ran
    # length -> label -> (tokens/step, proposing share) replayed on the first `length` tokens of long
    # answers (`length_prompts` of them): how each configuration's replay moves with the answer's length
    length_shape: dict[int, dict[str, tuple[float, float]]] | None = field(default=None, compare=False)
    length_prompts: int | None = None
    # the n_min values the chain was fitted on: with one, hit and decay (sigma and catch) are known
    # only through hit * decay^(n - 1) at that n, and another n_min is not priced (`prices`)
    n_min_fitted: tuple[int, ...] | None = None

    def parameters(self) -> dict[str, float]:
        """The chain's probabilities (PARAMETERS), without the replay it may hold."""
        return {k: getattr(self, k) for k in PARAMETERS}

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = self.parameters()
        if self.replayed is not None:
            out.update(replayed={label: list(pair) for label, pair in self.replayed.items()},
                       replayed_new_tokens=self.replayed_new_tokens)
        if self.length_shape is not None:
            out.update(length_shape={str(n): {label: list(pair) for label, pair in table.items()}
                                     for n, table in sorted(self.length_shape.items())},
                       length_prompts=self.length_prompts)
        if self.n_min_fitted is not None:
            out["n_min_fitted"] = list(self.n_min_fitted)
        return out

    def prices(self, n_min) -> np.ndarray:
        """Whether the chain prices a match length: every n_min where its fit saw two or more (the
        decay and catch per extra token are fitted), only the one it saw where it saw one."""
        n_min = np.asarray(n_min)
        if self.n_min_fitted is None or len(self.n_min_fitted) > 1:
            return np.ones(n_min.shape, bool)
        return n_min == self.n_min_fitted[0]

    def found(self, n_min) -> np.ndarray:
        """P(a step in free text finds a match of n_min tokens or more)."""
        return self.hit * self.decay ** (np.asarray(n_min, float) - 1.0)

    def entry(self, n_min) -> np.ndarray:
        """P(a step in free text starts a copy that a match of n_min tokens finds)."""
        return self.sigma * self.catch ** (np.asarray(n_min, float) - 1.0)

    def copy_share(self, gamma, n_min=1) -> np.ndarray:
        """The stationary share of steps that start inside a copy."""
        stay = self.rho ** (np.asarray(gamma, float) + 1.0)
        sigma = self.entry(n_min)
        return sigma / np.maximum(sigma + 1.0 - stay, 1e-300)

    def reach(self, n_min, n_max, gamma) -> np.ndarray:
        """(C, max gamma) P(a step accepts more than i proposals), i = 0.., over the stationary chain."""
        n_min, gamma = np.broadcast_arrays(np.atleast_1d(np.asarray(n_min, np.int64)),
                                           np.atleast_1d(np.asarray(gamma, np.int64)))
        i = np.arange(int(gamma.max()))[None, :]
        copy = np.broadcast_to(self.copy_share(gamma, n_min), gamma.shape)[:, None]
        free = self.found(n_min)[:, None] * self.alpha * self.alpha_next ** i
        return (copy * self.rho ** (i + 1.0) + (1.0 - copy) * free) * (i < gamma[:, None])

    def matched(self, n_min, gamma) -> np.ndarray:
        """(C,) P(a step proposes) over the stationary chain: every copy step, and free steps that find a match."""
        copy = np.atleast_1d(self.copy_share(gamma, n_min))
        return copy + (1.0 - copy) * self.found(np.atleast_1d(n_min))


def generation_counts(part: MatchAcceptance, n_min, gamma, new_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """(tokens per step, proposing share) (C,) of the chain over generations of `new_tokens` from a
    free start, the last step clipped at the length: new_tokens / E[steps] and E[proposing steps] /
    E[steps], exact (the simulator's `MatchSampler` draws the same chain). Backward over the tokens
    committed n = new_tokens - 1 .. 0: a free step commits X = j with the chance match's law and then
    starts a copy with the entry rate; a copy step commits 1 + min(R, gamma) and stays in the copy
    only when R > gamma. Each n is a few vector operations over (configurations, gamma + 1)."""
    n_min, gamma = np.broadcast_arrays(np.atleast_1d(np.asarray(n_min, np.int64)),
                                       np.atleast_1d(np.asarray(gamma, np.int64)))
    total, width = int(new_tokens), int(gamma.max()) + 1                 # X = 1 .. gamma + 1
    found, entry = part.found(n_min), part.entry(n_min)
    i = np.arange(width)[None, :]                                        # proposals accepted, X = 1 + i
    g, hit = gamma[:, None], found[:, None]
    free_law = np.where(i == 0, 1.0 - hit * part.alpha,
                        hit * part.alpha * part.alpha_next ** np.maximum(i - 1, 0)
                        * np.where(i < g, 1.0 - part.alpha_next, 1.0)) * (i <= g)
    leave_law = part.rho ** i * (1.0 - part.rho) * (i <= g)             # the copy ends with this step
    stay = part.rho ** (gamma + 1.0)                                     # R > gamma: all accepted, copy goes on
    # [0]: expected steps to the end, [1]: expected proposing steps; zero once new_tokens are committed
    free, copy = np.zeros((2, len(gamma), total + width + 1)), np.zeros((2, len(gamma), total + width + 1))
    after_free = np.zeros_like(free)                     # the expectation from the state a free step leaves
    rows = np.arange(len(gamma))
    first = np.stack([np.ones(len(gamma)), found])                       # a free step proposes when it finds a match
    for n in range(total - 1, -1, -1):
        window = slice(n + 1, n + 1 + width)
        free[:, :, n] = first + (free_law * after_free[:, :, window]).sum(-1)
        copy[:, :, n] = 1.0 + (leave_law * free[:, :, window]).sum(-1) + stay * copy[:, rows, n + 1 + gamma]
        after_free[:, :, n] = (1.0 - entry) * free[:, :, n] + entry * copy[:, :, n]
    steps, proposing = free[0, :, 0], free[1, :, 0]
    return total / steps, proposing / steps


def replay_table(steps: pd.DataFrame) -> dict[str, list[float]]:
    """label -> [tokens per step, share of steps that propose] of each configuration's steps (rows as
    `PromptLookup._steps` gives them, replayed or measured)."""
    return {label: [round(float(rows["accepted"].mean()), 5), round(float((rows["drafted"] > 0).mean()), 5)]
            for label, rows in steps.groupby("config")}


def chain_at(part: MatchAcceptance, n_min, n_max, gamma, new_tokens: int | None) -> tuple[np.ndarray, np.ndarray]:
    """(tokens per step, proposing share) of the chain over a generation of `new_tokens`."""
    if new_tokens is None:
        return generation_tokens(part.reach(n_min, n_max, gamma)), part.matched(n_min, gamma)
    return generation_counts(part, n_min, gamma, new_tokens)


def replayed_at(part: MatchAcceptance, labels, n_min, n_max, gamma, new_tokens: int | None
                ) -> tuple[np.ndarray, np.ndarray]:
    """(tokens per step, proposing share) of each configuration: the entry's replay where it holds
    one, carried from the replay's generation length to `new_tokens` (None: the stationary chain) by
    the chain's ratio between the two; the chain's own elsewhere (module docstring)."""
    chain = chain_at(part, n_min, n_max, gamma, new_tokens)
    if not part.replayed:
        return chain
    n = len(labels)
    held = np.array([part.replayed.get(label, (np.nan, np.nan)) for label in labels], float).reshape(n, 2)
    base = chain if new_tokens == part.replayed_new_tokens else chain_at(part, n_min, n_max, gamma,
                                                                          part.replayed_new_tokens)
    carried = [held[:, i] * chain[i] / base[i] for i in (0, 1)]      # by the chain's ratio between the lengths
    shaped = length_factors(part, labels, new_tokens)
    if shaped is not None:          # where the long answers replayed a configuration, their shape carries
        factor, reach = shaped      # it, and the chain only past their longest (or before their shortest)
        end = chain if reach == new_tokens else chain_at(part, n_min, n_max, gamma, reach)
        carried = [np.where(np.isnan(f), k, held[:, i] * f * chain[i] / end[i])
                   for i, (f, k) in enumerate(zip(factor, carried))]
    tokens = np.where(np.isnan(held[:, 0]), chain[0], carried[0])
    proposing = np.where(np.isnan(held[:, 1]), chain[1], np.clip(carried[1], 0.0, 1.0))
    return tokens, proposing


def length_factors(part: MatchAcceptance, labels, new_tokens: int | None):
    """((tokens factor, share factor) per label, the length they reach): each configuration's replay on
    the long answers at `new_tokens` (linear in log length between the lengths replayed, clamped to
    their range) over the same at the entry's replay length; NaN where a label was not replayed at
    every length. None where the entry holds no length shape, or for the stationary chain."""
    if not part.length_shape or new_tokens is None or part.replayed_new_tokens is None:
        return None
    lengths = np.array(sorted(part.length_shape), float)
    reach = float(np.clip(new_tokens, lengths[0], lengths[-1]))
    start = float(np.clip(part.replayed_new_tokens, lengths[0], lengths[-1]))
    at = np.array([[part.length_shape[int(n)].get(label, (np.nan, np.nan)) for n in lengths] for label in labels],
                  float).reshape(len(labels), len(lengths), 2)
    x = np.log(lengths)

    def value(length: float, which: int) -> np.ndarray:
        return np.array([np.interp(np.log(length), x, row) for row in at[:, :, which]])

    factors = tuple(value(reach, i) / value(start, i) for i in (0, 1))
    return factors, (int(round(reach)) if reach != new_tokens else new_tokens)


def fitted_to_replay(part: MatchAcceptance, config, new_tokens: int | None = None) -> MatchAcceptance:
    """`part` with its hit and sigma refitted so that the chain gives `config`'s replayed tokens per
    step and proposing share at the replay's generation length (least squares on their logits): the
    simulator's per-step law with the replay's averages. Where the entry holds a length shape and
    `new_tokens` is given, at that length instead, the replay carried there as the closed form carries
    it (`replayed_at`): the shape, not the chain, says how copying moves with the answer's length.
    `part` itself where it holds no replay of `config`."""
    held = (part.replayed or {}).get(config.label)
    if held is None:
        return part
    length = part.replayed_new_tokens
    if part.length_shape and new_tokens is not None:
        tokens, share = replayed_at(part, [config.label], np.array([config.n_min]), np.array([config.n_max]),
                                    np.array([config.gamma]), int(new_tokens))
        held, length = (round(float(tokens[0]), 6), round(float(share[0]), 6)), int(new_tokens)
    hit, sigma = _refit(tuple(part.parameters().values()), length, config.n_min, config.n_max, config.gamma,
                        tuple(held))
    return replace(part, hit=hit, sigma=sigma)


def _bounded_probabilities(x) -> np.ndarray:
    """Probabilities of logits held within +-LOGIT_BOUND (the refits' parameterisation)."""
    return 1.0 / (1.0 + np.exp(-np.clip(x, -LOGIT_BOUND, LOGIT_BOUND)))


def matched_to_replay(part: MatchAcceptance, configs) -> MatchAcceptance:
    """`part` with its hit and its copy entry at the replay's one match length n refitted so that the
    chain gives every configuration of its replay (`configs`: least squares on tokens per step and
    proposing share): a chain fitted on a sample of the requests, matched to the replay over all of
    them, before it is carried without its replay to another target. The entry moves through catch
    (catch^(n - 1), so sigma stays a probability), through sigma where n is 1."""
    from scipy.optimize import least_squares

    n_min, n_max, gamma = (np.array([getattr(c, k) for c in configs], np.int64) for k in ("n_min", "n_max", "gamma"))
    if len(set(n_min.tolist())) != 1:
        raise ValueError(f"a replay is matched at one match length, got n_min {sorted(set(n_min.tolist()))}")
    n = int(n_min[0])
    tokens, share = (np.array([part.replayed[c.label][i] for c in configs]) for i in (0, 1))

    def refitted(x) -> MatchAcceptance:
        hit, q = _bounded_probabilities(x)
        return replace(part, hit=float(hit), **({"sigma": float(q)} if n == 1 else {"catch": float(q ** (1 / (n - 1)))}))

    def residual(x) -> np.ndarray:
        got_tokens, got_share = chain_at(refitted(x), n_min, n_max, gamma, part.replayed_new_tokens)
        return np.concatenate([got_tokens / tokens - 1.0, got_share - share])

    start = np.clip([part.hit, part.sigma if n == 1 else part.catch ** (n - 1)], 1e-6, 1 - 1e-6)
    return refitted(least_squares(residual, np.log(start / (1 - start)), bounds=(-LOGIT_BOUND, LOGIT_BOUND)).x)


@functools.lru_cache(maxsize=4096)      # every simulated stream of a configuration asks the same
def _refit(parameters: tuple, new_tokens: int, n_min: int, n_max: int, gamma: int,
           held: tuple[float, float]) -> tuple[float, float]:
    from scipy.optimize import least_squares

    part, (tokens, share) = MatchAcceptance(*parameters), held

    def refitted(x) -> MatchAcceptance:
        hit, sigma = _bounded_probabilities(x)
        return replace(part, hit=float(hit), sigma=float(sigma))

    def residual(x) -> np.ndarray:
        got_tokens, got_share = chain_at(refitted(x), n_min, n_max, gamma, new_tokens)
        return np.array([got_tokens[0] / tokens - 1.0, got_share[0] - share])

    start = np.clip([part.hit, part.sigma], 1e-6, 1 - 1e-6)
    best = refitted(least_squares(residual, np.log(start / (1 - start)), bounds=(-LOGIT_BOUND, LOGIT_BOUND)).x)
    return best.hit, best.sigma


class MatchSampler(Sampler):
    """The simulator's draws of one configuration: each sequence's state (1: copying) carried from
    step to step (module docstring), free at its start."""

    stateful = True

    def __init__(self, config, part: MatchAcceptance):
        self.gamma, self.part = config.gamma, part
        self.found = float(part.found(config.n_min))
        self.entry = float(part.entry(config.n_min))

    def initial_state(self, n: int) -> np.ndarray:
        return np.zeros(n, dtype=bool)

    def draw(self, rng, n, state=None):
        g, p = self.gamma, self.part
        copying = self.initial_state(n) if state is None else np.asarray(state, dtype=bool)
        run = rng.geometric(1.0 - p.rho, n) - 1 if p.rho < 1 else np.full(n, g + 1)      # R, P(R >= k) = rho^k
        hit = rng.random(n) < self.found
        chain = (rng.random(n) < p.alpha) * np.minimum(
            rng.geometric(1.0 - p.alpha_next, n) if p.alpha_next < 1 else np.full(n, g), g)
        drafted_ok = np.where(copying, np.minimum(run, g), np.where(hit, chain, 0))
        verify = 1 + np.where(copying | hit, g, 0)
        after = np.where(copying, run > g, rng.random(n) < self.entry)
        return StepDraws((1 + drafted_ok).astype(np.int64), np.zeros(n, np.int64), verify.astype(np.int64)), after

    def stream(self, rng, n_steps, done, state=None):
        """Consecutive steps of one sequence, its state carried through."""
        parts = []
        for _ in range(n_steps):
            draws, state = self.draw(rng, 1, state)
            parts.append(draws)
        return StepDraws(*(np.concatenate([getattr(d, f) for d in parts]) for f in ("accepted", "drafted", "verify_tokens"))), state


def _probabilities(x: np.ndarray) -> dict[str, float]:
    return dict(zip(PARAMETERS, (1.0 / (1.0 + np.exp(-np.asarray(x, float)))).tolist()))


def _sequences(steps: pd.DataFrame) -> tuple[np.ndarray, ...]:
    """(drafted, hits, valid) [G, T] of each generation's steps in order (its last, cut at the
    length, left out) and (n_min,) [G]: the likelihood's input."""
    gens = [g.sort_values("step").iloc[:-1] for _, g in steps.groupby(["run_id", "prompt_id"], sort=False)]
    gens = [g for g in gens if len(g)]
    width = max(len(g) for g in gens)
    drafted, hits = np.zeros((len(gens), width), np.int64), np.zeros((len(gens), width), np.int64)
    valid = np.zeros((len(gens), width), bool)
    for i, g in enumerate(gens):
        drafted[i, :len(g)], hits[i, :len(g)], valid[i, :len(g)] = g["drafted"], g["hits"], True
    return drafted, hits, valid, np.array([int(g["n_min"].iloc[0]) for g in gens])


def _log_likelihood(part: MatchAcceptance, sequences) -> float:
    """Of the generations' steps under the two-state chain (forward algorithm, free at the start)."""
    d, j, valid, n_min = sequences
    found, entry = part.found(n_min)[:, None], part.entry(n_min)
    a, b, rho = (min(max(v, 1e-9), 1 - 1e-9) for v in (part.alpha, part.alpha_next, part.rho))
    chain = np.where(j == 0, 1 - a, a * b ** np.maximum(j - 1, 0) * np.where(j < d, 1 - b, 1.0))
    free = np.where(d == 0, 1 - found, found * chain)
    copy = np.where(d == 0, 0.0, np.where(j < d, rho ** j * (1 - rho), rho ** d))
    belief = np.tile([0.0, 1.0], (d.shape[0], 1))                 # (P(copy), P(free)) before each step
    total = 0.0
    for t in range(d.shape[1]):
        joint = belief * np.stack([copy[:, t], free[:, t]], axis=1)
        norm = joint.sum(axis=1)
        total += float(np.log(np.maximum(norm[valid[:, t]], 1e-300)).sum())
        post = joint / np.maximum(norm, 1e-300)[:, None]
        stay = np.where((d[:, t] > 0) & (j[:, t] == d[:, t]), rho, 0.0)
        step = np.stack([post[:, 0] * stay + post[:, 1] * entry,
                         post[:, 0] * (1 - stay) + post[:, 1] * (1 - entry)], axis=1)
        belief = np.where(valid[:, t:t + 1], step, belief)
    return total


LOGIT_BOUND = 12.0      # parameters are fitted as logits within +-12: a probability within 6e-6 of 0 or 1


def fit_matches(steps: pd.DataFrame, starts: int = 4, seed: int = 0) -> MatchAcceptance:
    """Maximum likelihood of `MatchAcceptance` (its parameters as bounded logits), the best of a fixed
    start and `starts - 1` seeded random ones."""
    from scipy.optimize import minimize

    sequences = _sequences(steps)
    loss = lambda x: -_log_likelihood(MatchAcceptance(**_probabilities(x)), sequences)   # noqa: E731
    rng = np.random.default_rng(seed)
    tries = [np.array([0.5, -1.5, -1.5, 0.0, 2.0, -2.0, 2.0])] + [rng.normal(0.0, 1.5, len(PARAMETERS))
                                                             for _ in range(starts - 1)]
    fits = [minimize(loss, x0, method="L-BFGS-B", bounds=[(-LOGIT_BOUND, LOGIT_BOUND)] * len(PARAMETERS)) for x0 in tries]
    return MatchAcceptance(**_probabilities(min(fits, key=lambda r: r.fun).x))


def at_bound(part: MatchAcceptance) -> list[str]:
    """The parameters the fit left on a bound of their range (a finding to report, not a value to trust)."""
    edge = 1.0 / (1.0 + np.exp(LOGIT_BOUND - 1e-3))
    return [k for k, v in part.parameters().items() if v <= edge or v >= 1.0 - edge]
