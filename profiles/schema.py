"""A Profile's JSON form: the schema, its versions and the migration from older ones.

Layout (schema_version 2)::

    {
      "schema_version": 2,
      "name": "vicuna-7b + llama-68m on A100-80G (MCSD paper)",
      "hardware": "A100-80G",              # a costmodel.hardware name
      "dtype": "fp16",
      "target": "vicuna-7b",               # a key of "models"
      "models": {"vicuna-7b": {"n_layers": 32, "hidden": 4096, ...}, ...},   # costmodel.params.Arch
      "latency": {"vicuna-7b": {"kind": "roofline", "params": {...}, "fit": {...}}, ...},   # profiles.latency
      "drafters": {"llama-68m": {"kind": "draft_model", "model": "llama-68m"}, ...},      # profiles.parts.Drafter
      "acceptance": {"llama-68m": {"drafter": "llama-68m", "temperature": 0.0, "dataset": "mt-bench",
                                   "alpha": 0.62, ...}},                                   # profiles.acceptance
      "engine": {"methods": {"sd": {...}}, "pooled": {...}, "fit": {"heldout": {...}}},    # optional
      "workload": {"mt-bench": {"prompt_tokens": 105.0, "new_tokens": 64.0}},             # optional
      "machine": {"cpu": "...", "isa": [...], "threads": 2, "torch": "2.13.0", ...},       # profiles.machine
      "provenance": {"built_by": "...", "commit": "...", "calibration_prompts": [...], ...}
    }

Version 2 (this one) adds `machine` (version 1 said only the hardware's name) and requires every
acceptance entry to state its temperature (version 1 read a missing one as 0, greedy). A version 1
file is read with a note naming what was filled in; `python -m profiles.migrate FILE` rewrites it.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from common.errors import InputError
from costmodel.params import ARCH_REQUIRED, Arch
from profiles.acceptance import AcceptanceModel
from profiles.latency import latency_model
from profiles.machine import Machine
from profiles.parts import EngineTerms, NoArch, Provenance, Workload, typed_drafters

SCHEMA_VERSION = 2
REQUIRED_FIELDS = ("schema_version", "name", "hardware", "dtype", "target", "models", "latency", "acceptance")
OBJECT_FIELDS = ("models", "latency", "acceptance", "drafters", "provenance", "engine", "workload", "machine")
_noted: set[str] = set()


def migrate(raw: dict[str, Any], source: str) -> tuple[dict[str, Any], list[str]]:
    """A version 1 Profile's JSON as version 2, and what was filled in (one line each)."""
    version = raw.get("schema_version")
    if version == SCHEMA_VERSION:
        return raw, []
    if version != 1:
        raise InputError(f"{source}: profile schema version {version!r} is not one this version reads "
                         f"(1 or {SCHEMA_VERSION})")
    out, notes = dict(raw), []
    acceptance = out.get("acceptance")
    if isinstance(acceptance, dict):
        greedy = [k for k, entry in acceptance.items() if isinstance(entry, dict) and "temperature" not in entry]
        out["acceptance"] = {k: ({**e, "temperature": 0.0} if k in greedy else e) for k, e in acceptance.items()}
        if greedy:
            notes.append(f"acceptance {', '.join(greedy)} stated no temperature; schema 1 read it as 0 (greedy)")
    out["machine"] = {"datasheet": str(out.get("hardware", ""))}
    notes.append("no machine recorded: only the hardware's name")
    out["schema_version"] = SCHEMA_VERSION
    return out, notes


def parse(raw: Any, source: str = "profile") -> dict[str, Any]:
    """The typed fields of a Profile (`profiles.profile.Profile(**fields)`) from its JSON form; every
    field checked in its physical range, a one-line InputError naming `source` and the first bad one."""
    if not isinstance(raw, dict):
        raise InputError(f"{source}: a profile must be a JSON object")
    for key in REQUIRED_FIELDS:
        if key not in raw:
            raise InputError(f"{source}: profile is missing field '{key}'")
    raw, notes = migrate(raw, source)
    if notes and source not in _noted:
        _noted.add(source)
        print(f"note: {source} is a schema 1 Profile, read as schema {SCHEMA_VERSION} ({'; '.join(notes)}); "
              f"`python -m profiles.migrate {source}` rewrites it", file=sys.stderr)
    for key in OBJECT_FIELDS:
        if key in raw and not isinstance(raw[key], dict):
            raise InputError(f"{source}: profile field '{key}' must be an object (name -> entry), got {type(raw[key]).__name__}")
    for key in ("name", "hardware", "dtype", "target"):
        if not isinstance(raw[key], str) or not raw[key]:
            raise InputError(f"{source}: profile field '{key}' must be a non-empty string, got {raw[key]!r}")
    if raw["target"] not in raw["models"]:
        raise InputError(f"{source}: target '{raw['target']}' is not among the profile's models")
    try:
        return dict(
            name=raw["name"], hardware=raw["hardware"], dtype=raw["dtype"], target=raw["target"],
            models={name: model_entry(arch, name) for name, arch in raw["models"].items()},
            latency={name: latency_model(spec, name) for name, spec in raw["latency"].items()},
            acceptance={key: AcceptanceModel.from_dict(spec, name=key) for key, spec in raw["acceptance"].items()},
            drafters=typed_drafters(raw.get("drafters", {})),
            engine=EngineTerms.of(raw.get("engine", {})),
            workload={d: Workload.of(entry, f"workload.{d}") for d, entry in raw.get("workload", {}).items()},
            machine=Machine.of(raw.get("machine", {})),
            provenance=Provenance.of(raw.get("provenance", {})))
    except InputError as exc:
        raise InputError(f"{source}: {exc}") from None


def model_entry(raw: Any, name: str) -> Arch | NoArch:
    """A `models` entry typed: its architecture, or a table's model that states none (`NoArch`)."""
    if not isinstance(raw, dict):
        raise InputError(f"model '{name}' must be an object (its architecture numbers, or a 'source')")
    if not any(key in raw for key in ARCH_REQUIRED):
        return NoArch.of(raw, f"model '{name}'")
    try:
        return Arch.from_dict(raw, name)
    except (ValueError, TypeError) as exc:
        raise InputError(str(exc)) from None


def dump(profile) -> dict[str, Any]:
    """The JSON form of a Profile (`parse`'s inverse)."""
    out = {"schema_version": SCHEMA_VERSION, "name": profile.name, "hardware": profile.hardware,
           "dtype": profile.dtype, "target": profile.target,
           "models": {name: arch.to_dict() for name, arch in profile.models.items()},
           "latency": {name: model.to_dict() for name, model in profile.latency.items()},
           "drafters": {name: d.to_dict() for name, d in profile.drafters.items()},
           "acceptance": {key: a.to_dict() for key, a in profile.acceptance.items()},
           "provenance": profile.provenance.to_dict()}
    if profile.engine:
        out["engine"] = profile.engine.to_dict()
    if profile.workload:
        out["workload"] = {d: w.to_dict() for d, w in profile.workload.items()}
    out["machine"] = profile.machine.to_dict()
    return out


def read(path: str | Path) -> dict[str, Any]:
    """A Profile file's JSON; one line naming the file when it is missing or not JSON text."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"profile file not found: {p}")
    if p.is_dir():
        raise InputError(f"{p}: a directory, not a Profile (a Profile is a .json file)")
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputError(f"{p}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except UnicodeDecodeError:
        what = "a parquet file" if p.read_bytes()[:4] == b"PAR1" else "binary, not JSON text"
        raise InputError(f"{p}: {what}, not a Profile (a Profile is a .json file)") from None
