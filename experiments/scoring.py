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
    "lookahead": ("W", "N", "G"),
    "kangaroo": ("exit_layer", "gamma", "eta"),
    "coral": ("groups", "top_n", "gamma"),
}
INTEGER_KEYS = {"gamma", "W", "N", "G", "exit_layer", "groups", "top_n"}
REPLAY_METHODS = ("sd", "mcsd", "cape", "kangaroo")
MCSD_K_MAX = 32


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
    """The simulator's step model of one configuration: which forwards a step runs (models, scales)."""
    from simulator.methods import build_step_model

    return build_step_model(profile, method, config)


def _level_seconds(lat: Latency, parts, depth: int) -> np.ndarray:
    """(depth,) seconds of draft forward i = 0..depth-1 made of `parts`, context growing by one each."""
    return np.array([float(np.asarray(lat.parts(parts, 1, i)).reshape(-1)[0]) for i in range(depth)])


def _chain(lat: Latency, parts, gamma: np.ndarray, reach: np.ndarray | None = None) -> np.ndarray:
    """Draft seconds of chains of `gamma` forwards; forward i paid with probability reach[:, i] (default 1)."""
    g_max = int(gamma.max())
    paid = (np.arange(g_max)[None, :] < gamma[:, None]).astype(float)
    if reach is not None:
        paid = paid * reach
    return paid @ _level_seconds(lat, parts, g_max)


def _parts(step, tokens, drafted, verify, draft_s) -> dict[str, Any]:
    return dict(tokens=np.asarray(tokens, float), drafted=np.asarray(drafted, float),
                verify=np.asarray(verify, float), draft_s=np.asarray(draft_s, float),
                verify_model=step.verify_model, verify_scale=step.verify_scale, overhead=step.overhead_s)


def _score_sd(profile, base, frame, lat, acc):
    """Leviathan with per-position acceptance: E = 1 + sum_i prod_{j<=i} beta_j."""
    from costmodel.leviathan import expected_tokens_by_position

    gamma = frame["gamma"].to_numpy(np.int64)
    step = _template(profile, "sd", {**base, "gamma": 1})
    tokens = expected_tokens_by_position(acc.beta(int(gamma.max())), gamma)
    return _parts(step, tokens, gamma, gamma + 1, _chain(lat, step.draft_parts[0], gamma))


def _score_mcsd(profile, base, frame, lat, acc):
    """E = 1 + sum_i prod_{j<=i} alpha@k_j (costmodel.trees' expectation, evaluated on the whole
    (configurations x depth) matrix at once through `expected_tokens_by_position`). alpha@k for a
    k the profile did not record is the acceptance model's interpolation (flat past the largest)."""
    from costmodel.leviathan import expected_tokens_by_position
    from costmodel.trees import alpha_at_k_lookup
    from experiments.spaces import level_matrix

    depth = frame["gamma"].to_numpy(np.int64)
    kmat = level_matrix(frame)
    repl = frame["replacement"].to_numpy(bool)
    k_axis = np.arange(1, max(MCSD_K_MAX, int(kmat.max())) + 1)
    beta = np.empty(kmat.shape)
    for mode in (True, False):
        if np.any(repl == mode):
            curve = np.asarray(acc.alpha_at(k_axis, without_replacement=not mode), dtype=float)
            beta[repl == mode] = alpha_at_k_lookup(curve, kmat[repl == mode])
    tokens = expected_tokens_by_position(beta, depth)
    step = _template(profile, "sd", {**base, "gamma": 1})      # one drafter forward, as mcsd's levels
    widths = np.ones_like(kmat)                                # level i drafts prod(k_1..k_{i-1}) sequences
    widths[:, 1:] = np.cumprod(kmat[:, :-1], axis=1)
    used = np.arange(kmat.shape[1])[None, :] < depth[:, None]
    level_s = lat.parts(step.draft_parts[0], widths, np.arange(kmat.shape[1])[None, :])
    return _parts(step, tokens, depth, frame["tree_tokens"].to_numpy(float) + 1.0, (level_s * used).sum(axis=1))


def _score_cape(profile, base, frame, lat, acc):
    """costmodel.cape: E = 1 + hS sum_i h1^(i-1); verify 1 + gamma E[S[bin]]."""
    from costmodel.cape import cape_expected_tokens, cape_verify_tokens

    gamma = frame["gamma"].to_numpy(np.int64)
    bins = np.asarray(list(frame["bins"]), dtype=np.int64)
    conf = acc.conf_bins
    topk = {int(k): v for k, v in conf.topk_hit.items()}
    step = _template(profile, "cape", {**base, "gamma": 1, "bins": [1] * 11})
    tokens = cape_expected_tokens(bins, conf.freq, topk, gamma)
    verify = 1.0 + cape_verify_tokens(bins, conf.freq, gamma)
    return _parts(step, tokens, gamma, verify, _chain(lat, step.draft_parts[0], gamma))


def _score_lookahead(profile, base, frame, lat, acc):
    """costmodel.lookahead Eq. 7: S = (f - 1 + E) / f, one forward of (W + G)(N - 1) + 1 tokens."""
    from costmodel.lookahead import compression_ratio

    la = acc.lookahead
    n, w, g = (frame[c].to_numpy(np.int64) for c in ("N", "W", "G"))
    step = _template(profile, "lookahead", {**base, "W": 1, "N": 2, "G": 1})
    tokens = compression_ratio(la.alpha, la.f, n, w, g)
    return _parts(step, tokens, np.zeros(len(frame)), frame["tokens_per_forward"].to_numpy(float), np.zeros(len(frame)))


def _score_kangaroo(profile, base, frame, lat, acc):
    """costmodel.kangaroo.early_exit where confidence bins are recorded; else (eta = 0) a chain of
    per-position acceptance. Draft forward i (shallow layers + adapter) is paid when drafting got there."""
    from costmodel.kangaroo import early_exit
    from costmodel.leviathan import expected_tokens_by_position

    gamma = frame["gamma"].to_numpy(np.int64)
    eta = frame["eta"].to_numpy(float)
    tokens = np.empty(len(frame))
    drafted = gamma.astype(float)
    reach = np.ones((len(frame), int(gamma.max())))
    chain = eta <= 0
    if chain.any():
        tokens[chain] = expected_tokens_by_position(acc.beta(int(gamma.max())), gamma[chain])
    if (~chain).any():
        conf = acc.conf_bins
        from costmodel.kangaroo import continue_probability
        steps, cr = early_exit(conf.freq, conf.hit(1), eta[~chain][:, None], gamma[~chain][:, None])
        tokens[~chain], drafted[~chain] = cr[:, 0], steps[:, 0]
        c = (conf.freq * continue_probability(eta[~chain])).sum(axis=-1)      # P(drafting goes on)
        reach[~chain] = c[:, None] ** np.arange(reach.shape[1])[None, :]
    layers = frame["exit_layer"].to_numpy(np.int64)
    draft_s = np.empty(len(frame))
    verify_scale = np.empty(len(frame))
    for layer in np.unique(layers):
        rows = layers == layer
        step = _template(profile, "kangaroo", {**base, "gamma": 1, "eta": 0.0, "exit_layer": int(layer)})
        draft_s[rows] = _chain(lat, step.draft_parts[0], gamma[rows], reach[rows])
        verify_scale[rows] = step.verify_scale
    out = _parts(step, tokens, drafted, drafted + 1.0, draft_s)
    out["verify_scale"] = verify_scale
    return out


def _score_coral(profile, base, frame, lat, acc):
    """Chain of the feature drafter (costmodel.leviathan per-position form); a router of N groups,
    top-n active runs n/N of the head and scales each token's acceptance by its recall (CORAL)."""
    from costmodel.leviathan import expected_tokens_by_position

    gamma = frame["gamma"].to_numpy(np.int64)
    groups = frame["groups"].to_numpy(np.int64)
    top_n = frame["top_n"].to_numpy(np.int64)
    tokens = np.empty(len(frame))
    draft_s = np.empty(len(frame))
    recalls = acc.extra.get("router_recall") or {}
    step = None
    built_in = frame["router_built_in"].to_numpy(bool)
    groups = np.where(built_in, 0, groups)     # the drafter's own head already routes: nothing to add
    for pair in sorted(set(zip(groups.tolist(), top_n.tolist()))):
        rows = (groups == pair[0]) & (top_n == pair[1])
        router = {"groups": pair[0], "top_n": pair[1], "router_recall": recalls[f"{pair[0]}/{pair[1]}"]} if pair[0] else {}
        step = _template(profile, "coral", {**base, "gamma": 1, **router})
        recall = router.get("router_recall", 1.0)
        tokens[rows] = expected_tokens_by_position(np.clip(acc.beta(int(gamma.max())) * recall, 0, 1), gamma[rows])
        draft_s[rows] = _chain(lat, step.draft_parts[0], gamma[rows])
    return _parts(step, tokens, gamma, gamma + 1.0, draft_s)


SCORERS: dict[str, Callable] = {
    "sd": _score_sd,
    "mcsd": _score_mcsd,
    "cape": _score_cape,
    "lookahead": _score_lookahead,
    "kangaroo": _score_kangaroo,
    "coral": _score_coral,
}


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
