"""The Profile contract: everything the cost models and the simulator need about one deployment.

A Profile is JSON with a schema version. It names one hardware and one target, the drafters that
can be paired with it, a fitted latency model per model, acceptance models per (drafter, data,
temperature), and provenance. Loading validates every required field and names the first
problem in a one-line InputError.

Layout (schema_version 1)::

    {
      "schema_version": 1,
      "name": "vicuna-7b + llama-68m on A100-80G (MCSD paper)",
      "hardware": "A100-80G",              # a costmodel.hardware name
      "dtype": "fp16",
      "target": "vicuna-7b",               # a key of "models"
      "models": {                           # name -> architecture numbers (runtime.models registry form)
        "vicuna-7b": {"n_layers": 32, "hidden": 4096, "intermediate": 11008, "n_heads": 32,
                      "n_kv_heads": 32, "vocab": 32000, "params": 6.74e9, ...}, ...},
      "latency": {                          # name -> latency model (calibrate.latency), seconds per forward
        "vicuna-7b": {"kind": "roofline", "params": {...}, "fit": {"mape_train": .., "mape_heldout": ..}}, ...},
      "drafters": {                         # drafter name -> how it drafts (kinds: `drafter_kinds()`)
        "llama-68m": {"kind": "draft_model", "model": "llama-68m"},
        "glide":     {"kind": "glide", "model": "glide-1l"},
        "eagle":     {"kind": "coral", "model": "eagle-1l", "head_model": "eagle-head"}},  # + "engine_method" (methods.coral)
      "acceptance": {                       # key -> acceptance model (calibrate.acceptance)
        "llama-68m": {"drafter": "llama-68m", "temperature": 0.0, "dataset": "mt-bench",
                      "alpha": 0.62,                    # per-token acceptance probability E[sum min(p, q)]
                      "alpha_by_position": [...],       # optional: beta_i, i = 1..G
                      "alpha_by_position_at_gamma": {"1": [...], ...},   # optional: in chains of each G
                      "alpha_at_k": {"1": .., "2": .., "4": ..},   # optional: MCSD alpha@k
                      "alpha_at_k_without_replacement": {...},     # optional
                      "conf_bins": {"freq": [11], "topk_hit": {"1": [11], "2": [11], ...}},  # optional
                      "markov": {"p_aa": .., "p_ra": ..},          # optional bursty model
                      "<method>": {...},        # optional: a method's own part (calibrate.acceptance)
                      "source": "MCSD Table 1"}},
      "engine": {                           # optional: what the engine pays beyond the isolated forwards
        "methods": {"sd": {"verify_scale": .., "verify_fixed_s": .., "draft_scale": .., "draft_per_forward_s": ..,
                           "overhead_s": .., "overhead_per_token_s": ..}, ...},   # costmodel.step.StepCalibration
        "pooled": {...},                    # the same fitted over every method (methods without traces)
        "fit": {"heldout": {...}, ...}},    # calibrate.engine: leave-one-configuration-out errors
      "workload": {                         # optional: the context the traces saw, per dataset
        "mt-bench": {"prompt_tokens": 105.0, "new_tokens": 64.0}},
      "provenance": {"traces": [...], "commit": "...", "created": "...", "sources": [...],
                     "calibration_prompts": ["mtbench/81", ...]}   # prompts the profile was fitted on
    }
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common import atomic
from common.errors import InputError

PROFILE_SCHEMA_VERSION = 1
REQUIRED_FIELDS = ("schema_version", "name", "hardware", "dtype", "target", "models", "latency", "acceptance")


def drafter_kinds() -> list[str]:
    """Profile drafter kinds: those the registered methods run with, and the name of a method
    that keeps its acceptance under a drafter of its own name (a part of its own, no model)."""
    import methods

    kinds = {k for s in methods.specs() for k in s.drafter_kinds} | {s.name for s in methods.specs() if s.needs == s.name}
    return sorted(kinds | {"self"})


@dataclass
class Profile:
    name: str
    hardware: str
    dtype: str
    target: str
    models: dict[str, dict[str, Any]]
    latency: dict[str, dict[str, Any]]
    acceptance: dict[str, dict[str, Any]]
    drafters: dict[str, dict[str, Any]] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    engine: dict[str, Any] = field(default_factory=dict)
    workload: dict[str, Any] = field(default_factory=dict)
    schema_version: int = PROFILE_SCHEMA_VERSION

    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    # ---- typed queries (parsed once, cached) -----------------------------------------------
    def latency_model(self, model: str):
        """The fitted latency model of `model`: `.predict(n_tokens, ctx_len, batch=1)` in seconds."""
        from calibrate.latency import latency_model_from_dict

        if model not in self.latency:
            raise InputError(
                f"profile '{self.name}' has no latency model for '{model}' (has: {', '.join(sorted(self.latency)) or 'none'})"
            )
        key = ("latency", model)
        if key not in self._cache:
            self._cache[key] = latency_model_from_dict(self.latency[model], name=model)
        return self._cache[key]

    def acceptance_model(self, key: str):
        """The acceptance model stored under `key` (calibrate.acceptance.AcceptanceModel)."""
        from calibrate.acceptance import AcceptanceModel

        if key not in self.acceptance:
            raise InputError(
                f"profile '{self.name}' has no acceptance model '{key}' (has: {', '.join(sorted(self.acceptance)) or 'none'})"
            )
        cached = ("acceptance", key)
        if cached not in self._cache:
            self._cache[cached] = AcceptanceModel.from_dict(self.acceptance[key], name=key)
        return self._cache[cached]

    def seconds(self, model: str, n_tokens, ctx_len, batch=1):
        """Seconds of one forward of `model` over numpy arrays (the step-cost model's latency)."""
        import numpy as np

        return np.asarray(self.latency_model(model).predict(n_tokens, ctx_len, batch), dtype=float)

    def step_calibration(self, method: str):
        """costmodel.step.StepCalibration of `method`: its own fit, else the pooled one, else none."""
        from costmodel.step import StepCalibration

        key = ("engine", method)
        if key not in self._cache:
            raw = self.engine.get("methods", {}).get(method, self.engine.get("pooled"))
            self._cache[key] = StepCalibration.from_dict(raw)
        return self._cache[key]

    def heldout_error(self) -> float | None:
        """Held-out relative error of the engine calibration's predicted speedup (a fraction), if fitted."""
        value = self.engine.get("fit", {}).get("heldout", {}).get("speedup_error_p90")
        return None if value is None else float(value)

    def workload_ctx(self, dataset: str | None) -> float | None:
        """Mean context of a decode step in the traces of `dataset` (prompt + half the new tokens)."""
        if dataset is None:
            dataset = next(iter(self.workload), None)
        entry = self.workload.get(dataset)
        if not entry:
            return None
        return float(entry["prompt_tokens"]) + float(entry["new_tokens"]) / 2.0

    def workload_new_tokens(self, dataset: str | None) -> int | None:
        """Mean new tokens per prompt in the traces of `dataset` (None: no workload recorded)."""
        if dataset is None:
            dataset = next(iter(self.workload), None)
        entry = self.workload.get(dataset)
        return max(1, int(round(float(entry["new_tokens"])))) if entry else None

    def temperatures(self) -> list[float]:
        """Temperatures with recorded acceptance, ascending."""
        return sorted({float(s.get("temperature", 0.0)) for s in self.acceptance.values()})

    def datasets(self) -> list[str]:
        return sorted({str(s["dataset"]) for s in self.acceptance.values() if s.get("dataset")})

    def dataset_named(self, name: str) -> str | None:
        """The recorded dataset a prompt set or trace calls `name` ('mtbench' -> 'mt-bench'), if any."""
        norm = lambda s: str(s).lower().replace("-", "").replace("_", "")
        return next((d for d in self.datasets() if norm(d) == norm(name)), None)

    def drafters_of(self, *kinds: str) -> list[str]:
        """Drafter names of the given kinds, in the Profile's order."""
        return [name for name, spec in self.drafters.items() if spec.get("kind") in kinds]

    def acceptance_for(self, drafter: str | None, *, temperature: float | None = None, dataset: str | None = None,
                       needs: str | None = None) -> list[str]:
        """Acceptance keys of `drafter` (None: any) at `temperature` (None: the lowest recorded),
        of `dataset` (None: any) holding part `needs`; MT-Bench entries first."""
        temperature = self.temperatures()[0] if temperature is None and self.acceptance else temperature
        keys = [k for k, a in self.acceptance.items()
                if (temperature is None or abs(float(a.get("temperature", 0.0)) - float(temperature)) < 1e-6)
                and (drafter is None or a.get("drafter") == drafter or k == drafter or k.startswith(f"{drafter}/"))
                and (needs is None or a.get(needs) is not None)
                and (dataset is None or a.get("dataset") == dataset)]
        return sorted(keys, key=lambda k: "mt-bench" not in str(self.acceptance[k].get("dataset", "")))

    def setups_for(self, spec, *, temperature: float | None = None, dataset: str | None = None,
                   drafter: str | None = None, acceptance: str | None = None, overhead_s: float = 0.0) -> list:
        """Every (drafter, acceptance entry) method `spec` (methods.MethodSpec) can run with here:
        one per drafter of its kinds, each with its first matching acceptance entry. InputError
        saying what is missing when there is none."""
        from methods.spec import Setup

        if not spec.drafter_kinds and not spec.needs:          # plain decoding: the target alone
            return [Setup(self, None, acceptance, overhead_s)]
        if drafter is not None:
            kind = self.drafter(drafter).get("kind")
            if spec.drafter_kinds and kind not in spec.drafter_kinds:
                raise InputError(f"method {spec.name} runs on {'/'.join(spec.drafter_kinds)} drafters; "
                                 f"'{drafter}' is a {kind} drafter")
            drafters = [drafter]
        else:
            drafters = self.drafters_of(*spec.drafter_kinds) if spec.drafter_kinds else [None]
        if acceptance is not None:
            self.acceptance_model(acceptance)
            return [Setup(self, d, acceptance, overhead_s) for d in drafters[:1]]
        found = []
        for name in drafters:
            keys = self.acceptance_for(name, temperature=temperature, dataset=dataset, needs=spec.needs)
            if keys:
                found.append(Setup(self, name, keys[0], overhead_s))
        if not found:
            kinds = "/".join(spec.drafter_kinds)
            by = f"{kinds} drafter with " if kinds else ""
            what = "acceptance model" + (f" with {spec.needs}" if spec.needs else "")
            where = f" of dataset '{dataset}'" if dataset else ""
            temp = temperature if temperature is not None else (self.temperatures() or [0.0])[0]
            raise InputError(f"profile '{self.name}' has no {by}{what}{where} at temperature {temp:g} for method {spec.name}")
        return found

    def drafter(self, name: str) -> dict[str, Any]:
        if name not in self.drafters:
            raise InputError(
                f"profile '{self.name}' has no drafter '{name}' (has: {', '.join(sorted(self.drafters)) or 'none'})"
            )
        return self.drafters[name]

    # ---- IO -----------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "name": self.name,
            "hardware": self.hardware,
            "dtype": self.dtype,
            "target": self.target,
            "models": self.models,
            "latency": self.latency,
            "drafters": self.drafters,
            "acceptance": self.acceptance,
            "provenance": self.provenance,
            **({"engine": self.engine} if self.engine else {}),
            **({"workload": self.workload} if self.workload else {}),
        }

    def save(self, path: str | Path) -> Path:
        validate_profile_dict(self.to_dict(), source=str(path))
        return atomic.write_json(path, self.to_dict())

    @classmethod
    def from_dict(cls, raw: dict[str, Any], source: str = "profile") -> "Profile":
        validate_profile_dict(raw, source)
        return cls(
            name=raw["name"],
            hardware=raw["hardware"],
            dtype=raw["dtype"],
            target=raw["target"],
            models=raw["models"],
            latency=raw["latency"],
            acceptance=raw["acceptance"],
            drafters=raw.get("drafters", {}),
            provenance=raw.get("provenance", {}),
            engine=raw.get("engine", {}),
            workload=raw.get("workload", {}),
            schema_version=raw["schema_version"],
        )

    @classmethod
    def load(cls, path: str | Path) -> "Profile":
        p = Path(path)
        if not p.exists():
            raise InputError(f"profile file not found: {p}")
        try:
            raw = json.loads(p.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise InputError(f"{p}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
        except UnicodeDecodeError:
            what = "a parquet file" if p.read_bytes()[:4] == b"PAR1" else "binary, not JSON text"
            raise InputError(f"{p}: {what}, not a Profile (a Profile is a .json file)") from None
        return cls.from_dict(raw, source=str(p))


def validate_profile_dict(raw: Any, source: str = "profile") -> None:
    """Raise InputError naming `source` and the first missing or malformed field of a profile dict:
    every field is checked here, where the Profile is read, in its physical range (the latency and
    acceptance models are built once to check them), so a bad value never reaches an answer."""
    if not isinstance(raw, dict):
        raise InputError(f"{source}: a profile must be a JSON object")
    for key in REQUIRED_FIELDS:
        if key not in raw:
            raise InputError(f"{source}: profile is missing field '{key}'")
    if raw["schema_version"] != PROFILE_SCHEMA_VERSION:
        raise InputError(
            f"{source}: profile schema version {raw['schema_version']!r} is not the supported {PROFILE_SCHEMA_VERSION}"
        )
    for key in ("models", "latency", "acceptance", "drafters", "provenance", "engine", "workload"):
        if key in raw and not isinstance(raw[key], dict):
            raise InputError(f"{source}: profile field '{key}' must be an object (name -> entry), "
                             f"got {type(raw[key]).__name__}")
    if raw["target"] not in raw["models"]:
        raise InputError(f"{source}: target '{raw['target']}' is not among the profile's models")
    _validate_models(raw, source)
    for name, spec in raw.get("drafters", {}).items():
        kind = spec.get("kind") if isinstance(spec, dict) else None
        if kind not in drafter_kinds():
            raise InputError(f"{source}: drafter '{name}' has kind {kind!r}; expected one of {', '.join(drafter_kinds())}")
    _validate_engine(raw.get("engine", {}), source)
    _validate_workload(raw.get("workload", {}), source)


def _validate_models(raw: dict, source: str) -> None:
    """Architectures, latency models and acceptance models, each built as the cost models read it."""
    from calibrate.acceptance import AcceptanceModel
    from calibrate.latency import latency_model_from_dict
    from costmodel.params import ARCH_REQUIRED, as_arch

    try:
        for name, arch in raw["models"].items():
            if not isinstance(arch, dict):
                raise ValueError(f"model '{name}' must be an object (its architecture numbers, or a 'source')")
            if any(key in arch for key in ARCH_REQUIRED):     # else a model without architecture numbers
                as_arch(arch, name)
        for name, spec in raw["latency"].items():
            latency_model_from_dict(spec, name=name)
        for name, spec in raw["acceptance"].items():
            AcceptanceModel.from_dict(spec, name=name)
    except (ValueError, TypeError) as exc:
        raise InputError(f"{source}: {exc}") from None


def _validate_engine(engine: dict, source: str) -> None:
    """The optional engine calibration: per method (and pooled) StepCalibrations, and its held-out error."""
    from costmodel.step import StepCalibration

    methods = engine.get("methods", {})
    if not isinstance(methods, dict):
        raise InputError(f"{source}: engine.methods must be an object (method -> calibration), "
                         f"got {type(methods).__name__}")
    entries = {**{f"engine.methods.{m}": v for m, v in methods.items()}, "engine.pooled": engine.get("pooled", {})}
    for name, entry in entries.items():
        try:
            StepCalibration.from_dict(entry, where=name)
        except ValueError as exc:
            raise InputError(f"{source}: {exc}") from None
    fit = engine.get("fit", {})
    heldout = fit.get("heldout", {}) if isinstance(fit, dict) else None
    if not isinstance(heldout, dict):
        raise InputError(f"{source}: engine.fit.heldout must be an object")
    error = heldout.get("speedup_error_p90")
    if error is not None and not _number_in(error, 0.0):
        raise InputError(f"{source}: engine.fit.heldout.speedup_error_p90 must be a number >= 0 (a fraction), "
                         f"got {error!r}")


def _validate_workload(workload: dict, source: str) -> None:
    """Per dataset: the mean prompt tokens (>= 0) and new tokens (>= 1) its traces saw."""
    for dataset, entry in workload.items():
        if not isinstance(entry, dict):
            raise InputError(f"{source}: workload.{dataset} must be an object with prompt_tokens and new_tokens")
        for key, least in (("prompt_tokens", 0.0), ("new_tokens", 1.0)):
            value = entry.get(key)
            if not _number_in(value, least):
                raise InputError(f"{source}: workload.{dataset}.{key} must be a number of tokens >= {least:g}, "
                                 f"got {value!r}")


def _number_in(value: Any, least: float) -> bool:
    return (not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
            and value >= least)
