"""The small typed parts of a Profile: its drafters, its workload, the engine's terms and its provenance.

Each part is frozen and checked once, when the Profile is read (`of` builds it from the Profile's
JSON form and raises a one-line InputError naming the field; `to_dict` writes that form back).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

import methods
from common.errors import InputError
from costmodel.step import BATCHINGS, StepCalibration
from profiles.record import Record


def _count(value: Any, where: str, least: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value) or value < least:
        raise InputError(f"{where} must be an integer >= {least}, got {value!r}")
    return int(value)


def _number(value: Any, where: str, least: float, unit: str = "") -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < least:
        raise InputError(f"{where} must be a number{f' {unit}' if unit and not unit.startswith('(') else ''} "
                         f">= {least:g}{f' {unit}' if unit.startswith('(') else ''}, got {value!r}")
    return float(value)


def _text(value: Any, where: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise InputError(f"{where} must be a string, got {value!r}")
    return value


def _object(raw: Any, where: str) -> dict:
    if not isinstance(raw, dict):
        raise InputError(f"{where} must be an object, got {type(raw).__name__}")
    return raw


# ---- models without architecture numbers ----------------------------------------------------------------
@dataclass(frozen=True)
class NoArch:
    """A model whose latency was measured as a table but whose architecture is not known (its
    parameter count may be)."""

    source: str = "no architecture numbers"
    params: float | None = None

    @classmethod
    def of(cls, raw: dict, where: str) -> "NoArch":
        extra = sorted(set(raw) - {"source", "params"})
        if extra:
            raise InputError(f"{where} has no architecture numbers (n_layers, hidden, ...) but '{extra[0]}'")
        params = None if raw.get("params") is None else _number(raw["params"], f"{where}.params", 0.0)
        return cls(_text(raw.get("source"), f"{where}.source") or cls.source, params)

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, **({"params": self.params} if self.params is not None else {})}


# ---- drafters ----------------------------------------------------------------------------------------
def drafter_kinds() -> list[str]:
    """Profile drafter kinds: those the registered methods run with, and the name of a method that
    keeps its acceptance under a drafter of its own name (a part of its own, no model)."""
    kinds = {k for s in methods.specs() for k in s.drafter_kinds} | {s.name for s in methods.specs() if s.needs == s.name}
    return sorted(kinds | {"self"})


@dataclass(frozen=True)
class Tree:
    """A drafter's static token tree (EAGLE-2 style): its depth and the candidates it verifies."""

    depth: int
    candidates: int


@dataclass(frozen=True)
class Router:
    """An LM-head router the drafter was trained or timed with: N vocabulary groups, top-n activated."""

    groups: int
    top_n: int

    def fixed(self) -> dict[str, int]:
        """The configuration fields it fixes (`methods.spec.drafter_fixed`)."""
        return {"groups": self.groups, "top_n": self.top_n}


@dataclass(frozen=True)
class Drafter:
    """How one drafter drafts: its kind (`profiles.kinds.drafter_kinds`), the model entry its latency
    and architecture are under, and what the kind needs (a file the engine loads, a tree, a router,
    an early-exit layer, a head or adapter model, a reduced draft vocabulary, the engines' name)."""

    kind: str
    model: str | None = None
    file: str | None = None
    head_model: str | None = None
    adapter_model: str | None = None
    exit_layer: int | None = None
    draft_vocab: int | None = None
    engine_method: str | None = None
    tree: Tree | None = None
    router: Router | None = None

    @classmethod
    def of(cls, raw: Any, where: str, kinds: list[str]) -> "Drafter":
        raw = _object(raw, where)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise InputError(f"{where} has unknown field '{unknown[0]}' (known: {', '.join(sorted(known))})")
        if raw.get("kind") not in kinds:
            raise InputError(f"{where} has kind {raw.get('kind')!r}; expected one of {', '.join(kinds)}")
        tree = router = None
        if raw.get("tree") is not None:
            t = _object(raw["tree"], f"{where}.tree")
            tree = Tree(_count(t.get("depth"), f"{where}.tree.depth"), _count(t.get("candidates"), f"{where}.tree.candidates"))
        if raw.get("router") is not None:
            r = _object(raw["router"], f"{where}.router")
            router = Router(_count(r.get("groups"), f"{where}.router.groups"), _count(r.get("top_n"), f"{where}.router.top_n"))
            if router.top_n > router.groups:
                raise InputError(f"{where}.router activates top_n {router.top_n} of {router.groups} groups")
        return cls(kind=raw["kind"], **{k: _text(raw.get(k), f"{where}.{k}")
                                        for k in ("model", "file", "head_model", "adapter_model", "engine_method")},
                   exit_layer=None if raw.get("exit_layer") is None else _count(raw["exit_layer"], f"{where}.exit_layer"),
                   draft_vocab=None if raw.get("draft_vocab") is None else _count(raw["draft_vocab"], f"{where}.draft_vocab"),
                   tree=tree, router=router)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name != "kind" and value is not None:
                out[f.name] = value.__dict__.copy() if isinstance(value, (Tree, Router)) else value
        return out

    def arch_options(self) -> dict[str, int]:
        """What the entry states that shapes a drafter built from its target (`costmodel.params.drafter_arch`):
        its early-exit layer, its router."""
        out = {} if self.exit_layer is None else {"exit_layer": self.exit_layer}
        return {**out, **(self.router.fixed() if self.router is not None else {})}

    def names(self) -> set[str]:
        """What a trace may call this drafter by: its model and its file."""
        return {n for n in (self.model, self.file) if n}


def typed_drafters(raw: dict[str, Any]) -> dict[str, Drafter]:
    """Drafter entries in their JSON form (as a campaign writes them) typed and checked."""
    kinds = drafter_kinds()
    return {name: Drafter.of(spec, f"drafter '{name}'", kinds) for name, spec in raw.items()}


# ---- workload -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Workload:
    """The context one dataset's traces saw: mean prompt tokens and mean new tokens per request; and
    how much one prompt's acceptance strays from the dataset's (`prompt_spread`, per method: the
    relative standard deviation over the calibration prompts of a prompt's tokens per step, divided
    by the share of its tokens that speculation added, (T - 1) / T, the median over the method's
    calibrated configurations; measured on `spread_prompts` prompts each). Prediction intervals and
    the prompts a comparison needs follow from it (`costmodel.uncertainty`)."""

    prompt_tokens: float
    new_tokens: float
    source: str | None = None
    prompt_spread: Record = field(default_factory=Record)     # method -> relative spread per unit of gain
    spread_prompts: int | None = None

    @classmethod
    def of(cls, raw: Any, where: str) -> "Workload":
        if not isinstance(raw, dict):
            raise InputError(f"{where} must be an object with prompt_tokens and new_tokens")
        spread = _object(raw.get("prompt_spread", {}), f"{where}.prompt_spread")
        prompts = raw.get("spread_prompts")
        if spread and (isinstance(prompts, bool) or not isinstance(prompts, int) or prompts < 2):
            raise InputError(f"{where}.spread_prompts must be a whole number >= 2 (the prompts prompt_spread "
                             f"was measured on), got {prompts!r}")
        return cls(_number(raw.get("prompt_tokens"), f"{where}.prompt_tokens", 0.0, "of tokens"),
                   _number(raw.get("new_tokens"), f"{where}.new_tokens", 1.0, "of tokens"),
                   _text(raw.get("source"), f"{where}.source"),
                   Record({str(m): _number(v, f"{where}.prompt_spread.{m}", 0.0, "(a fraction)")
                           for m, v in spread.items()}),
                   prompts if spread else None)

    @property
    def mean_ctx(self) -> float:
        """Mean context of a decode step: the prompt and half the new tokens."""
        return self.prompt_tokens + self.new_tokens / 2.0

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"prompt_tokens": self.prompt_tokens, "new_tokens": self.new_tokens}
        if self.source is not None:
            out["source"] = self.source
        if self.prompt_spread:
            out.update(prompt_spread=dict(self.prompt_spread), spread_prompts=self.spread_prompts)
        return out


# ---- the engine's terms -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class EngineTerms:
    """What a real step costs beyond the isolated forwards (`calibrate.engine` fits it from
    StepTraces): a `StepCalibration` per method, one pooled over every method for methods without
    traces, the fit's record (its held-out error, reference plain step, structure), and how the
    engine batches rows (`batching`, `costmodel.step.BATCHINGS`: "padded" for an engine that runs
    every row at the widest tree and the longest context, with host work per row; "" where the
    traces were of one request at a time and nothing is said about batches)."""

    methods: Record = field(default_factory=Record)     # method -> StepCalibration
    pooled: StepCalibration | None = None
    fit: Record = field(default_factory=Record)
    batching: str = ""

    @classmethod
    def of(cls, raw: Any, where: str = "engine") -> "EngineTerms":
        raw = _object(raw, where)
        per_method = raw.get("methods", {})
        if not isinstance(per_method, dict):
            raise InputError(f"{where}.methods must be an object (method -> calibration), got {type(per_method).__name__}")
        try:
            calibrations = {m: StepCalibration.from_dict(v, where=f"{where}.methods.{m}") for m, v in per_method.items()}
            pooled = None if raw.get("pooled") is None else StepCalibration.from_dict(raw["pooled"], where=f"{where}.pooled")
        except ValueError as exc:
            raise InputError(str(exc)) from None
        fit = _object(raw.get("fit", {}), f"{where}.fit")
        heldout = fit.get("heldout", {})
        if not isinstance(heldout, dict):
            raise InputError(f"{where}.fit.heldout must be an object")
        error = heldout.get("speedup_error_p90")
        if error is not None:
            _number(error, f"{where}.fit.heldout.speedup_error_p90", 0.0, "(a fraction)")
        batching = raw.get("batching", "")
        if batching not in ("", *BATCHINGS):
            raise InputError(f"{where}.batching must be one of {', '.join(BATCHINGS)} (or absent), got {batching!r}")
        return cls(Record(calibrations), pooled, Record(fit), batching)

    def calibration(self, method: str) -> StepCalibration:
        """`method`'s own calibration, else the pooled one, else none (the identity)."""
        found = self.methods.get(method, self.pooled)
        return found if found is not None else StepCalibration()

    @property
    def heldout_error(self) -> float | None:
        """Held-out relative error of the predicted speedup (p90, a fraction), if fitted."""
        value = self.fit.get("heldout", Record()).get("speedup_error_p90")
        return None if value is None else float(value)

    @property
    def reference(self) -> Record:
        """The plain step the fit put every pair on (seconds at each context), if recorded."""
        return self.fit.get("reference", Record())

    def __bool__(self) -> bool:
        return bool(self.methods) or self.pooled is not None or bool(self.fit) or bool(self.batching)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"methods": {m: c.to_dict() for m, c in self.methods.items()}}
        if self.pooled is not None:
            out["pooled"] = self.pooled.to_dict()
        if self.batching:
            out["batching"] = self.batching
        return {**out, "fit": self.fit.to_json()}


# ---- provenance --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Provenance:
    """Where a Profile came from: the command that built it, the commit, when, the prompts it was
    calibrated on (never validated on), the latency fit's record (its warnings), and the rest of
    what its builder recorded (traces, sources, assumptions), kept for people to read."""

    built_by: str = ""
    commit: str = ""
    created: str = ""
    calibration_prompts: tuple[str, ...] = ()
    latency_fit: Record = field(default_factory=Record)
    remeasured: Record = field(default_factory=Record)   # what a re-profile measured again, on which machine
    details: Record = field(default_factory=Record)

    NAMED = ("built_by", "commit", "created", "calibration_prompts", "latency_fit", "remeasured")

    @classmethod
    def of(cls, raw: Any, where: str = "provenance") -> "Provenance":
        raw = _object(raw, where)
        prompts = raw.get("calibration_prompts", [])
        if not isinstance(prompts, list) or not all(isinstance(p, str) for p in prompts):
            raise InputError(f"{where}.calibration_prompts must be a list of prompt ids")
        for key in ("latency_fit", "remeasured"):
            _object(raw.get(key, {}), f"{where}.{key}")
        return cls(built_by=_text(raw.get("built_by"), f"{where}.built_by") or "",
                   commit=str(raw.get("commit", "")), created=str(raw.get("created", "")),
                   calibration_prompts=tuple(prompts), latency_fit=Record(raw.get("latency_fit", {})),
                   remeasured=Record(raw.get("remeasured", {})),
                   details=Record({k: v for k, v in raw.items() if k not in cls.NAMED}))

    @property
    def moved_from(self) -> str:
        """The hardware the Profile was fitted on where `Profile.on_hardware` moved it ("" otherwise):
        its held-out error was measured there, not on the hardware it now names."""
        return str(self.details.get("moved_from", ""))

    @property
    def ingested(self) -> tuple[Record, ...]:
        """What `calibrate.ingest --profile` merged, oldest first: format, sources, acceptance_key,
        latency_s (metric -> count, mean, p50, p90, p99 in seconds)."""
        return tuple(self.details.get("ingested", ()))

    @property
    def warnings(self) -> tuple[str, ...]:
        """The latency fit's warning lines: terms on a bound, held-out errors over target."""
        return tuple(self.latency_fit.get("warnings", ()))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = self.details.to_json()
        for key in self.NAMED:
            value = getattr(self, key)
            if value:
                out[key] = value.to_json() if isinstance(value, Record) else list(value) if isinstance(value, tuple) else value
        return out
