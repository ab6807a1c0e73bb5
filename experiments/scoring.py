"""Vectorised scoring of a method's configurations on one Profile, and the simulator re-score.

One configuration's step = sequential draft forwards + one verify forward + overhead, and commits
E tokens on average. E comes from the closed forms of `costmodel` (or, given a TokenTrace, from
the exact greedy replay of `traces.replay`); which forwards a step runs, of which model and at
which share of its cost, comes from `simulator.methods.build_step_model` (the one place that
describes each method's step); their seconds come from the Profile's fitted latency models,
called once per distinct shape over whole arrays of configurations. Then

    step_s   = draft_s + verify_s + overhead_s
    speedup  = E * t_target(1 token) / step_s          (against plain decoding, same batch)

Scored columns (SCORE_COLUMNS): speedup, tokens_per_step (E, bonus included), verified_per_step
(query tokens per sequence in the verify forward), draft_cost (draft seconds per step in units of
one plain target forward), draft_forwards, step_s, tokens_per_s (all sequences of the batch).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pandas as pd

from calibrate.profile import Profile
from traces.errors import InputError

SCORE_COLUMNS = ["speedup", "tokens_per_step", "verified_per_step", "draft_cost", "draft_forwards",
                 "step_s", "tokens_per_s", "scored_by"]

# hyperparameter columns of each method's space that make up its simulator config
CONFIG_KEYS: dict[str, tuple[str, ...]] = {
    "sd": ("gamma",),
    "mcsd": ("k", "replacement"),
    "cape": ("gamma", "bins"),
    "lookahead": ("W", "N", "G", "prompt_ngrams"),
    "kangaroo": ("exit_layer", "gamma", "eta"),
    "coral": ("groups", "top_n", "gamma"),
}
REPLAY_METHODS = ("sd", "mcsd", "cape", "kangaroo")
MCSD_K_MAX = 32


@dataclass(frozen=True)
class Setting:
    """What every configuration is scored at."""

    temperature: float = 0.0
    batch: int = 1
    ctx_len: int = 512
    token_trace: str | None = None


@dataclass
class ScoreTask:
    """One executor task: a chunk of one method's space on one profile (all picklable)."""

    profile: dict[str, Any]
    method: str
    configs: pd.DataFrame
    setting: Setting


@dataclass
class SimTask:
    """One executor task: re-score one configuration in the simulator with `repeats` seeds."""

    profile: dict[str, Any]
    method: str
    config: dict[str, Any]
    setting: Setting
    seed: int
    n_tokens: int
    repeats: int


# ---- hardware ----------------------------------------------------------------------------------

def check_hardware(name: str) -> str:
    """The canonical hardware name; InputError listing the known ones."""
    from costmodel.hardware import get_hardware

    try:
        return get_hardware(name).name
    except ValueError as exc:
        raise InputError(str(exc)) from None


def retarget(profile: Profile, hardware: str) -> Profile:
    """The profile with every roofline latency model moved to `hardware` (fitted efficiencies kept).

    A measured-table latency model cannot be moved (it holds seconds on one GPU): InputError.
    """
    name = check_hardware(hardware)
    raw = profile.to_dict()
    latency = {}
    for model, spec in raw["latency"].items():
        if spec.get("kind") != "roofline":
            raise InputError(f"profile '{profile.name}': latency model '{model}' is a measured {spec.get('kind')!r}, "
                             "which only a roofline model can be moved to --hardware")
        latency[model] = {**spec, "params": {**spec["params"], "hardware": name}}
    raw.update(latency=latency, hardware=name, name=f"{profile.name} -> {name}")
    return Profile.from_dict(raw, source=f"{profile.name} on {name}")


# ---- which drafter and acceptance model a method uses ------------------------------------------

def _acceptance_at(profile: Profile, temperature: float, want: Callable[[dict], bool]) -> str | None:
    """Key of the acceptance entry at `temperature` (within 1e-6) that `want` accepts."""
    for key, spec in profile.acceptance.items():
        if abs(float(spec.get("temperature", 0.0)) - temperature) < 1e-6 and want(spec):
            return key
    return None


def pick(profile: Profile, method: str, temperature: float) -> tuple[dict[str, Any], str | None]:
    """(base simulator config naming drafter and acceptance, None) or ({}, why not applicable)."""
    from simulator.methods import DEFAULT_DRAFTER_KIND

    if method == "lookahead":
        key = _acceptance_at(profile, temperature, lambda s: s.get("lookahead") is not None)
        if key is None:
            return {}, f"no acceptance model with lookahead numbers at temperature {temperature:g}"
        return {"acceptance": key}, None
    kinds = ("glide", "draft_model") if method == "cape" else (DEFAULT_DRAFTER_KIND[method],)
    need = {"mcsd": "alpha_at_k", "cape": "conf_bins"}.get(method)
    for kind in kinds:
        for drafter, spec in profile.drafters.items():
            if spec.get("kind") != kind:
                continue
            key = _acceptance_at(profile, temperature,
                                 lambda s: s.get("drafter") == drafter and (need is None or s.get(need) is not None))
            if key is not None:
                return {"drafter": drafter, "acceptance": key}, None
    extra = f" with {need}" if need else ""
    return {}, f"no {'/'.join(kinds)} drafter with an acceptance model{extra} at temperature {temperature:g}"


def not_applicable(profile: Profile, method: str, setting: Setting) -> str | None:
    """Why `method` cannot be scored on `profile` at `setting`, or None."""
    _, reason = pick(profile, method, setting.temperature)
    if reason is None and setting.token_trace and method in REPLAY_METHODS and setting.temperature > 0:
        return "exact trace replay is greedy only; use --temperature 0 with --token-trace"
    return reason


def mcsd_choices(profile: Profile, setting: Setting) -> tuple[tuple[int, ...], tuple[bool, ...]]:
    """k values the profile records alpha@k for (no extrapolation), and the replacement modes it records."""
    from experiments.spaces import MCSD_K_CHOICES

    cfg, _ = pick(profile, "mcsd", setting.temperature)
    spec = profile.acceptance[cfg["acceptance"]]
    recorded = {int(k) for k in spec["alpha_at_k"]}
    modes = (True, False) if spec.get("alpha_at_k_without_replacement") else (True,)
    if modes == (True, False):
        recorded &= {int(k) for k in spec["alpha_at_k_without_replacement"]}
    return tuple(k for k in MCSD_K_CHOICES if k in recorded or k == 1), modes


def kangaroo_exit_layers(profile: Profile) -> tuple[int, ...]:
    """The exit layers the profile's kangaroo drafters use (searched together with eta)."""
    layers = sorted({int(s["exit_layer"]) for s in profile.drafters.values()
                     if s.get("kind") == "kangaroo" and "exit_layer" in s})
    return tuple(layers) or (2,)


# ---- latency over arrays -----------------------------------------------------------------------

class Latency:
    """`t(model, n_tokens, ctx, batch)` in seconds from the profile's fitted models, over arrays."""

    def __init__(self, profile: Profile, setting: Setting):
        self.profile, self.setting = profile, setting
        self._models: dict[str, Any] = {}

    def __call__(self, model: str, n_tokens, ctx_offset=0) -> np.ndarray:
        if model not in self._models:
            self._models[model] = self.profile.latency_model(model)
        n = np.maximum(np.asarray(n_tokens, dtype=float), 1.0)
        ctx = self.setting.ctx_len + np.asarray(ctx_offset, dtype=float)
        return np.asarray(self._models[model].predict(n, ctx, self.setting.batch), dtype=float)

    def parts(self, parts, width=1, ctx_offset=0) -> np.ndarray:
        """Seconds of one draft forward made of (model, tokens, scale) parts, `width` sequences wide."""
        return sum(scale * self(model, np.asarray(width) * tokens, ctx_offset) for model, tokens, scale in parts)


def _template(profile: Profile, method: str, config: dict[str, Any]):
    from simulator.methods import build_step_model

    return build_step_model(profile, method, config)


def _chain_draft_seconds(lat: Latency, parts, gamma: np.ndarray, reach: np.ndarray | None = None) -> np.ndarray:
    """Draft seconds of chains of `gamma` sequential forwards; forward i paid with probability reach[:, i]."""
    g_max = int(gamma.max())
    per_level = np.stack([lat.parts(parts, 1, i) for i in range(g_max)]).reshape(g_max)
    paid = np.arange(g_max)[None, :] < gamma[:, None]
    weight = paid if reach is None else paid * reach
    return (weight * per_level[None, :]).sum(axis=1)


# ---- per-method expectations -------------------------------------------------------------------

def _score_sd(profile, cfg, frame, lat, acc):
    from costmodel.leviathan import expected_tokens_by_position

    gamma = frame["gamma"].to_numpy(np.int64)
    step = _template(profile, "sd", {**cfg, "gamma": 1})
    tokens = expected_tokens_by_position(acc.beta(int(gamma.max())), gamma)
    return dict(tokens=tokens, drafted=gamma.astype(float), verify=gamma + 1.0,
                draft_s=_chain_draft_seconds(lat, step.draft_parts[0], gamma),
                verify_model=step.verify_model, verify_scale=step.verify_scale, overhead=step.overhead_s)


def _score_mcsd(profile, cfg, frame, lat, acc):
    """E = 1 + sum_i prod_{j<=i} alpha@k_j (costmodel.trees' expectation, evaluated on the whole
    (configurations x depth) matrix at once through `expected_tokens_by_position`)."""
    from costmodel.leviathan import expected_tokens_by_position
    from costmodel.trees import alpha_at_k_lookup
    from experiments.spaces import parse_k_matrix

    depth = frame["gamma"].to_numpy(np.int64)
    kmat = parse_k_matrix(frame["k"], depth)
    repl = frame["replacement"].to_numpy(bool)
    k_axis = np.arange(1, max(MCSD_K_MAX, int(kmat.max())) + 1)
    beta = np.empty(kmat.shape)
    for mode in (True, False):
        if np.any(repl == mode):
            curve = np.asarray(acc.alpha_at(k_axis, without_replacement=not mode), dtype=float)
            beta[repl == mode] = alpha_at_k_lookup(curve, kmat[repl == mode])
    tokens = expected_tokens_by_position(beta, depth)
    step = _template(profile, "mcsd", {**cfg, "k": "1"})
    model = step.draft_parts[0][0][0]
    widths = np.ones_like(kmat)                       # level i drafts prod(k_1..k_{i-1}) sequences
    widths[:, 1:] = np.cumprod(kmat[:, :-1], axis=1)
    used = np.arange(kmat.shape[1])[None, :] < depth[:, None]
    level_s = lat(model, widths, np.arange(kmat.shape[1])[None, :])
    return dict(tokens=tokens, drafted=depth.astype(float), verify=frame["tree_tokens"].to_numpy(float) + 1.0,
                draft_s=(level_s * used).sum(axis=1), verify_model=step.verify_model,
                verify_scale=step.verify_scale, overhead=step.overhead_s)


SCORERS: dict[str, Callable] = {
    "sd": _score_sd,
    "mcsd": _score_mcsd,
}


# ---- the task functions ------------------------------------------------------------------------

@functools.lru_cache(maxsize=8)
def _token_table(path: str):
    from traces.replay import TokenTable
    from traces.schema import read_trace

    frame, _meta = read_trace(path, kind="token")
    return TokenTable.from_frame(frame)


def score(profile: Profile, method: str, configs: pd.DataFrame, setting: Setting) -> pd.DataFrame:
    """`configs` with SCORE_COLUMNS added, scored on `profile` at `setting`."""
    if method not in SCORERS:
        raise InputError(f"no scorer for method '{method}' (have: {', '.join(SCORERS)})")
    cfg, reason = pick(profile, method, setting.temperature)
    if reason:
        raise InputError(f"{method} on '{profile.name}': {reason}")
    lat = Latency(profile, setting)
    acc = profile.acceptance_model(cfg["acceptance"])
    parts = SCORERS[method](profile, cfg, configs, lat, acc)
    tokens = np.asarray(parts["tokens"], dtype=float)
    scored_by = "closed form"
    if setting.token_trace and method in REPLAY_METHODS:
        tokens = replay_tokens(_token_table(setting.token_trace), method, configs)
        scored_by = "trace replay"
    verify_s = parts["verify_scale"] * lat(parts["verify_model"], parts["verify"])
    step_s = parts["draft_s"] + verify_s + parts["overhead"]
    baseline = lat(profile.target, 1)
    out = configs.copy()
    out.insert(0, "method", method)
    out.insert(0, "profile", profile.name)
    out["speedup"] = tokens * baseline / step_s
    out["tokens_per_step"] = tokens
    out["verified_per_step"] = np.asarray(parts["verify"], dtype=float)
    out["draft_cost"] = parts["draft_s"] / baseline
    out["draft_forwards"] = np.asarray(parts["drafted"], dtype=float)
    out["step_s"] = step_s
    out["tokens_per_s"] = setting.batch * tokens / step_s
    out["scored_by"] = scored_by
    return out


def replay_tokens(table, method: str, configs: pd.DataFrame) -> np.ndarray:
    """Mean accepted length of every configuration by exact greedy replay of a TokenTrace."""
    from traces.replay import replay_summary

    rows = [{k: (list(v) if isinstance(v, tuple) else v) for k, v in r.items()}
            for r in configs[[c for c in CONFIG_KEYS[method] if c != "replacement"]].to_dict("records")]
    return replay_summary(table, method, rows)["mean_accepted"].to_numpy(float)


def score_task(task: ScoreTask) -> pd.DataFrame:
    """Executor entry point: score one chunk."""
    profile = Profile.from_dict(task.profile, source=task.profile.get("name", "profile"))
    return score(profile, task.method, task.configs, task.setting)


def sim_config(method: str, config: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    """A scored row's hyperparameters as a `simulator.methods` config."""
    out = dict(base)
    for key, value in config.items():
        if isinstance(value, (np.integer,)):
            value = int(value)
        elif isinstance(value, (np.floating,)):
            value = float(value)
        elif isinstance(value, (np.bool_,)):
            value = bool(value)
        out[key] = list(value) if isinstance(value, tuple) else value
    if method == "coral" and not out.get("groups"):
        out.pop("groups", None)
        out.pop("top_n", None)
    out.pop("prompt_ngrams", None)
    return out


def simulate_task(task: SimTask) -> dict[str, float]:
    """Executor entry point: the simulator's speedup over `repeats` seeded runs (mean, p05, p95)."""
    from simulator.stream import simulate_stream

    profile = Profile.from_dict(task.profile, source=task.profile.get("name", "profile"))
    base, _ = pick(profile, task.method, task.setting.temperature)
    config = sim_config(task.method, task.config, base)
    speedups, tps = [], []
    for r in range(task.repeats):
        summary = simulate_stream(profile, task.method, config, n_tokens=task.n_tokens, seed=task.seed * 1000 + r,
                                  prompt_len=max(1, task.setting.ctx_len)).summary
        speedups.append(summary["speedup"])
        tps.append(summary["tokens_per_step"])
    s = np.asarray(speedups)
    return {"sim_speedup": float(s.mean()), "sim_p05": float(np.quantile(s, 0.05)),
            "sim_p95": float(np.quantile(s, 0.95)), "sim_tokens_per_step": float(np.mean(tps))}


def paper_choices(tables: dict[str, pd.DataFrame], best: pd.DataFrame) -> pd.DataFrame | None:
    """The sweep's best beside the papers' own choices (filled in `experiments.papers`)."""
    try:
        from experiments.papers import compare
    except ImportError:
        return None
    return compare(tables, best)
