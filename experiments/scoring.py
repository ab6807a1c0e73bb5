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
from typing import Any

import numpy as np
import pandas as pd

from calibrate.profile import Profile
from experiments.scorers import SCORERS, Latency
from common.errors import InputError

SCORE_COLUMNS = ["speedup", "tokens_per_step", "verified_per_step", "draft_cost", "draft_forwards",
                 "step_s", "tokens_per_s", "scored_by"]

# hyperparameter columns of each method's space that make up its simulator config
CONFIG_KEYS: dict[str, tuple[str, ...]] = {
    "sd": ("gamma",),
    "mcsd": ("k", "replacement"),
    "cape": ("gamma", "bins"),
    "lookahead": ("W", "N", "G"),
    "kangaroo": ("exit_layer", "gamma", "eta"),
    "coral": ("groups", "top_n", "gamma"),
}
INTEGER_KEYS = {"gamma", "W", "N", "G", "exit_layer", "groups", "top_n"}
REPLAY_METHODS = ("sd", "mcsd", "cape", "kangaroo")


@dataclass(frozen=True)
class Setting:
    """What every configuration is scored at."""

    temperature: float | None = None    # None: each profile's lowest recorded temperature
    batch: int = 1
    ctx_len: int = 512
    dataset: str | None = None          # None: MT-Bench where recorded, else the first listed
    token_trace: str | None = None


@dataclass
class ScoreTask:
    """One executor task: a chunk of one method's space on one profile (all picklable)."""

    profile: dict[str, Any]
    method: str
    base: dict[str, Any]          # drafter and acceptance key (from `setups`)
    configs: pd.DataFrame
    setting: Setting


@dataclass
class SimTask:
    """One executor task: re-score one configuration in the simulator with `repeats` seeds."""

    profile: dict[str, Any]
    method: str
    config: dict[str, Any]        # a simulator.methods config (drafter and acceptance included)
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

NEEDS = {"mcsd": "alpha_at_k", "cape": "conf_bins", "lookahead": "lookahead"}


def _temperatures(profile: Profile) -> list[float]:
    return sorted({float(s.get("temperature", 0.0)) for s in profile.acceptance.values()})


def temperature_for(profile: Profile, setting: Setting) -> float:
    """The requested temperature, or (when none was asked) the profile's lowest recorded one."""
    if setting.temperature is not None:
        return float(setting.temperature)
    temps = _temperatures(profile)
    return temps[0] if temps else 0.0


def setups(profile: Profile, method: str, setting: Setting) -> tuple[list[dict[str, Any]], str | None]:
    """Every (drafter, acceptance model) the method can run with on `profile` at `setting`.

    One setup per drafter of the method's kind with an acceptance entry at the temperature that
    holds what the method needs; per drafter the entry of `setting.dataset` (default: an MT-Bench
    entry where there is one, else the first listed). Returns (setups, None) or ([], why not).
    """
    from simulator.methods import DEFAULT_DRAFTER_KIND

    temperature = temperature_for(profile, setting)
    need = NEEDS.get(method)
    kinds = ("glide", "draft_model") if method == "cape" else (DEFAULT_DRAFTER_KIND[method],)
    drafters = ([(None, None)] if method == "lookahead"
                else [(d, s) for d, s in profile.drafters.items() if s.get("kind") in kinds])
    found = []
    for drafter, _spec in drafters:
        keys = [k for k, a in profile.acceptance.items()
                if abs(float(a.get("temperature", 0.0)) - temperature) < 1e-6
                and (drafter is None or a.get("drafter") == drafter) and (need is None or a.get(need) is not None)]
        if setting.dataset:
            keys = [k for k in keys if profile.acceptance[k].get("dataset") == setting.dataset]
        if not keys:
            continue
        key = next((k for k in keys if "mt-bench" in str(profile.acceptance[k].get("dataset", ""))), keys[0])
        base = {"acceptance": key} if drafter is None else {"drafter": drafter, "acceptance": key}
        found.append(base)
    if found:
        return found, None
    what = "acceptance model" + (f" with {need}" if need else "")
    where = f" of dataset '{setting.dataset}'" if setting.dataset else ""
    by = "" if method == "lookahead" else f"{'/'.join(kinds)} drafter with "
    return [], f"no {by}{what}{where} at temperature {temperature:g}"


def not_applicable(profile: Profile, method: str, setting: Setting) -> str | None:
    """Why `method` cannot be scored on `profile` at `setting`, or None."""
    _, reason = setups(profile, method, setting)
    if reason is None and setting.token_trace and method in REPLAY_METHODS and temperature_for(profile, setting) > 0:
        return "exact trace replay is greedy only; use --temperature 0 with --token-trace"
    return reason


def mcsd_modes(profile: Profile, base: dict[str, Any]) -> tuple[bool, ...]:
    """Replacement modes the acceptance model records alpha@k for (with; without when recorded)."""
    spec = profile.acceptance[base["acceptance"]]
    return (True, False) if spec.get("alpha_at_k_without_replacement") else (True,)


def cape_values(profile: Profile, base: dict[str, Any], most: int = 5) -> tuple[int, ...]:
    """Candidate counts a CAPE bin entry may take: the top-K rows the acceptance model records."""
    ks = sorted(int(k) for k in profile.acceptance[base["acceptance"]]["conf_bins"]["topk_hit"])
    return tuple(ks[:most])


def kangaroo_space_args(profile: Profile, base: dict[str, Any]) -> dict[str, Any]:
    """Exit layer of the drafter; eta searched only where confidence bins are recorded (else eta = 0)."""
    spec = profile.drafters[base["drafter"]]
    args: dict[str, Any] = {"exit_layers": (int(spec.get("exit_layer", 2)),)}
    if profile.acceptance[base["acceptance"]].get("conf_bins") is None:
        args["etas"] = (0.0,)
    return args


def coral_space_args(profile: Profile, base: dict[str, Any]) -> dict[str, Any]:
    """(groups, top_n) pairs the profile can score: those with a recorded router recall, or the
    drafter's own built-in router."""
    router = profile.drafters[base["drafter"]].get("router")
    if router:
        return {"built_in": (int(router["groups"]), int(router["top_n"]))}
    spec = profile.acceptance[base["acceptance"]]
    return {"pairs": sorted(tuple(int(v) for v in key.split("/")) for key in (spec.get("router_recall") or {}))}


# ---- the task functions ------------------------------------------------------------------------

@functools.lru_cache(maxsize=8)
def _token_table(path: str):
    from traces.replay import TokenTable
    from traces.schema import read_trace

    frame, _meta = read_trace(path, kind="token")
    return TokenTable.from_frame(frame)


def score(profile: Profile, method: str, base: dict[str, Any], configs: pd.DataFrame, setting: Setting) -> pd.DataFrame:
    """`configs` with SCORE_COLUMNS added: `method` with drafter/acceptance `base` on `profile`."""
    if method not in SCORERS:
        raise InputError(f"unknown method '{method}' (known: {', '.join(SCORERS)})")
    lat = Latency(profile, setting)
    acc = profile.acceptance_model(base["acceptance"])
    try:
        parts = SCORERS[method](profile, base, configs, lat, acc)
    except ValueError as exc:   # costmodel's one-line input errors
        raise InputError(f"{method} on '{profile.name}' ({base['acceptance']}): {exc}") from None
    tokens = parts["tokens"]
    scored_by = "closed form"
    if setting.token_trace and method in REPLAY_METHODS:
        tokens = replay_tokens(_token_table(setting.token_trace), method, configs)
        scored_by = "trace replay"
    verify_s = parts["verify_scale"] * lat(parts["verify_model"], parts["verify"])
    step_s = parts["draft_s"] + verify_s + parts["overhead"]
    baseline = lat(profile.target, 1)
    out = configs.copy()
    spec = profile.acceptance[base["acceptance"]]
    for i, (col, value) in enumerate((("profile", profile.name), ("method", method), ("target", profile.target),
                                      ("drafter", base.get("drafter", "-")), ("dataset", spec.get("dataset", "")),
                                      ("temperature", float(spec.get("temperature", 0.0))),
                                      ("acceptance", base["acceptance"]))):
        out.insert(i, col, value)
    out["speedup"] = tokens * baseline / step_s
    out["tokens_per_step"] = tokens
    out["verified_per_step"] = parts["verify"]
    out["draft_cost"] = parts["draft_s"] / baseline
    out["draft_forwards"] = parts["drafted"]
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
    return score(profile, task.method, task.base, task.configs, task.setting)


def sim_config(method: str, row: dict[str, Any]) -> dict[str, Any]:
    """A scored row as a `simulator.methods` config (drafter and acceptance key included)."""
    out: dict[str, Any] = {}
    for key in CONFIG_KEYS[method] + ("drafter", "acceptance"):
        value = row.get(key)
        if value is None or (key == "drafter" and value == "-"):
            continue
        if isinstance(value, np.generic):
            value = value.item()
        if key in INTEGER_KEYS:
            value = int(value)      # a row of a table mixing methods holds them as floats
        out[key] = list(value) if isinstance(value, (tuple, np.ndarray)) else value
    if method == "coral" and (not out.get("groups") or row.get("router_built_in")):
        out.pop("groups", None)
        out.pop("top_n", None)
    return out


def _simulable(profile: Profile, method: str, config: dict[str, Any]) -> Profile:
    """The profile the simulator needs for `config`: mcsd levels whose k the profile did not record
    get the acceptance model's own interpolated alpha@k (the value the closed form used); a router
    configuration gets its recorded recall."""
    if method != "mcsd":
        return profile
    raw = profile.to_dict()
    key = config["acceptance"]
    acc = profile.acceptance_model(key)
    field = "alpha_at_k" if config.get("replacement", True) else "alpha_at_k_without_replacement"
    ks = sorted({int(k) for k in str(config["k"]).split("x")})
    table = dict(raw["acceptance"][key].get(field) or {})
    for k in ks:
        table.setdefault(str(k), float(acc.alpha_at(k, without_replacement=field != "alpha_at_k")))
    raw["acceptance"] = {**raw["acceptance"], key: {**raw["acceptance"][key], field: table}}
    return Profile.from_dict(raw, source=profile.name)


def simulate_task(task: SimTask) -> dict[str, float]:
    """Executor entry point: the simulator's speedup over `repeats` seeded runs (mean, p05, p95)."""
    from simulator.stream import simulate_stream

    profile = Profile.from_dict(task.profile, source=task.profile.get("name", "profile"))
    profile = _simulable(profile, task.method, task.config)
    config = dict(task.config)
    if task.method == "coral" and config.get("groups"):
        spec = profile.acceptance[config["acceptance"]]
        config["router_recall"] = spec["router_recall"][f"{config['groups']}/{config['top_n']}"]
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
