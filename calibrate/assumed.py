"""Every method an engine offers, priced on a Profile that did not measure it, its acceptance ASSUMED.

A paper's Profile measured the paper's own method: CORAL's Llama-3-8B knows no draft model and no
n-gram lookup. Latency belongs to (architecture, hardware, engine), so the drafter a method states for
this target (`MethodSpec.assumed_drafters`: a registry draft model of the target's tokenizer, an
EAGLE head built from the target's dimensions, no model at all for prompt lookup) is priced from its
architecture with the hardware terms the Profile's target was priced with (`calibrate.transfer`'s,
one place for both). Acceptance belongs to (target, drafter, data), which no one measured here: the
entries of the bundled Profile the method names are carried to each (dataset, temperature) the
Profile records, the donor's own dataset where it has one (else the one the method prefers) at its
nearest temperature, each entry's source beginning "ASSUMED:" with where it came from. The sweep
marks every row scored on one (`acceptance_source`) and lists them in its report. An acceptance
measured for the pair (`calibrate.ingest` on an engine's file, `calibrate.fit` on traces) gives the
method a setup of its own, and nothing is assumed for it.
"""
from __future__ import annotations

import functools
from dataclasses import replace
from typing import Iterable

import methods
from calibrate.terms import model_latency
from calibrate.transfer import hardware_terms_of, read_arch
from common.bundled import bundled
from common.errors import InputError
from costmodel.params import Arch
from profiles.acceptance import AcceptanceModel, part_owners
from profiles.parts import Drafter, typed_drafters
from profiles.profile import ASSUMED_FOR, Profile
from profiles.record import Record
from profiles.schema import model_entry

ASSUMED = "ASSUMED"           # how an assumed entry's source begins, and the sweep's acceptance_source
MODES = ("missing", "all", "none")   # methods without a setup / also a shape the Profile lacks / nothing


def is_assumed(entry: AcceptanceModel) -> bool:
    return entry.source.startswith(ASSUMED)


@functools.lru_cache(maxsize=8)
def _donor(stem: str) -> Profile:
    path = bundled("profiles") / f"{stem}.json"
    if not path.exists():
        raise InputError(f"assumed acceptance: bundled profile {path} not found")
    return Profile.load(path)


def _carried(donor: Profile, drafter: str, prefer: str, dataset: str, temperature: float) -> AcceptanceModel:
    """The donor's entry of `drafter` on `dataset` (else `prefer`) at the temperature nearest `temperature`."""
    entries = [a for a in donor.acceptance.values() if a.drafter == drafter]
    for name in (dataset, prefer):
        same = [a for a in entries if a.dataset == name]
        if same:
            return min(same, key=lambda a: abs(a.temperature - temperature))
    raise InputError(f"assumed acceptance: profile '{donor.name}' has no entry of drafter '{drafter}' on "
                     f"'{dataset}' or '{prefer}'")


def _like(profile: Profile, drafter: Drafter) -> bool:
    """Whether the Profile has a drafter of this one's kind and shape (a tree, or a chain)."""
    return any(d.kind == drafter.kind and (d.tree is None) == (drafter.tree is None) for d in profile.drafters.values())


def _missing(profile: Profile, spec) -> bool:
    try:
        profile.setups_for(spec)
    except InputError:
        return True
    return False


def _draft_model(spec: str, target: Arch) -> tuple[str, dict]:
    """(name, architecture) of `--draft-model` (a registry name or a config.json), refused in one line
    when its vocabulary is not the target's tokenizer's (within Qwen2.5's unused rows, 1%)."""
    try:
        name, arch = read_arch(spec)
    except InputError as exc:
        raise InputError(f"--draft-model {spec}: not a registry architecture or a config.json "
                         f"({str(exc).rpartition('(')[2].rstrip(')')})") from None
    if abs(int(arch["vocab"]) - target.vocab) > 0.01 * target.vocab:
        raise InputError(f"--draft-model {spec}: its vocabulary ({int(arch['vocab']):,}) is not the target's "
                         f"({target.vocab:,}): a draft model must share the target's tokenizer")
    return name, arch


def _entries(target: str, method: str, drafter: str, assumed, combos) -> dict[str, AcceptanceModel]:
    """The acceptance entries of `drafter` (method `method`'s alone) at each (dataset, temperature)
    of `combos`, each carried from the donor Profile's nearest entry (the parts that hold on another
    target: `MethodSpec.carried_part`) and its source saying so."""
    donor = _donor(assumed.donor)
    owners = part_owners()
    entries = {}
    for dataset, temperature in combos:
        src = _carried(donor, assumed.donor_drafter, assumed.prefer, dataset, temperature)
        key = f"{drafter}/{dataset}/T{temperature:g}"
        source = (f"{ASSUMED}: drafter {drafter} of {target}, {assumed.why}, measured on {src.dataset} at "
                  f"T={src.temperature:g} (profile '{donor.name}', entry '{src.name}': {src.source}); carried to "
                  f"{target} on {dataset} at T={temperature:g}")
        own = {part: owners[part].carried_part(value) for part, value in src.own.items()}
        entries[key] = replace(src, name=key, drafter=drafter, dataset=dataset, temperature=temperature,
                               source=source, own=Record(own), extra=Record({**src.extra, ASSUMED_FOR: method}))
    return entries


def with_assumed(profile: Profile, names: Iterable[str], mode: str = "missing",
                 draft_model: str | None = None) -> Profile:
    """`profile` with the assumed drafters of every engine-offered method in `names`: those with no
    setup on it ("missing"), or also drafters of a kind and shape it lacks beside measured ones ("all",
    which may move the ranks of a method's measured rows); "none" returns it as it is. `draft_model`
    (a registry name or a config.json) replaces the assumed draft model and is added beside measured
    ones. A drafter with a model needs the target's latency priced from its architecture (a GPU
    Profile), else is left out."""
    if mode not in MODES:
        raise InputError(f"--assumed must be one of {', '.join(MODES)}, got {mode!r}")
    if mode == "none":
        return profile
    try:
        terms = hardware_terms_of(profile)
    except InputError:          # a measured table prices its own models only
        terms = None
    models, latency = dict(profile.models), dict(profile.latency)
    drafters, acceptance = dict(profile.drafters), dict(profile.acceptance)
    combos = list(dict.fromkeys((a.dataset, a.temperature) for a in profile.acceptance.values()))   # its order
    added = []
    for name in names:
        spec = methods.get(name)
        if not spec.engine_offered:
            continue
        measured = mode == "missing" and not _missing(profile, spec)
        for drafter, assumed in spec.assumed_drafters(profile.target, profile.arch()).items():
            chosen = bool(draft_model and assumed.any_model)
            if chosen:
                model, arch = _draft_model(draft_model, profile.arch())
                drafter = model
                assumed = replace(assumed, entry={**assumed.entry, "model": model}, arch=arch)
            typed = typed_drafters({drafter: assumed.entry})[drafter]
            if drafter in profile.drafters or (not chosen and (measured or _like(profile, typed))) \
                    or (assumed.model and terms is None):
                continue
            model = assumed.model
            if model and model not in models:
                how = (f"priced from its architecture with the hardware terms of '{profile.name}''s target "
                       "(calibrate.assumed)")
                models[model] = model_entry(assumed.arch, model)
                latency[model] = model_latency(assumed.arch, profile.hardware, terms, model, how,
                                               profile.latency_model(profile.target).dtype)
            drafters[drafter] = typed
            acceptance.update(_entries(profile.target, name, drafter, assumed, combos))
            added.append(f"{name} with drafter {drafter}")
    if not added:
        return profile
    details = profile.provenance.details
    assumptions = [*details.get("assumptions", []), *(
        f"{what}: acceptance ASSUMED (calibrate.assumed), no measurement of it on this target" for what in added)]
    provenance = replace(profile.provenance, details=Record({**details, "assumptions": assumptions}))
    return replace(profile, models=models, latency=latency, drafters=drafters, acceptance=acceptance,
                   provenance=provenance)
