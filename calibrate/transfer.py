"""Model transfer: a Profile for a target (and drafters) no Profile measured, on hardware a Profile has.

    python -m calibrate.transfer --profile data/profiles/coral-llama-3-8b-a6000.json \
        --target qwen2.5-14b --out out/coral-qwen2.5-14b-a6000.json

Latency belongs to (architecture, hardware, engine), not to the weights: a paper Profile's latency
models all come from one set of hardware terms (bandwidth and compute efficiency, the host's launch
time per forward and per layer, per-forward work: `calibrate.terms.model_latency`), recorded
in each model's fit. `transfer_profile` prices the new target from its architecture (a registry name
of `costmodel.params`, a Hugging Face config.json, or a model the source Profile lists) with those
terms; each drafter of the source is carried over: a draft model as it is (priced again on the same
terms, or replaced by `--drafter`), a drafter built from the target (GLIDE, EAGLE/CORAL, Kangaroo)
rebuilt for the new target's dimensions. The engine calibration is kept (it is the engine's).

Acceptance belongs to (target, drafter, data), which no one measured for the new pair: the source's
entries are carried and marked ASSUMED in their source (within a model family, MCSD's Table 1 finds
acceptance barely moves with target size), unless `--acceptance FILE.json` gives entries (Profile
form) for it, which also adds datasets the source lacks. `--workload` sets a dataset's context.
A source latency model that is a measured table cannot be moved to another architecture: refused.

How well this predicts is measured by holding out one model size of a paper and predicting its
rows from the others (`papers.calibration.leave_one_out(model, "size")`, which prices through the
same `model_latency`); `python -m experiments.reproduce` reports it per paper.
"""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from calibrate.terms import HARDWARE_FIT, HARDWARE_TERMS, model_latency
from profiles.acceptance import AcceptanceModel
from profiles.latency import RooflineLatency
from profiles.parts import Drafter
from profiles.profile import Profile
from common.cli import CliParser, cli_entry
from common.errors import InputError
from common.rundir import claim_file
from costmodel import workloads
from costmodel.params import Arch, arch_dict, drafter_arch, get_arch


def hardware_terms_of(profile: Profile, model: str | None = None) -> dict[str, float]:
    """The hardware terms `model` (default: the target) was priced with: those its paper fit recorded,
    else the roofline's own (its launch floor taken as the fixed part, none per layer)."""
    model = model or profile.target
    spec = profile.latency_model(model)
    if not isinstance(spec, RooflineLatency):
        raise InputError(f"profile '{profile.name}': latency model '{model}' is a measured {spec.kind!r}, "
                         "which prices one architecture only; a transfer needs a roofline model")
    recorded = spec.fit.get(HARDWARE_FIT)
    if recorded:
        return {k: float(recorded[k]) for k in HARDWARE_TERMS}
    return {"bw_eff": spec.bw_eff, "flops_eff": spec.flops_eff, "launch_s": spec.launch_s, "launch_per_layer_s": 0.0,
            "overhead_s": spec.overhead_s}


def read_json(path: Path, what: str) -> Any:
    """The JSON in `path`; one-line InputError when it is missing or not JSON."""
    if not path.exists():
        raise InputError(f"{what} not found: {path}")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None


def read_arch(spec: str, source: Profile | None = None) -> tuple[str, dict[str, Any]]:
    """(name, architecture dict) of `spec`: a model the source Profile lists, a `costmodel.params`
    registry name, or a Hugging Face config.json path (its name: the file's folder)."""
    if source is not None and spec in source.models:
        return spec, source.arch(spec).to_dict()
    path = Path(spec)
    if path.suffix == ".json" or path.exists():
        raw = read_json(path, "architecture file")
        name = path.parent.name if path.name == "config.json" and path.parent.name else path.stem
        try:
            return name.lower(), Arch.from_dict(raw, name).to_dict()
        except (ValueError, TypeError) as exc:
            raise InputError(f"{path}: {exc}") from None
    try:
        get_arch(spec)
    except ValueError as exc:
        raise InputError(f"--target/--drafter {spec!r}: not a model of the profile, a registry architecture "
                         f"or a config.json ({exc})") from None
    return spec.lower(), arch_dict(spec)


def _rebuilt_drafter(spec: Drafter, target: dict) -> dict | None:
    """A drafter built from its target's dimensions (GLIDE, EAGLE/CORAL, Kangaroo), rebuilt for the new
    target with the options its entry states (its early-exit layer, its router); None for a draft model."""
    if spec.kind == "draft_model":
        return None
    try:
        return drafter_arch(spec.kind, target, **spec.arch_options())
    except ValueError as exc:
        raise InputError(f"drafter of kind {spec.kind}: {exc}") from None


def transfer_profile(source: Profile, target: str, *, drafter: str | None = None,
                     acceptance: dict[str, dict] | None = None, workloads: dict[str, dict] | None = None,
                     name: str | None = None) -> Profile:
    """The source Profile moved to another target (see the module docstring). `drafter` replaces
    the draft model of every draft-model drafter; `acceptance` entries replace the carried ones;
    `workloads` ({dataset: {prompt_tokens, new_tokens[, source]}}) add to or replace the source's."""
    terms = hardware_terms_of(source)
    target_name, target_arch = read_arch(target, source)
    how = (f"transferred by calibrate.transfer from profile '{source.name}' ({source.hardware}): its hardware "
           "terms " + ", ".join(f"{k} {v:.4g}" for k, v in terms.items()))
    models = {target_name: target_arch}
    latency = {target_name: model_latency(target_arch, source.hardware, terms, target_name, how).to_dict()}
    drafters = {}
    new_draft = read_arch(drafter, source) if drafter else None
    for dname, spec in source.drafters.items():
        if spec.model is None:
            drafters[dname] = spec.to_dict()
            continue
        rebuilt = _rebuilt_drafter(spec, target_arch)
        if rebuilt is not None:
            model_name, arch = f"{spec.model}->{target_name}", rebuilt
            spec = replace(spec, model=model_name,
                           adapter_model=model_name if spec.adapter_model is not None else None)
        elif new_draft is not None:
            model_name, arch = new_draft
            spec = replace(spec, model=model_name)
        else:
            model_name, arch = spec.model, source.arch(spec.model).to_dict()
        models[model_name] = arch
        latency[model_name] = model_latency(arch, source.hardware, terms, model_name, how).to_dict()
        drafters[dname] = spec.to_dict()
    entries = {key: entry.to_dict() for key, entry in source.acceptance.items()}
    for entry in entries.values():
        entry["source"] = (f"ASSUMED: measured on {source.target} (profile '{source.name}'), carried to {target_name}; "
                           + str(entry.get("source", "")))
        if entry.get("drafter") not in drafters:
            entry["drafter"] = next(iter(drafters), entry.get("drafter"))
    for key, entry in (acceptance or {}).items():
        if not isinstance(entry, dict):
            raise InputError(f"--acceptance entry '{key}' must be an object (a Profile acceptance entry)")
        if entry.get("drafter") not in drafters:
            raise InputError(f"--acceptance entry '{key}' names drafter {entry.get('drafter')!r}; the profile's "
                             f"drafters are {', '.join(drafters) or 'none'}")
        entries[key] = entry
    carried = source.provenance.details
    provenance = {"built_by": "python -m calibrate.transfer", "transferred_from": source.name,
                  "hardware_terms": terms, "sources": list(carried.get("sources", [])),
                  "assumptions": [
                      f"latency of every model priced from its architecture on {source.hardware} with the hardware "
                      f"terms of '{source.name}' (calibrate.terms.model_latency)",
                      "engine calibration (per-step work) carried from the source: the engine's, not the model's",
                      "acceptance entries carried from the source unless given, each marked ASSUMED in its source",
                      *carried.get("assumptions", [])],
                  "traces": [], "latency_fit": source.provenance.latency_fit.to_json()}
    return Profile.build(name=name or f"{target_name}-{source.hardware.lower()}-from-{source.name}",
                         hardware=source.hardware, dtype=source.dtype, target=target_name, models=models,
                         latency=latency, drafters=drafters, acceptance=entries, provenance=provenance,
                         engine=source.engine.to_dict(), machine=source.machine.to_dict(),
                         workload={**{d: w.to_dict() for d, w in source.workload.items()}, **(workloads or {})})


def parse_workload(text: str) -> tuple[str, dict]:
    """'cnn' (a dataset of costmodel.workloads) or 'NAME=PROMPT,NEW' (tokens)."""

    if "=" not in text:
        try:
            return text.lower(), workloads.workload(text)
        except ValueError as exc:
            raise InputError(f"--workload {text!r}: {exc}; or give NAME=PROMPT_TOKENS,NEW_TOKENS") from None
    name, _, lengths = text.partition("=")
    try:
        prompt, new = (float(v) for v in lengths.split(","))
    except ValueError:
        raise InputError(f"--workload {text!r}: lengths must be PROMPT_TOKENS,NEW_TOKENS (two numbers)") from None
    if prompt < 0 or new < 1:
        raise InputError(f"--workload {text!r}: prompt tokens must be >= 0 and new tokens >= 1")
    return name.strip().lower(), {"prompt_tokens": prompt, "new_tokens": new, "source": "given with --workload"}


@cli_entry
def main(argv: list[str] | None = None) -> int:
    parser = CliParser(prog="python -m calibrate.transfer", description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", required=True, type=Path, help="source Profile (its hardware, engine, drafters)")
    parser.add_argument("--target", required=True,
                        help="new target: a costmodel.params registry name, a Hugging Face config.json, or a model "
                             "of the source profile")
    parser.add_argument("--drafter", default=None,
                        help="new draft model for the source's draft-model drafters (same forms as --target); "
                             "default: keep theirs")
    parser.add_argument("--acceptance", type=Path, default=None,
                        help="JSON object of acceptance entries (Profile form) for the new pair (default: "
                             "the source's, marked ASSUMED)")
    parser.add_argument("--workload", action="append", default=[],
                        help="a dataset's context: NAME=PROMPT_TOKENS,NEW_TOKENS or a dataset of "
                             "costmodel.workloads (cnn, xsum, mt-bench, ...); repeatable (default: the "
                             "source's contexts)")
    parser.add_argument("--name", default=None, help="name of the new Profile (default: derived from target and source)")
    parser.add_argument("--out", required=True, type=Path, help="where to write the new Profile (JSON); an existing "
                                                                  "file is replaced only with --overwrite")
    parser.add_argument("--overwrite", action="store_true", help="replace --out when it exists (default: refuse)")
    args = parser.parse_args(argv)
    claim_file(args.out, args.overwrite)
    source = Profile.load(args.profile)
    acceptance = None
    if args.acceptance is not None:
        acceptance = read_json(args.acceptance, "--acceptance file")
        if not isinstance(acceptance, dict):
            raise InputError(f"{args.acceptance}: must be a JSON object of acceptance entries")
        for key, entry in acceptance.items():      # each entry checked here, so its error names this file
            try:
                AcceptanceModel.from_dict(entry, name=key)
            except InputError as exc:
                raise InputError(f"{args.acceptance}: {exc}") from None
    profile = transfer_profile(source, args.target, drafter=args.drafter, acceptance=acceptance,
                               workloads=dict(parse_workload(w) for w in args.workload), name=args.name)
    for key in profile.acceptance:
        profile.acceptance_model(key)            # every entry must parse before the file is written
    for model in profile.latency:
        profile.latency_model(model)
    path = profile.save(args.out)
    target = profile.latency_model(profile.target)
    print(f"wrote {path}: {profile.target} on {profile.hardware}, one-token forward "
          f"{float(target.predict(1, profile.workload_ctx(None) or 256)) * 1e3:.2f} ms; drafters "
          f"{', '.join(profile.drafters) or 'none'}; {len(profile.acceptance)} acceptance entries")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
