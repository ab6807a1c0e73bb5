"""One method-agnostic decode step: draft forwards -> verify forward -> overhead, plus acceptance.

`build_step_model(profile, method, config)` turns any method of the catalogue (ar, sd, mcsd,
cape, glide, lookahead, kangaroo, coral) and its configuration into a `StepModel`:
  * `draft_parts[i]`: what the i-th sequential draft forward runs, as (model, query tokens, cost
    scale) parts; it is paid only when the step drafted more than i positions;
  * `verify_model` / `verify_scale`: the model whose forward verifies (query tokens per sequence
    come from the draws), and the share of that forward that runs (Kangaroo skips its shallow
    layers);
  * `sampler`: the acceptance draws (`simulator.acceptance`);
  * `overhead_s`: fixed seconds per step (sampling, tree building, cache edits).
Latency is always the Profile's fitted model (`profile.latency_model(name).predict`), never a
formula of ours.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from calibrate.profile import Profile
from simulator import acceptance as acc
from common.errors import InputError
from traces.replay import parse_k_config

METHODS = ("ar", "sd", "mcsd", "cape", "glide", "lookahead", "kangaroo", "coral")
# drafter kind each method looks for when the config names no drafter
DEFAULT_DRAFTER_KIND = {"sd": "draft_model", "mcsd": "draft_model", "cape": "glide", "glide": "glide",
                        "kangaroo": "kangaroo", "coral": "coral", "lookahead": "lookahead"}


@dataclass
class StepModel:
    method: str
    config: dict[str, Any]
    target: str
    sampler: Any
    draft_parts: list[list[tuple[str, int, float]]] = field(default_factory=list)
    verify_model: str = ""
    verify_scale: float = 1.0
    overhead_s: float = 0.0
    drafter: str | None = None
    draft_kv_model: str | None = None   # a drafter with its own KV cache (draft_model, coral)

    @property
    def models(self) -> list[str]:
        """Every model whose latency this step needs."""
        names = {self.verify_model}
        for parts in self.draft_parts:
            names.update(m for m, _, _ in parts)
        return sorted(names)

    @property
    def max_drafted(self) -> int:
        return len(self.draft_parts)


def load_profile(profile: Profile | Mapping | str | Path) -> Profile:
    """A Profile from a Profile, a dict in the Profile layout, or a JSON path."""
    if isinstance(profile, Profile):
        return profile
    if isinstance(profile, Mapping):
        return Profile.from_dict(dict(profile))
    return Profile.load(profile)


def parse_config(config: Mapping | str | None) -> dict[str, Any]:
    """A method configuration from a dict or JSON text."""
    if config is None:
        return {}
    if isinstance(config, str):
        try:
            config = json.loads(config) if config.strip() else {}
        except json.JSONDecodeError as exc:
            raise InputError(f"method config is not valid JSON ({exc.msg})") from None
    if not isinstance(config, Mapping):
        raise InputError("method config must be a JSON object")
    return dict(config)


def _int(config: dict, key: str, default: int | None = None, low: int = 0) -> int:
    value = config.get(key, default)
    if value is None:
        raise InputError(f"method config needs '{key}'")
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < low:
        raise InputError(f"config '{key}' must be an integer >= {low}, got {value!r}")
    return int(value)


def _pick_drafter(profile: Profile, method: str, config: dict) -> tuple[str, dict]:
    name = config.get("drafter")
    if name is not None:
        return name, profile.drafter(name)
    want = DEFAULT_DRAFTER_KIND[method]
    for name, spec in profile.drafters.items():
        if spec.get("kind") == want:
            return name, spec
    raise InputError(f"profile '{profile.name}' has no drafter of kind '{want}' for method {method}; set config 'drafter'")


def _acceptance(profile: Profile, config: dict, drafter: str):
    """The calibrated acceptance model (calibrate.acceptance) the config or the drafter names."""
    key = config.get("acceptance")
    if key is None:
        keys = [k for k, s in profile.acceptance.items()
                if k == drafter or s.get("drafter") == drafter or k.startswith(f"{drafter}/")]
        if "dataset" in config:
            keys = [k for k in keys if profile.acceptance[k].get("dataset") == config["dataset"]]
        if len(keys) > 1:
            raise InputError(f"drafter '{drafter}' has several acceptance models ({', '.join(sorted(keys))}); "
                             "set config 'acceptance' or 'dataset'")
        key = keys[0] if keys else drafter
    return key, profile.acceptance_model(key)


def _need(model, part: str, method: str):
    if not model.has(part):
        raise InputError(f"acceptance model '{model.name}' lacks '{part}', which method {method} needs")
    return getattr(model, part)


def _chain_sampler(model, gamma: int, method: str, config: dict, scale: float = 1.0):
    """Independent per-position draws (beta_i), or the bursty Markov chain when configured."""
    if config.get("acceptance_model") == "markov":
        markov = _need(model, "markov", method)
        return acc.MarkovChainSampler(gamma, markov.p_aa, markov.p_ra)
    return acc.ChainSampler(gamma, np.clip(model.beta(gamma) * scale, 0.0, 1.0))


def build_step_model(profile, method: str, config: Mapping | str | None = None) -> StepModel:
    """The step model of `method` with `config` on `profile` (see module docstring)."""
    profile = load_profile(profile)
    config = parse_config(config)
    if method not in METHODS:
        raise InputError(f"unknown method '{method}' (known: {', '.join(METHODS)})")
    target = profile.target
    overhead = float(config.get("overhead_s", 0.0))
    if overhead < 0:
        raise InputError(f"config 'overhead_s' must be >= 0, got {overhead}")
    base = dict(method=method, config=config, target=target, verify_model=target, overhead_s=overhead)
    if method == "ar":
        return StepModel(sampler=acc.AutoregressiveSampler(), **base)
    if method == "lookahead":
        return _lookahead(profile, config, base)
    drafter, dspec = _pick_drafter(profile, method, config)
    key, model_acc = _acceptance(profile, config, drafter)
    gamma_default = 5 if method in ("glide", "cape") else (6 if method == "kangaroo" else 4)
    if method == "mcsd":
        ks = parse_k_config(config.get("k", config.get("k_config", "2x2x1")))
        without = not config.get("replacement", True)
        _need(model_acc, "alpha_at_k_without_replacement" if without else "alpha_at_k", method)
        level = np.atleast_1d(model_acc.alpha_at(np.asarray(ks), without_replacement=without))
        widths = np.concatenate([[1], np.cumprod(ks)[:-1]]).astype(int)
        model = dspec.get("model", drafter)
        return StepModel(sampler=acc.TreeSampler(ks, level),
                         draft_parts=[[(model, int(w), 1.0)] for w in widths],
                         drafter=drafter, draft_kv_model=model, **base)
    gamma = _int(config, "gamma", gamma_default, low=1)
    if method == "kangaroo":
        return _kangaroo(profile, config, base, drafter, dspec, model_acc, gamma)
    if method == "coral":
        return _coral(config, base, drafter, dspec, model_acc, gamma)
    model = dspec.get("model", drafter)
    parts = [[(model, 1, 1.0)] for _ in range(gamma)]
    own_kv = model if dspec.get("kind") == "draft_model" else None  # GLIDE reads the target's cache
    if method == "cape" or (method == "glide" and "bins" in config):
        bins = config.get("bins")
        if bins is None:
            raise InputError(f"method {method} with CAPE needs config 'bins' (11 expansion sizes)")
        conf = _need(model_acc, "conf_bins", method)
        sampler = acc.CapeSampler(gamma, list(bins), conf.freq, conf.topk_hit)
    else:
        sampler = _chain_sampler(model_acc, gamma, method, config)
    return StepModel(sampler=sampler, draft_parts=parts, drafter=drafter, draft_kv_model=own_kv, **base)


def _lookahead(profile: Profile, config: dict, base: dict) -> StepModel:
    W, N, G = (_int(config, k, d, low=1) for k, d in (("W", 5), ("N", 5), ("G", 5)))
    if N < 2:
        raise InputError(f"lookahead N must be >= 2, got {N}")
    key = config.get("acceptance")
    if key is None:
        key = next((k for k, s in profile.acceptance.items() if s.get("lookahead")), None)
    if key is None:
        raise InputError(f"profile '{profile.name}' has no acceptance model with 'lookahead' numbers")
    la = _need(profile.acceptance_model(key), "lookahead", "lookahead")
    return StepModel(sampler=acc.LookaheadSampler(W, N, G, la.alpha, la.f), **base)


def _kangaroo(profile, config, base, drafter, dspec, model_acc, gamma) -> StepModel:
    """Self-draft: the target's first `exit_layer` layers plus an adapter per draft position (or
    the drafter's own `model` when the Profile prices it whole); the verify forward runs the
    remaining layers, the target's fitted forward scaled by their share."""
    n_layers = int(profile.models[base["target"]].get("n_layers", 0))
    exit_layer = int(config.get("exit_layer", dspec.get("exit_layer", 0)))
    if not 0 < exit_layer < n_layers:
        raise InputError(f"kangaroo exit_layer must lie in 1..{n_layers - 1}, got {exit_layer}")
    share = exit_layer / n_layers
    if dspec.get("model"):
        part = [(dspec["model"], 1, 1.0)]
    else:
        adapter = dspec.get("adapter_model")
        part = [(base["target"], 1, share)] + ([(adapter, 1, 1.0)] if adapter else [])
    eta = float(config.get("eta", 0.6))
    if eta > 0:
        conf = _need(model_acc, "conf_bins", "kangaroo")
        sampler = acc.EarlyExitSampler(gamma, eta, conf.freq, conf.hit(1))
    else:
        sampler = _chain_sampler(model_acc, gamma, "kangaroo", config)
    base = dict(base, verify_scale=1.0 - share)
    return StepModel(sampler=sampler, draft_parts=[list(part) for _ in range(gamma)], drafter=drafter, **base)


def _coral(config, base, drafter, dspec, model_acc, gamma) -> StepModel:
    """Feature drafter + LM head; with a router of N groups and top-n active, the head runs n/N of
    its vocabulary and each drafted token survives routing with the router's recall (config
    'router_recall', or the acceptance entry's router_recall["N/n"])."""
    model = dspec.get("model", drafter)
    head = dspec.get("head_model")
    share, recall = 1.0, 1.0
    if config.get("groups") is not None:
        groups, top_n = _int(config, "groups", low=1), _int(config, "top_n", 1, low=1)
        if top_n > groups:
            raise InputError(f"coral top_n ({top_n}) exceeds groups ({groups})")
        if not head:
            raise InputError(f"coral router needs the drafter's 'head_model' latency to price top_n/groups")
        share = top_n / groups
        recall = config.get("router_recall", model_acc.extra.get("router_recall", {}).get(f"{groups}/{top_n}"))
        if recall is None:
            raise InputError(f"acceptance model '{model_acc.name}' has no router_recall for "
                             f"'{groups}/{top_n}'; set config 'router_recall'")
        recall = acc._check_prob(recall, "router_recall")
    part = [(model, 1, 1.0)] + ([(head, 1, share)] if head else [])
    sampler = _chain_sampler(model_acc, gamma, "coral", config, scale=recall)
    return StepModel(sampler=sampler, draft_parts=[list(part) for _ in range(gamma)], drafter=drafter,
                     draft_kv_model=model, **base)
