"""`python -m calibrate.fit`: trace files in, one validated Profile out (written atomically).

Latency traces give one latency model per model name (roofline where the architecture is known,
else the measured table), with MAPE on fitted and held-out grid points; token traces give one
acceptance entry each ("<drafter>/<dataset>/T<temperature>"); step traces give chain acceptance
("<drafter>/<dataset>/T<temperature>/steps") and, for a method with an acceptance part of its own,
its `fit_steps` entry ("<method>/<dataset>").
Provenance lists every trace file with its run metadata, the git commit and the time.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd

import methods
from calibrate.fit_acceptance import fit_step_acceptance, fit_token_acceptance
from calibrate.latency import fit_latency
from common.rundir import git_commit
from profiles import schema
from profiles.machine import Machine, recorded_in
from profiles.parts import Provenance
from profiles.record import Record
from profiles.profile import Profile
from costmodel.hardware import get_hardware, hardware_names
from costmodel.params import Arch, get_arch
from common.errors import InputError
from common.cli import CliParser, cli_entry
from common.rundir import claim_file
from traces.schema import read_trace

REFITS = "trace_refits"       # provenance: what each `calibrate.fit --base` fitted again over the base, oldest first


def resolve_arch(model: str, overrides: dict[str, str]) -> dict[str, Any] | None:
    """Architecture numbers for `model`: an override (registry name or JSON file), the registry, or None."""
    spec = overrides.get(model, model)
    path = Path(spec)
    if path.suffix == ".json":
        if not path.exists():
            raise InputError(f"architecture file not found: {path}")
        try:
            return Arch.from_dict(json.loads(path.read_text(encoding="utf-8")), model).to_dict()
        except (json.JSONDecodeError, ValueError) as exc:
            raise InputError(f"{path}: {str(exc).splitlines()[0]}") from None
    try:
        return get_arch(spec).to_dict()
    except ValueError:
        if model in overrides:
            raise InputError(f"--arch {model}={spec}: not a registry architecture or a .json file") from None
        return None


def parse_arch_overrides(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        if "=" not in item:
            raise InputError(f"--arch takes MODEL=ARCH, got '{item}'")
        model, spec = item.split("=", 1)
        out[model.strip()] = spec.strip()
    return out


def fit_latency_files(paths: list[Path], kind: str, hardware: str | None, arch_overrides: dict[str, str],
                      provenance: list[dict]) -> tuple[dict, dict, str | None, str | None]:
    """Latency models and architectures per model over all latency trace files."""
    frames, hw_seen, dtype_seen = [], set(), set()
    for path in paths:
        frame, meta = read_trace(path, kind="latency")
        frames.append(frame)
        machine = recorded_in(meta.extra, str(path), Machine()).to_dict()       # {}: a trace from before it said
        provenance.append({"path": str(path), "kind": "latency", **_meta_summary(meta),
                           **({"machine": machine} if machine else {})})
        hw_seen.update(frame["hardware"].unique())
        dtype_seen.update(frame["dtype"].unique())
    if not frames:
        return {}, {}, None, None
    rows = pd.concat(frames, ignore_index=True)
    if len(dtype_seen) > 1:
        raise InputError(f"latency traces mix dtypes {sorted(dtype_seen)}; fit one dtype per profile")
    if hardware is not None and hw_seen and {_canonical(h) for h in hw_seen} != {_canonical(hardware)}:
        raise InputError(f"--hardware {hardware}: the latency traces were measured on {', '.join(sorted(hw_seen))}; "
                         "a trace is not relabelled onto other hardware (profiles.Profile.on_hardware moves a fitted roofline)")
    hw_name = hardware or (hw_seen.pop() if len(hw_seen) == 1 else None)
    if hw_name is None:
        raise InputError(f"latency traces mix hardware {sorted(hw_seen)}; pass --hardware or split them")
    dtype = dtype_seen.pop()
    latency, models = {}, {}
    for model, group in rows.groupby("model"):
        arch = resolve_arch(model, arch_overrides)
        chosen = kind if kind != "auto" else ("roofline" if arch is not None else "table")
        if chosen == "roofline" and arch is None:
            raise InputError(f"model '{model}' has no known architecture for a roofline fit; pass --arch {model}=...")
        try:
            hw_for_fit = get_hardware(hw_name).name if chosen == "roofline" else hw_name
        except ValueError as exc:
            raise InputError(str(exc)) from None
        fitted = fit_latency(group, chosen, arch=arch, hardware=hw_for_fit, dtype=dtype, name=model)
        latency[model] = fitted.to_dict()
        models[model] = arch or {"source": "no architecture numbers; latency from the measured table"}
    return latency, models, hw_name, dtype


def _canonical(hardware: str) -> str:
    try:
        return get_hardware(hardware).name
    except ValueError:
        return str(hardware)


def _meta_summary(meta) -> dict[str, Any]:
    return {k: getattr(meta, k) for k in ("models", "hardware", "dtype", "temperature", "dataset", "seed", "commit")}


def _drafter_of(meta, default: str) -> str:
    models = meta.models or {}
    return models.get("draft") or models.get("drafter") or default


def _prompts_of(frame: pd.DataFrame) -> list[str]:
    """The prompt ids a trace ran (its calibration prompts), in order of first appearance."""
    return list(dict.fromkeys(frame["prompt_id"].astype(str))) if "prompt_id" in frame else []


def fit_acceptance_files(token_paths: list[Path], step_paths: list[Path], gamma: int,
                         provenance: list[dict]) -> tuple[dict, dict]:
    """Acceptance entries and drafters from the trace files. Step traces are fitted per (method, drafter,
    dataset, temperature) over every file given at once: a method's steps recorded in several files
    (its calibration configurations, the recorded best) make one fit, not one per file, each
    replacing the last."""
    acceptance, drafters = {}, {}
    for path in token_paths:
        frame, meta = read_trace(path, kind="token")
        drafter = _drafter_of(meta, "drafter")
        entry = fit_token_acceptance(frame, drafter=drafter, dataset=meta.dataset, temperature=meta.temperature,
                                     gamma=gamma, source=f"token trace {path.name}")
        acceptance[f"{drafter}/{meta.dataset or 'data'}/T{meta.temperature:g}"] = entry
        drafters.setdefault(drafter, {"kind": "draft_model", "model": drafter})
        provenance.append({"path": str(path), "kind": "token", **_meta_summary(meta), "prompts": _prompts_of(frame)})
    groups: dict[tuple[str, str, str, float], list[tuple[pd.DataFrame, str]]] = {}
    for path in step_paths:
        frame, meta = read_trace(path, kind="step")
        for method, group in frame.groupby("method"):
            key = (method, _drafter_of(meta, method), meta.dataset or "data", meta.temperature)
            groups.setdefault(key, []).append((group, path.name))
        provenance.append({"path": str(path), "kind": "step", **_meta_summary(meta), "prompts": _prompts_of(frame)})
    for (method, drafter, dataset, temperature), parts in groups.items():
        group = pd.concat([frame for frame, _ in parts], ignore_index=True)
        names = ", ".join(name for _, name in parts)
        own = methods.get(method).fit_steps(group, dataset=dataset, temperature=temperature,
                                            source=f"step trace{'s' if len(parts) > 1 else ''} {names}")
        if own is not None:        # a method with an acceptance part of its own (no drafter)
            acceptance[f"{method}/{dataset}"] = own
            drafters.setdefault(method, {"kind": method})
            continue
        entry = fit_step_acceptance(group, drafter=drafter, dataset=dataset, temperature=temperature,
                                    source=f"step trace{'s' if len(parts) > 1 else ''} {names} ({method})")
        acceptance[f"{drafter}/{dataset}/T{temperature:g}/steps"] = entry
        drafters.setdefault(drafter, {"kind": "draft_model", "model": drafter})
    return acceptance, drafters


def build_profile(args: argparse.Namespace) -> Profile:
    """The traces' fits, over --base's entries where it is given (a fitted entry replaces the base's)."""
    traces: list[dict] = []
    base = Profile.load(args.base) if args.base else None
    latency, models, hw_name, dtype = fit_latency_files(args.latency, args.latency_kind, args.hardware,
                                                        parse_arch_overrides(args.arch), traces)
    acceptance, drafters = fit_acceptance_files(args.tokens, args.steps, args.gamma, traces)
    if not traces:
        raise InputError("no trace files given: pass --latency, --tokens and/or --steps")
    target = args.target or (base.target if base else None)
    if target is None:
        raise InputError("--target is required (the model that verifies)")
    priced = {*(base.latency if base else ()), *latency}
    if target not in priced:        # a Profile that cannot price its own target fails only later
        raise InputError(f"--target '{target}' has no latency model: the latency traces"
                         f"{' and --base' if base else ''} measured {', '.join(sorted(priced)) or 'nothing'} "
                         f"(pass --target one of them, or --latency traces of '{target}')")
    if target not in models and not (base and target in base.models):
        arch = resolve_arch(target, parse_arch_overrides(args.arch))
        models[target] = arch or {"source": "no architecture numbers"}
    for spec in drafters.values():  # a drafter model nothing was measured for: keep only its kind
        if spec.get("model") not in models and spec.get("model") not in latency and not (base and spec.get("model") in base.models):
            spec.pop("model", None)
    prompts = list(dict.fromkeys(p for t in traces for p in t.pop("prompts", ())))   # said once, as calibration prompts
    record = {"traces": traces, "commit": git_commit(), "created": dt.datetime.now(dt.timezone.utc).isoformat(),
              "sources": [t["path"] for t in traces], "built_by": "python -m calibrate.fit"}
    name = args.name or (base.name if base else "fitted profile")
    hardware = hw_name or args.hardware or (base.hardware if base else "unknown")
    # new latency traces from before traces said where they were timed: only their hardware's name
    machine = latency_machine(traces) or (base.machine if base and not latency else Machine(datasheet=hardware))
    raw = {"schema_version": schema.SCHEMA_VERSION, "name": name,
           "hardware": hardware,
           "dtype": dtype or args.dtype or (base.dtype if base else "fp16"), "target": target,
           "models": models, "latency": latency, "acceptance": acceptance, "drafters": drafters,
           "provenance": {**record, "calibration_prompts": prompts}, "machine": machine.to_dict()}
    if base is not None:            # the fitted entries over the base's; the rest of the base kept as it is
        kept = base.to_dict()
        raw = {**kept, **{k: raw[k] for k in ("name", "hardware", "dtype", "target", "machine")},
               **{key: {**kept[key], **raw[key]} for key in ("models", "latency", "acceptance", "drafters")},
               "provenance": refitted_provenance(base.provenance, record, prompts, acceptance).to_dict()}
    return Profile(**schema.parse(raw, source=name))


def latency_machine(traces: list[dict]) -> Machine | None:
    """The machine the latency traces were timed on, where they record it (`traces.timing`); None
    where none does. Traces timed on two machines are refused: a Profile prices one machine's steps."""
    recorded = [(t["path"], Machine.of(t["machine"])) for t in traces if "machine" in t]
    for path, machine in recorded[1:]:
        if (differ := recorded[0][1].differences(machine)):
            raise InputError(f"{recorded[0][0]} and {path} were timed on different machines ({'; '.join(differ)}): "
                             "a Profile prices one machine's steps; fit each machine's traces apart")
    return recorded[0][1] if recorded else None


def refitted_provenance(base: Provenance, record: dict, prompts: list[str], refitted: dict) -> Provenance:
    """--base's provenance, what it was built from kept: its calibration prompts joined by the traces'
    (a prompt fitted on is never validated on), and this fit's record appended to `REFITS`."""
    calibrated = tuple(dict.fromkeys([*base.calibration_prompts, *prompts]))
    done = {**record, "entries": sorted(refitted)}
    details = Record({**base.details, REFITS: [*base.details.get(REFITS, ()), done]})
    return replace(base, calibration_prompts=calibrated, details=details)


@cli_entry
def main(argv: list[str] | None = None) -> int:
    parser = CliParser(prog="python -m calibrate.fit",
                                     description="Fit latency and acceptance models from traces into a Profile.")
    parser.add_argument("--out", type=Path, required=True, help="Profile JSON file to write (atomically)")
    parser.add_argument("--name", help="the Profile's name (default: --base's, else 'fitted profile')")
    parser.add_argument("--target", help="the target (verifying) model's name; defaults to --base's target")
    parser.add_argument("--hardware", help=f"hardware the latency traces were measured on, one of "
                        f"{', '.join(hardware_names())}; default: the latency traces' own")
    parser.add_argument("--dtype", help="dtype when no latency trace says it (default fp16)")
    parser.add_argument("--latency", type=Path, nargs="*", default=[], help="LatencyTrace parquet files")
    parser.add_argument("--latency-kind", choices=["auto", "roofline", "table"], default="auto",
                        help="latency model kind; auto = roofline where the architecture is known, else table")
    parser.add_argument("--arch", nargs="*", default=[], metavar="MODEL=ARCH",
                        help="architecture of a traced model: a registry name (costmodel.params) or a JSON file")
    parser.add_argument("--tokens", type=Path, nargs="*", default=[], help="TokenTrace parquet files")
    parser.add_argument("--steps", type=Path, nargs="*", default=[], help="StepTrace parquet files")
    parser.add_argument("--gamma", type=int, default=8, help="draft length of the per-position replay (>= 1)")
    parser.add_argument("--base", type=Path,
                        help="a Profile to start from; fitted entries replace its own (default: none, an empty profile)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an existing --out file (--base included) instead of refusing")
    args = parser.parse_args(argv)
    if args.gamma < 1:
        raise InputError(f"--gamma must be >= 1, got {args.gamma}")
    claim_file(args.out, args.overwrite)
    if args.hardware is not None:   # before any trace is read: a name the cost model knows, canonical
        try:
            args.hardware = get_hardware(args.hardware).name
        except ValueError as exc:
            raise InputError(f"--hardware: {exc}") from None
    profile = build_profile(args)
    profile.save(args.out)
    for name, model in profile.latency.items():
        fit = model.fit
        if "mape_train" in fit and "mape_heldout" in fit:       # a table carried from --base has no held-out grid
            print(f"latency {name}: {model.kind}, MAPE fitted {fit['mape_train']:.2f}%, "
                  f"held-out {fit['mape_heldout']:.2f}% ({fit['n_heldout']} of {fit['n_points']} points)")
    for key in profile.acceptance:
        print(f"acceptance {key}: alpha {profile.acceptance_model(key).alpha:.4f}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
