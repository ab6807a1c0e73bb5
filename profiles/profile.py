"""The Profile: everything the cost models and the simulator need about one deployment (a target on
one machine), typed, frozen and checked once, when it is read.

A Profile names one hardware and one target, the drafters that can be paired with it, a latency model
per model (`profiles.latency`), acceptance entries per (drafter, dataset, temperature)
(`profiles.acceptance`), what the engine pays beyond the isolated forwards (`profiles.parts.EngineTerms`),
the context each dataset's traces saw, the machine it was measured on (`profiles.machine`) and its
provenance. Its JSON form and schema versions are `profiles.schema`. Builders (`calibrate`) write that
form and read it back through `Profile.from_dict`; every reader uses the typed fields and queries
below, and a worker receives the Profile itself (it pickles), never its JSON.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from common import atomic
from common.errors import InputError
from costmodel.params import Arch
from costmodel.step import StepCalibration
from methods.spec import Setup
from profiles.acceptance import AcceptanceModel
from profiles.latency import LatencyModel
from profiles.machine import Machine
from profiles import schema
from profiles.parts import Drafter, EngineTerms, NoArch, Provenance, Workload
from profiles.record import Record
from costmodel.hardware import get_hardware


ASSUMED_FOR = "assumed_for"     # an acceptance entry's method, where the entry is assumed for it alone


@dataclass(frozen=True)
class Measured:
    """An engine file merged into a Profile (`calibrate.ingest --profile`): its acceptance entry and
    what it observed of latency (metric -> count, mean, p50, p90, p99 in seconds)."""

    key: str
    entry: AcceptanceModel
    format: str
    sources: tuple[str, ...]
    latency_s: Record


@dataclass(frozen=True, eq=False)
class Profile:
    """One deployment, typed (module docstring); two Profiles compare by `to_dict()`."""

    name: str
    hardware: str                   # a costmodel.hardware name
    dtype: str
    target: str                     # a key of `models`
    models: Record                  # name -> costmodel.params.Arch (profiles.parts.NoArch: a table alone)
    latency: Record                 # name -> profiles.latency.LatencyModel
    acceptance: Record              # key -> profiles.acceptance.AcceptanceModel
    drafters: Record = field(default_factory=Record)      # name -> profiles.parts.Drafter
    engine: EngineTerms = field(default_factory=EngineTerms)
    workload: Record = field(default_factory=Record)      # dataset -> profiles.parts.Workload
    machine: Machine = field(default_factory=Machine)
    provenance: Provenance = field(default_factory=Provenance)

    def __post_init__(self) -> None:
        for key in ("models", "latency", "acceptance", "drafters", "workload"):
            object.__setattr__(self, key, Record(getattr(self, key)))
        if self.target not in self.models:
            raise InputError(f"profile '{self.name}': target '{self.target}' is not among its models")

    # ---- models and their latency -------------------------------------------------------------------
    def arch(self, model: str | None = None) -> Arch:
        """The architecture of `model` (default: the target)."""
        model = self.target if model is None else model
        if model not in self.models:
            raise InputError(f"profile '{self.name}' has no model '{model}' (has: {', '.join(self.models)})")
        arch = self.models[model]
        if isinstance(arch, NoArch):
            raise InputError(f"profile '{self.name}': model '{model}' has no architecture numbers ({arch.source})")
        return arch

    def latency_model(self, model: str) -> LatencyModel:
        """The latency model of `model`: `.predict(n_tokens, ctx_len, batch=1)` in seconds."""
        if model not in self.latency:
            raise InputError(f"profile '{self.name}' has no latency model for '{model}' "
                             f"(has: {', '.join(sorted(self.latency)) or 'none'})")
        return self.latency[model]

    def seconds(self, model: str, n_tokens, ctx_len, batch=1) -> np.ndarray:
        """Seconds of one forward of `model` over numpy arrays (the step-cost model's latency)."""
        return np.asarray(self.latency_model(model).predict(n_tokens, ctx_len, batch), dtype=float)

    def max_batch(self, models=None) -> float:
        """The largest batch every latency model of `models` (default: all) prices: a measured table's
        largest batch (past it nothing is extrapolated, `profiles.latency`), infinite where each is a
        fitted form."""
        named = self.latency if models is None else {m: self.latency_model(m) for m in models}
        return min((float(m.max_batch) for m in named.values()), default=math.inf)

    def step_calibration(self, method: str) -> StepCalibration:
        """`costmodel.step.StepCalibration` of `method`: its own fit, else the pooled one, else none."""
        return self.engine.calibration(method)

    def heldout_error(self) -> float | None:
        """Held-out relative error of the engine calibration's predicted speedup (a fraction), if fitted."""
        return self.engine.heldout_error

    def on_hardware(self, hardware: str) -> "Profile":
        """Every latency model moved to `hardware`'s datasheet, fitted efficiencies kept (a measured
        table cannot move: InputError); `provenance.moved_from` keeps the hardware the fit was made on."""
        try:
            name = get_hardware(hardware).name
        except ValueError as exc:
            raise InputError(str(exc)) from None
        moved = {model: spec.moved_to(name) for model, spec in self.latency.items()}
        origin = self.provenance.moved_from or self.hardware    # where its fit (and held-out error) was made
        provenance = replace(self.provenance, details=Record({**self.provenance.details, "moved_from": origin}))
        return replace(self, latency=moved, hardware=name, name=f"{self.name} -> {name}",
                       machine=Machine(datasheet=name), provenance=provenance)

    # ---- drafters and acceptance ----------------------------------------------------------------------
    def drafter(self, name: str) -> Drafter:
        if name not in self.drafters:
            raise InputError(f"profile '{self.name}' has no drafter '{name}' "
                             f"(has: {', '.join(sorted(self.drafters)) or 'none'})")
        return self.drafters[name]

    def with_chain_twin(self, name: str) -> tuple["Profile", str]:
        """This Profile with drafter `name`'s chain twin (`<name>-chain`: the same drafter without its
        stated tree, as an engine that drafts chains runs it) and the twin's name; itself and `name`
        where the drafter states no tree."""
        spec = self.drafter(name)
        if spec.tree is None:
            return self, name
        twin = f"{name}-chain"
        return replace(self, drafters={**self.drafters, twin: replace(spec, tree=None)}), twin

    def drafters_of(self, *kinds: str) -> list[str]:
        """Drafter names of the given kinds, in the Profile's order."""
        return [name for name, spec in self.drafters.items() if spec.kind in kinds]

    def acceptance_model(self, key: str) -> AcceptanceModel:
        if key not in self.acceptance:
            raise InputError(f"profile '{self.name}' has no acceptance model '{key}' "
                             f"(has: {', '.join(sorted(self.acceptance)) or 'none'})")
        return self.acceptance[key]

    def measured(self) -> Measured | None:
        """The deployment an engine file measured (the latest `calibrate.ingest --profile` whose entry
        is here): the Profile answers for it first (`sweep.run.setting_of`)."""
        for record in reversed(self.provenance.ingested):
            key = record.get("acceptance_key")
            if key in self.acceptance:
                return Measured(key, self.acceptance[key], str(record.get("format", "")),
                                tuple(map(str, record.get("sources", ()))), Record(record.get("latency_s", {})))
        return None

    def temperatures(self) -> list[float]:
        """Temperatures with recorded acceptance, ascending."""
        return sorted({a.temperature for a in self.acceptance.values()})

    def datasets(self) -> list[str]:
        return sorted({a.dataset for a in self.acceptance.values() if a.dataset})

    def dataset_named(self, name: str) -> str | None:
        """The recorded dataset a prompt set or trace calls `name` ('mtbench' -> 'mt-bench'), if any."""
        norm = lambda s: str(s).lower().replace("-", "").replace("_", "")
        return next((d for d in self.datasets() if norm(d) == norm(name)), None)

    def acceptance_for(self, drafter: str | None, *, temperature: float | None = None, dataset: str | None = None,
                       needs: str | None = None) -> list[str]:
        """Acceptance keys of `drafter` (None: any) at `temperature` (None: the lowest recorded),
        of `dataset` (None: any) holding part `needs`; MT-Bench entries first."""
        temperature = self.temperatures()[0] if temperature is None and self.acceptance else temperature
        keys = [k for k, a in self.acceptance.items()
                if (temperature is None or abs(a.temperature - float(temperature)) < 1e-6)
                and (drafter is None or a.drafter == drafter or k == drafter or k.startswith(f"{drafter}/"))
                and (needs is None or a.has(needs))
                and (dataset is None or a.dataset == dataset)]
        return sorted(keys, key=lambda k: "mt-bench" not in self.acceptance[k].dataset)

    def setups_for(self, spec, *, temperature: float | None = None, dataset: str | None = None,
                   drafter: str | None = None, acceptance: str | None = None, overhead_s: float = 0.0) -> list[Setup]:
        """Every (drafter, acceptance entry) method `spec` (methods.MethodSpec) can run with here:
        one per drafter of its kinds, each with its first matching acceptance entry (an entry assumed
        for another method, `ASSUMED_FOR`, is not this method's). InputError
        saying what is missing when there is none."""
        if not spec.drafter_kinds and not spec.needs:          # plain decoding: the target alone
            return [Setup(self, None, acceptance, overhead_s)]
        if drafter is not None:
            kind = self.drafter(drafter).kind
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
            keys = [k for k in self.acceptance_for(name, temperature=temperature, dataset=dataset, needs=spec.needs)
                    if self.acceptance[k].extra.get(ASSUMED_FOR, spec.name) == spec.name]
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

    # ---- the workload -------------------------------------------------------------------------------------
    def _workload(self, dataset: str | None) -> Workload | None:
        if dataset is None:
            dataset = next(iter(self.workload), None)
        return self.workload.get(dataset)

    def workload_ctx(self, dataset: str | None) -> float | None:
        """Mean context of a decode step in the traces of `dataset` (prompt + half the new tokens)."""
        entry = self._workload(dataset)
        return None if entry is None else entry.mean_ctx

    def prompt_spread(self, dataset: str | None, method: str) -> tuple[float, int] | None:
        """(spread, calibration prompts) of `method` on `dataset` (`Workload.prompt_spread`): how far
        one prompt's acceptance strays from the dataset's; None where the traces did not record it."""
        entry = self._workload(dataset)
        if entry is None or method not in entry.prompt_spread:
            return None
        return float(entry.prompt_spread[method]), int(entry.spread_prompts)

    def workload_new_tokens(self, dataset: str | None) -> int | None:
        """Mean new tokens per prompt in the traces of `dataset` (None: no workload recorded)."""
        entry = self._workload(dataset)
        return None if entry is None else max(1, int(round(entry.new_tokens)))

    # ---- its JSON form (profiles.schema) ----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return schema.dump(self)

    def save(self, path: str | Path) -> Path:
        """Write the JSON form atomically."""
        return atomic.write_json(path, self.to_dict())

    @classmethod
    def from_dict(cls, raw: Any, source: str = "profile") -> "Profile":
        """Read a Profile's JSON form (any schema version `profiles.schema` migrates), checked."""
        return cls(**schema.parse(raw, source))

    @classmethod
    def build(cls, **parts: Any) -> "Profile":
        """A Profile from its parts in their JSON form (what a builder writes), checked as a file is."""
        return cls.from_dict({"schema_version": schema.SCHEMA_VERSION, **parts}, source=str(parts.get("name", "profile")))

    @classmethod
    def load(cls, path: str | Path) -> "Profile":
        return cls.from_dict(schema.read(path), source=str(path))

