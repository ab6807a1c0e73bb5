"""Acceptance models of one (target, drafter, data, temperature): the entries a Profile stores, typed and
checked when the Profile is read (fitting them from traces is `calibrate.fit_acceptance`).

Definitions (the cost models take these, not vLLM's accepted/drafted ratio):
- alpha: per-token acceptance probability E[sum_x min(p(x), q(x))] (Leviathan et al.'s alpha);
  under greedy decoding P(draft top-1 == target top-1).
- alpha_by_position: beta_i, the probability that draft position i (1-based) is accepted given
  positions 1..i-1 were; accepted length = 1 + sum_i prod_{j<=i} beta_j.
- alpha_by_position_at_gamma: the same measured in chains of exactly gamma drafts, per gamma
  (greedy TokenTraces replay them exactly). A step's first draft depends on how the last step
  ended: after a miss it follows the target's correction, after a full chain the bonus token, and
  acceptance runs in streaks, so short chains start on an accepted streak more often (SmolLM2's
  vanilla drafter on MT-Bench: beta_1 = 0.24 in chains of 1, 0.21 in chains of 8).
- alpha_at_k: MCSD's alpha@k, the per-step acceptance probability with k candidates at a
  position (k = 1 is alpha); `alpha_at_k_without_replacement` the same drawing without replacement.
  Measured at a few k; `alpha_at` reads it at any k as a curve (`AlphaCurve`): logit(alpha@k) linear
  in log k, through the measured points and, past the last one, on the slope the points give
  (never flat unless they are). The family was chosen on the SmolLM2 TokenTraces, where the whole
  curve is known (examples/smollm2_cpu/README.md): at small alpha it is a power law of alpha in k, near
  1 a power law of the miss 1 - alpha, and the recorded curves sit between the two.
- persistence: rho, how a position's miss shrinks once the positions before it were accepted
  (easy stretches run long): at depth i the miss is (1 - alpha@k) rho^(i-1); 1 (independent
  positions) when not recorded. A paper fit states it where chain lengths pin it (MCSD).
- conf_bins: CAPE's table over confidence bins b = floor(10 * drafter top-1 probability), 0..10:
  `freq[b]` the share of positions in bin b, `topk_hit[K][b]` = P(target token within the draft's
  top K | bin b).
- markov: a bursty two-state model, p_aa = P(accept | previous accepted), p_ra =
  P(accept | previous rejected); its stationary acceptance is p_ra / (1 - p_aa + p_ra).
- a method's own part, under the method's name (`MethodSpec.acceptance_part` parses it), for a
  method whose acceptance is not a drafter's (n-gram acceptance and its scaling, say).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import methods
from common.errors import InputError
from costmodel.cape import N_BINS
from profiles.record import Record


def _probability(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputError(f"{what} must be a number in [0, 1], got {value!r}")
    if not 0.0 <= value <= 1.0:
        raise InputError(f"{what} = {value!r} is outside [0, 1]")
    return float(value)


def _probabilities(values: Any, what: str, length: int | None = None) -> np.ndarray:
    if not isinstance(values, (list, tuple, np.ndarray)):
        raise InputError(f"{what} must be a list of numbers in [0, 1]")
    if length is not None and len(values) != length:
        raise InputError(f"{what} must have {length} entries, got {len(values)}")
    if len(values) == 0:
        raise InputError(f"{what} must not be empty")
    out = np.array([_probability(v, f"{what}[{i}]") for i, v in enumerate(values)])
    out.setflags(write=False)
    return out


def _k_table(raw: Any, what: str) -> dict[int, float]:
    if not isinstance(raw, dict) or not raw:
        raise InputError(f"{what} must be a non-empty object mapping k to a probability")
    table = {}
    for key, value in raw.items():
        try:
            k = int(key)
        except (TypeError, ValueError):
            raise InputError(f"{what} has key {key!r}; keys must be positive integers") from None
        if k < 1 or str(k) != str(key).strip():
            raise InputError(f"{what} has key {key!r}; keys must be positive integers")
        table[k] = _probability(value, f"{what}[{k}]")
    table = dict(sorted(table.items()))
    _nondecreasing(list(table), list(table.values()), what)
    return table


def _nondecreasing(ks: list[int], values, what: str) -> None:
    """A hit probability over k candidates cannot fall as k grows (k + 1 candidates hold the first k)."""
    for (k0, v0), (k1, v1) in zip(zip(ks, values), zip(ks[1:], values[1:])):
        if v1 < v0 - 1e-9:
            raise InputError(f"{what} falls from {float(v0)!r} at {k0} to {float(v1)!r} at {k1}; more "
                             "candidates cannot be accepted less often")


LOGIT_EPS = 1e-6


def _logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(np.asarray(p, float), LOGIT_EPS, 1.0 - LOGIT_EPS)
    return np.log(p) - np.log1p(-p)


@dataclass(frozen=True)
class AlphaCurve:
    """alpha@k from a table measured at a few k: logit(alpha) linear in log k between the measured
    points (exact at each), and past the last one on `slope`, the least-squares slope of all the
    points (clipped at 0: more candidates never accept less). One point: flat, nothing says otherwise."""

    ks: np.ndarray
    values: np.ndarray
    slope: float

    FAMILY = "logit(alpha@k) linear in log k"

    @classmethod
    def of(cls, table: dict[int, float]) -> "AlphaCurve":
        ks = np.array(list(table), float)
        values = np.array(list(table.values()), float)
        slope = 0.0
        if ks.size >= 2:
            x, y = np.log(ks), _logit(values)
            slope = max(0.0, float(np.polyfit(x, y, 1)[0]))
        return cls(ks, values, slope)

    def __call__(self, k) -> np.ndarray:
        x = np.log(np.asarray(k, float))
        known_x, known_y = np.log(self.ks), _logit(self.values)
        inside = np.interp(x, known_x, known_y)
        beyond = known_y[-1] + self.slope * (x - known_x[-1])
        y = np.where(x > known_x[-1], beyond, inside)
        out = 1.0 / (1.0 + np.exp(-y))
        exact = np.isclose(x[..., None], known_x).any(axis=-1) if known_x.size else np.zeros(x.shape, bool)
        if exact.any():      # measured points exactly (the logit clip must not move a recorded 0 or 1)
            out = np.where(exact, np.interp(x, known_x, self.values), out)
        return out


@dataclass(frozen=True)
class MarkovAcceptance:
    """Two-state (accept/reject) Markov chain over consecutive draft positions."""

    p_aa: float
    p_ra: float
    n_transitions: int | None = None    # how many transitions it was counted from (a record)

    @property
    def stationary_alpha(self) -> float:
        denominator = 1.0 - self.p_aa + self.p_ra
        return 1.0 if denominator == 0 else self.p_ra / denominator

    def sample(self, n: int, rng: np.random.Generator, first_accept_p: float | None = None) -> np.ndarray:
        """n successive accept (True) / reject (False) outcomes; the first at `first_accept_p` (default stationary)."""
        out = np.empty(n, bool)
        u = rng.random(n)
        p = self.stationary_alpha if first_accept_p is None else first_accept_p
        for i in range(n):
            out[i] = u[i] < p
            p = self.p_aa if out[i] else self.p_ra
        return out

    def to_dict(self) -> dict[str, float]:
        out = {"p_aa": self.p_aa, "p_ra": self.p_ra}
        return out if self.n_transitions is None else {**out, "n_transitions": self.n_transitions}


@dataclass(frozen=True)
class ConfidenceBins:
    """CAPE's table: share of positions per confidence bin and P(target in draft top K | bin)."""

    freq: np.ndarray
    topk_hit: dict[int, np.ndarray]
    counts: tuple[int, ...] | None = None     # positions counted per bin (a record)

    @property
    def ks(self) -> list[int]:
        return list(self.topk_hit)

    def hit(self, k: int) -> np.ndarray:
        """P(target token within the draft's top k | bin), 11 entries; InputError if k was not recorded."""
        if k not in self.topk_hit:
            raise InputError(f"conf_bins has no top-{k} row (has: {', '.join(map(str, self.topk_hit))})")
        return self.topk_hit[k]

    def table(self, ks: list[int] | None = None) -> np.ndarray:
        """Rows K (sorted), columns the 11 bins: the array CAPE's closed form takes."""
        return np.vstack([self.hit(k) for k in (ks or self.ks)])

    def to_dict(self) -> dict[str, Any]:
        out = {"freq": self.freq.tolist(), "topk_hit": {str(k): v.tolist() for k, v in self.topk_hit.items()}}
        return out if self.counts is None else {**out, "counts": list(self.counts)}


@dataclass(frozen=True, eq=False)
class AcceptanceModel:
    """One acceptance entry of a Profile, validated; optional parts are None when not recorded (two
    entries compare by `to_dict`: its arrays have no one truth value)."""

    name: str
    alpha_value: float | None = None
    alpha_by_position: np.ndarray | None = None
    alpha_by_position_at_gamma: dict[int, np.ndarray] | None = None
    alpha_at_k: dict[int, float] | None = None
    alpha_at_k_without_replacement: dict[int, float] | None = None
    conf_bins: ConfidenceBins | None = None
    markov: MarkovAcceptance | None = None
    own: Record = field(default_factory=Record)   # part name -> a method's own part (MethodSpec.acceptance_parts)
    persistence: float | None = None
    drafter: str = ""
    temperature: float = 0.0
    dataset: str = ""
    source: str = ""
    extra: Record = field(default_factory=Record)   # what the fit recorded beside (read by reports)

    # ---- accessors ------------------------------------------------------------------------
    @property
    def alpha(self) -> float:
        """Per-token acceptance probability: the stored alpha, else alpha@1, else the Markov one, else
        that of a method's own part."""
        if self.alpha_value is not None:
            return self.alpha_value
        if self.alpha_at_k and 1 in self.alpha_at_k:
            return self.alpha_at_k[1]
        if self.markov is not None:
            return self.markov.stationary_alpha
        for part in self.own.values():
            if hasattr(part, "alpha"):
                return float(part.alpha)
        raise InputError(f"acceptance model '{self.name}' has no alpha")

    def beta(self, gamma: int) -> np.ndarray:
        """beta_1..beta_gamma: per-position acceptance, as measured in chains of gamma where that
        was recorded, else in the shortest recorded chains longer than gamma (the nearest in how
        their streaks start), else in the recorded chains; past the recorded positions the last one
        repeats, and without a per-position record every position is alpha (its miss shrunk by the
        persistence where one is recorded)."""
        if int(gamma) != gamma or gamma < 1:
            raise InputError(f"gamma must be an integer >= 1, got {gamma!r}")
        gamma = int(gamma)
        by_gamma = self.alpha_by_position_at_gamma or {}
        longer = [g for g in by_gamma if g >= gamma]
        known = by_gamma[min(longer)] if longer else self.alpha_by_position
        if known is None:
            return 1.0 - (1.0 - self.alpha) * self.miss_factor(gamma)
        if gamma <= known.size:
            return known[:gamma].copy()
        return np.concatenate([known, np.full(gamma - known.size, known[-1])])

    def miss_factor(self, depth: int) -> np.ndarray:
        """rho^(i-1) for positions i = 1..depth: how the miss shrinks with depth (ones without a
        recorded persistence)."""
        rho = 1.0 if self.persistence is None else self.persistence
        return rho ** np.arange(int(depth), dtype=float)

    def alpha_curve(self, without_replacement: bool = False) -> AlphaCurve:
        """The `AlphaCurve` through the recorded alpha@k (InputError when none is recorded)."""
        table = self.alpha_at_k_without_replacement if without_replacement else self.alpha_at_k
        if not table:
            what = "alpha_at_k_without_replacement" if without_replacement else "alpha_at_k"
            raise InputError(f"acceptance model '{self.name}' has no {what}")
        return AlphaCurve.of(table)

    def alpha_at(self, k, without_replacement: bool = False) -> np.ndarray | float:
        """alpha@k for scalar or array k on `alpha_curve`: recorded values exactly, the curve between
        and beyond them."""
        curve = self.alpha_curve(without_replacement)
        ks = np.asarray(k, float)
        if np.any(ks < 1):
            raise InputError(f"k must be >= 1, got {k!r}")
        if np.any(ks < curve.ks[0]):
            raise InputError(f"acceptance model '{self.name}' records alpha@k from k = {curve.ks[0]:g}; "
                             f"asked for k = {float(ks.min()):g}")
        out = curve(ks)
        return float(out) if out.ndim == 0 else out

    def has(self, part: str) -> bool:
        """Whether the optional part ('alpha_by_position', 'alpha_at_k', 'conf_bins', a method's own
        part by the method's name, ...) is recorded."""
        return self.part(part) is not None

    def part(self, name: str) -> Any:
        """The optional part `name` (None when not recorded)."""
        if name in self.own:
            return self.own[name]
        return getattr(self, name, None) if name in _KNOWN_FIELDS else None

    # ---- IO -------------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, raw: dict[str, Any], name: str = "acceptance") -> "AcceptanceModel":
        """Validate a Profile acceptance entry; one-line InputError naming the first bad field."""
        if not isinstance(raw, dict):
            raise InputError(f"acceptance model '{name}' must be an object")
        where = f"acceptance model '{name}'"
        alpha = _probability(raw["alpha"], f"{where}: alpha") if raw.get("alpha") is not None else None
        by_pos = (_probabilities(raw["alpha_by_position"], f"{where}: alpha_by_position")
                  if raw.get("alpha_by_position") is not None else None)
        at_gamma = (_by_gamma(raw["alpha_by_position_at_gamma"], f"{where}: alpha_by_position_at_gamma")
                    if raw.get("alpha_by_position_at_gamma") is not None else None)
        at_k = _k_table(raw["alpha_at_k"], f"{where}: alpha_at_k") if raw.get("alpha_at_k") is not None else None
        at_k_wo = (_k_table(raw["alpha_at_k_without_replacement"], f"{where}: alpha_at_k_without_replacement")
                   if raw.get("alpha_at_k_without_replacement") is not None else None)
        conf = _conf_bins(raw["conf_bins"], where) if raw.get("conf_bins") is not None else None
        markov = None
        if raw.get("markov") is not None:
            m = raw["markov"]
            if not isinstance(m, dict) or "p_aa" not in m or "p_ra" not in m:
                raise InputError(f"{where}: markov needs 'p_aa' and 'p_ra'")
            count = m.get("n_transitions")
            if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 0):
                raise InputError(f"{where}: markov.n_transitions must be a whole number >= 0, got {count!r}")
            markov = MarkovAcceptance(_probability(m["p_aa"], f"{where}: markov.p_aa"),
                                      _probability(m["p_ra"], f"{where}: markov.p_ra"), count)
        own = {part: spec.acceptance_part(raw[part], where, part) for part, spec in part_owners().items()
               if raw.get(part) is not None}
        persistence = raw.get("persistence")
        if persistence is not None and (isinstance(persistence, bool) or not isinstance(persistence, (int, float))
                                        or not math.isfinite(persistence) or persistence <= 0):
            raise InputError(f"{where}: persistence must be a positive number, got {persistence!r}")
        model = cls(name=name, alpha_value=alpha, alpha_by_position=by_pos, alpha_by_position_at_gamma=at_gamma,
                    alpha_at_k=at_k,
                    alpha_at_k_without_replacement=at_k_wo, conf_bins=conf, markov=markov, own=Record(own),
                    persistence=None if persistence is None else float(persistence),
                    drafter=_text(raw, "drafter", where), temperature=_temperature(raw, where),
                    dataset=_text(raw, "dataset", where), source=_text(raw, "source", where),
                    extra=Record({k: v for k, v in raw.items() if k not in _KNOWN_FIELDS and k not in own}))
        model.alpha  # every model must yield a per-token alpha somehow
        return model

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"drafter": self.drafter, "temperature": self.temperature, "dataset": self.dataset}
        if self.alpha_value is not None:
            out["alpha"] = self.alpha_value
        if self.alpha_by_position is not None:
            out["alpha_by_position"] = self.alpha_by_position.tolist()
        if self.alpha_by_position_at_gamma is not None:
            out["alpha_by_position_at_gamma"] = {str(g): b.tolist() for g, b in self.alpha_by_position_at_gamma.items()}
        for key in ("alpha_at_k", "alpha_at_k_without_replacement"):
            table = getattr(self, key)
            if table is not None:
                out[key] = {str(k): v for k, v in table.items()}
        for key in ("conf_bins", "markov"):
            part = getattr(self, key)
            if part is not None:
                out[key] = part.to_dict()
        for key, part in self.own.items():
            out[key] = part.to_dict()
        if self.persistence is not None:
            out["persistence"] = self.persistence
        out["source"] = self.source
        out.update(self.extra.to_json())
        return out


_KNOWN_FIELDS = {"alpha", "alpha_by_position", "alpha_by_position_at_gamma", "alpha_at_k",
                 "alpha_at_k_without_replacement", "conf_bins", "markov", "persistence", "drafter", "temperature",
                 "dataset", "source"}


def part_owners() -> dict:
    """Part key -> the method that reads and parses it (`MethodSpec.acceptance_parts`)."""
    return {part: spec for spec in methods.specs() for part in spec.acceptance_parts}


def _text(raw: dict, key: str, where: str) -> str:
    """A name field: a string, or absent / null (not recorded)."""
    value = raw.get(key)
    if value is not None and not isinstance(value, str):
        raise InputError(f"{where}: {key} must be a string, got {value!r}")
    return value or ""


def _temperature(raw: dict, where: str) -> float:
    """The sampling temperature the entry was measured at: required (an entry without one is not
    greedy by default: GLIDE's T = 1 alphas would be priced and labelled as T = 0)."""
    if "temperature" not in raw:
        raise InputError(f"{where} states no temperature: give the sampling temperature its acceptance was "
                         "measured at (0 for greedy)")
    value = raw["temperature"]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise InputError(f"{where}: temperature must be a number >= 0, got {value!r}")
    return float(value)


def _by_gamma(raw: Any, where: str) -> dict[int, np.ndarray]:
    """{gamma: beta_1..beta_m}, m <= gamma (a chain's later positions may never have been reached)."""
    if not isinstance(raw, dict) or not raw:
        raise InputError(f"{where} must map draft lengths to per-position probabilities")
    out = {}
    for key, betas in raw.items():
        if not str(key).isdigit() or int(key) < 1:
            raise InputError(f"{where} has key {key!r}; keys must be draft lengths >= 1")
        out[int(key)] = _probabilities(betas, f"{where}[{key}]")
        if out[int(key)].size > int(key):
            raise InputError(f"{where}[{key}] lists {out[int(key)].size} positions for chains of {key}")
    return dict(sorted(out.items()))


def _conf_bins(raw: Any, where: str) -> ConfidenceBins:
    if not isinstance(raw, dict) or "freq" not in raw or "topk_hit" not in raw:
        raise InputError(f"{where}: conf_bins needs 'freq' and 'topk_hit'")
    freq = _probabilities(raw["freq"], f"{where}: conf_bins.freq", N_BINS)
    if abs(freq.sum() - 1.0) > 1e-3:
        raise InputError(f"{where}: conf_bins.freq sums to {freq.sum():.4f}, not 1")
    if not isinstance(raw["topk_hit"], dict) or not raw["topk_hit"]:
        raise InputError(f"{where}: conf_bins.topk_hit must map K to {N_BINS} probabilities")
    hits = {}
    for key in sorted(raw["topk_hit"], key=lambda s: int(s) if str(s).isdigit() else -1):
        if not str(key).isdigit() or int(key) < 1:
            raise InputError(f"{where}: conf_bins.topk_hit has key {key!r}; keys must be positive integers")
        hits[int(key)] = _probabilities(raw["topk_hit"][key], f"{where}: conf_bins.topk_hit[{key}]", N_BINS)
    for b in range(N_BINS):
        _nondecreasing(list(hits), [row[b] for row in hits.values()], f"{where}: conf_bins.topk_hit of bin {b}")
    counts = raw.get("counts")
    if counts is not None and (not isinstance(counts, list) or len(counts) != N_BINS
                               or any(isinstance(c, bool) or not isinstance(c, int) or c < 0 for c in counts)):
        raise InputError(f"{where}: conf_bins.counts must be {N_BINS} whole numbers >= 0")
    return ConfidenceBins(freq, hits, None if counts is None else tuple(counts))
