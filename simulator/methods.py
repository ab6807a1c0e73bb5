"""One method-agnostic decode step, read from the method registry (`methods`).

`build_step_model(profile, method, config)` turns any registered method and its configuration into
a `StepModel`: the method's typed config, its Setup on the Profile (target, drafter, acceptance
entry), the step's shape (`spec.step_shape`, a one-configuration `costmodel.step.StepShape`: which
forwards a step runs, priced by `simulator.costs` through `costmodel.step`) and its acceptance
sampler (`spec.sampler`, `methods.draws`). Nothing here is specific to one method.

A config is a MethodConfig, a label ('sd g4'), or a mapping / JSON text holding the method's keys
(strict: `spec.config.from_dict`) plus the simulator's setup options (SETUP_OPTIONS).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

import methods
from profiles.profile import Profile
from common.errors import InputError
from costmodel.step import StepShape
from methods.config import MethodConfig
from methods.spec import Setup

ACCEPTANCE_MODELS = ("independent", "markov")
# the simulator's own keys beside a method's config: which setup it runs on and how it draws
SETUP_OPTIONS = {
    "drafter": "drafter name on the Profile (default: the first of the method's kinds with acceptance)",
    "acceptance": "acceptance entry key (default: the drafter's, MT-Bench first)",
    "dataset": "pick the acceptance entry of this dataset",
    "temperature": "pick the acceptance entry at this temperature (default: the lowest recorded)",
    "overhead_s": "fixed seconds per step (sampling, tree building, cache edits)",
    "acceptance_model": "'independent' per-position draws or the bursty 'markov' chain",
}                      # and the numbers a method's own sampler takes (`MethodSpec.sampler_options`)


@dataclass(frozen=True)
class StepModel:
    """A method's step on one Profile: config, setup, the step's shape and its sampler."""

    method: str
    config: MethodConfig
    setup: Setup
    shape: StepShape
    sampler: Any

    @property
    def target(self) -> str:
        return self.setup.target

    @property
    def drafter(self) -> str | None:
        return self.setup.drafter

    @property
    def models(self) -> list[str]:
        """Every model whose latency this step needs."""
        return self.shape.models

    @property
    def priced_models(self) -> list[str]:
        """Every model whose latency pricing this step reads: its forwards' and the target's (its prefill)."""
        return sorted(set(self.models) | {self.target})

    @property
    def max_drafted(self) -> int:
        return self.shape.max_drafted

    @property
    def overhead_s(self) -> float:
        return float(np.asarray(self.shape.overhead_s, dtype=float).reshape(-1)[0])

    @property
    def draft_kv_model(self) -> str | None:
        """A drafter with its own KV cache (its prefill and memory are paid too)."""
        return self.shape.draft_kv_model

    @property
    def reserve_tokens(self) -> int:
        """KV slots a step reserves per sequence: its tree's nodes, else its drafts, plus the pending token;
        at least the widest tree it may verify (prompt lookup proposes without draft forwards, and vLLM
        reserves its lookahead slots all the same)."""
        dist = self.shape.verify_dist
        widest = np.max(dist[0][dist[1] > 0]) if dist is not None else np.max(self.shape.verify_tokens)
        return max(int(getattr(self.sampler, "nodes", self.max_drafted)) + 1, int(np.ceil(widest)))

    def describe(self) -> dict[str, Any]:
        """The step as summary fields: the config's label and the setup it ran on."""
        return {"config": self.config.label, "drafter": self.setup.drafter, "acceptance": self.setup.acceptance_key}


def load_profile(profile: Profile | Mapping | str | Path) -> Profile:
    """A Profile, or one read from its JSON form (a file, or a dict as a test or notebook writes it)."""
    if isinstance(profile, Profile):
        return profile
    if isinstance(profile, Mapping):
        return Profile.from_dict(dict(profile))
    return Profile.load(profile)


def split_config(method: str, config: MethodConfig | Mapping | str | None = None) -> tuple[MethodConfig, dict[str, Any]]:
    """(the method's typed config, the setup options) of a config; a key that is neither: InputError."""
    spec = methods.get(method)
    typed, options = spec.config.split(config, {**SETUP_OPTIONS, **spec.sampler_options}, "setup")
    return typed, _check_options(options, spec)


def _check_options(options: dict[str, Any], spec) -> dict[str, Any]:
    def number(key, low=0.0, high=math.inf):
        value = options[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
            raise InputError(f"config '{key}' must be a number in [{low:g}, {high:g}], got {value!r}")
        return float(value)

    for key in ("overhead_s", "temperature"):
        if key in options:
            options[key] = number(key)
    for key, (_, low, high) in spec.sampler_options.items():
        if options.get(key) is not None:
            options[key] = number(key, low, high)
    for key in ("drafter", "acceptance", "dataset"):
        if key in options and not isinstance(options[key], str):
            raise InputError(f"config '{key}' must be a name, got {options[key]!r}")
    if options.get("acceptance_model", ACCEPTANCE_MODELS[0]) not in ACCEPTANCE_MODELS:
        raise InputError(f"config 'acceptance_model' must be one of {', '.join(ACCEPTANCE_MODELS)}, "
                         f"got {options['acceptance_model']!r}")
    return options


def build_step_model(profile, method: str, config: MethodConfig | Mapping | str | None = None,
                     new_tokens: int | None = None, **options) -> StepModel:
    """The step model of `method` with `config` on `profile` (see the module docstring); keyword
    `options` are setup options too and win over the config's. `new_tokens`: the tokens one stream's
    decode steps commit, for the samplers whose draws depend on it (None: requests of many lengths)."""
    profile = load_profile(profile)
    spec = methods.get(method)
    known = {**SETUP_OPTIONS, **spec.sampler_options}
    unknown = [k for k in options if k not in known]
    if unknown:
        raise InputError(f"unknown simulator option '{unknown[0]}' (known: {', '.join(known)})")
    typed, given = split_config(method, config)
    opts = {**given, **_check_options(dict(options), spec)}
    setup = profile.setups_for(spec, temperature=opts.get("temperature"), dataset=opts.get("dataset"),
                               drafter=opts.get("drafter"), acceptance=opts.get("acceptance"),
                               overhead_s=opts.get("overhead_s", 0.0))[0]
    try:
        shape = spec.priced_shape(setup, spec.frame_of([typed]))
        sampler = spec.sampler(setup, typed, new_tokens=new_tokens,
                               acceptance_model=opts.get("acceptance_model", ACCEPTANCE_MODELS[0]),
                               **{k: opts[k] for k in spec.sampler_options if opts.get(k) is not None})
    except ValueError as exc:     # costmodel's one-line input errors
        raise InputError(f"{typed.label} on '{profile.name}' ({setup.acceptance_key}): {exc}") from None
    return StepModel(method, typed, setup, shape, sampler)
