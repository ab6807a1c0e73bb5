"""What every importer returns (`Ingested`), the helpers they share, and the merge into a Profile.

An importer reads one engine's or benchmark's output and returns an `Ingested`: a Profile
acceptance entry and/or a StepTrace and/or latency observations, each with provenance (format,
source files, the model names the source states) and `not_provided`, one line per thing the source
could not give and how it was filled. Bad input is one InputError line naming file, line and field.

Acceptance from counts (vLLM's counters, `vllm bench serve`'s spec-decode fields) is turned into
the Profile's definitions here, once: vLLM's per-position rate a_i = accepted at position i /
drafts is P(positions 1..i all accepted), so beta_i = a_i / a_(i-1); alpha is accepted tokens over
evaluated positions (a position is evaluated when every earlier one was accepted), the same
estimate `calibrate.fit_acceptance.fit_step_acceptance` makes from a StepTrace.
"""
from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import pandas as pd

from calibrate.acceptance import AcceptanceModel
from calibrate.profile import Profile
from common.errors import InputError


@dataclass
class IngestOptions:
    """What the user states because the sources do not (each importer says which it reads)."""

    drafter: str | None = None        # the drafter's name (a Profile drafter or its model)
    target: str | None = None         # the target's name when the source does not state it
    dataset: str | None = None
    temperature: float | None = None
    gamma: int | None = None          # draft length when the source does not state it
    method: str = "sd"                # StepTrace method of imported chain steps


@dataclass
class Ingested:
    format: str
    sources: list[str]
    models: dict[str, str] = field(default_factory=dict)          # role -> name stated by the source
    acceptance: dict[str, Any] | None = None                       # a Profile acceptance entry
    steps: pd.DataFrame | None = None                              # a StepTrace
    step_metadata: Any = None                                      # traces.schema.RunMetadata of `steps`
    latency: dict[str, dict[str, float]] = field(default_factory=dict)   # observation -> stats (seconds)
    throughput: dict[str, float] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    not_provided: list[str] = field(default_factory=list)

    def provenance(self) -> dict[str, Any]:
        return {"format": self.format, "sources": self.sources, "models": self.models,
                "not_provided": self.not_provided}

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {**self.summary, "format": self.format, "sources": self.sources,
                               "models": self.models}
        if self.acceptance is not None:
            out["acceptance"] = self.acceptance
        if self.steps is not None:
            out["steps"] = {"rows": len(self.steps), "prompts": int(self.steps["prompt_id"].nunique()),
                            "mean_accepted_tokens": float(self.steps["accepted"].mean())}
        if self.latency:
            out["latency_s"] = self.latency
        if self.throughput:
            out["throughput"] = self.throughput
        out["not_provided"] = self.not_provided
        return out


# ---- reading --------------------------------------------------------------------------------------
def existing(path: str | Path) -> Path:
    p = Path(path)
    if not p.exists():
        raise InputError(f"{p}: file not found")
    if not p.is_file():
        raise InputError(f"{p}: not a file")
    return p


def json_records(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) of a JSON file (one object, line 1) or a JSON-lines file."""
    p = existing(path)
    text = p.read_text(encoding="utf-8")
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        whole = None
    if isinstance(whole, dict):
        yield 1, whole
        return
    found = False
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{p}:{number}: not valid JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(record, dict):
            raise InputError(f"{p}:{number}: expected a JSON object, got {type(record).__name__}")
        found = True
        yield number, record
    if not found:
        raise InputError(f"{p}: no JSON object in the file")


def need(record: dict[str, Any], key: str, where: str, kind: type | tuple = (int, float)) -> Any:
    """record[key], checked: InputError naming `where` (file:line) and the field when missing or mistyped."""
    if key not in record or record[key] is None:
        raise InputError(f"{where}: missing field '{key}'")
    value = record[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
        names = "/".join(k.__name__ for k in kinds)
        raise InputError(f"{where}: field '{key}' must be {names}, got {value!r}")
    return value


# ---- acceptance from counts -----------------------------------------------------------------------
def chain_acceptance(drafts: float, accepted: float, per_position: list[float], where: str) -> dict[str, Any]:
    """Profile quantities from spec-decode counts: drafts, accepted draft tokens, accepted per position."""
    if drafts <= 0:
        raise InputError(f"{where}: no drafts counted (the number of drafts is {drafts:g}); "
                         "was speculative decoding on while it was measured?")
    if accepted < 0 or any(c < 0 for c in per_position):
        raise InputError(f"{where}: negative accepted-token counts")
    rates = [c / drafts for c in per_position]
    if any(r > 1.0 + 1e-9 for r in rates):
        raise InputError(f"{where}: a position accepted more tokens than there were drafts")
    out: dict[str, Any] = {"per_position_acceptance": rates, "mean_accepted_tokens": 1.0 + accepted / drafts}
    if per_position:
        if abs(sum(per_position) - accepted) > max(1.0, 0.01 * accepted):
            raise InputError(f"{where}: accepted tokens per position sum to {sum(per_position):g}, "
                             f"but {accepted:g} accepted tokens are counted")
        reached = [1.0] + rates[:-1]                      # P(position i evaluated) = P(1..i-1 accepted)
        betas = [r / p for r, p in zip(rates, reached) if p > 0]
        out["alpha_by_position"] = [min(1.0, b) for b in betas]
        out["alpha"] = min(1.0, sum(rates) / sum(reached))
    return out


def acceptance_entry(quantities: dict[str, Any], ingested: Ingested, options: IngestOptions,
                     counts: dict[str, float]) -> dict[str, Any]:
    """A validated Profile acceptance entry from `chain_acceptance` (or alpha) quantities."""
    entry = {"drafter": options.drafter or ingested.models.get("drafter", ""),
             "temperature": float(options.temperature if options.temperature is not None else 0.0),
             "dataset": options.dataset or "",
             "alpha": quantities["alpha"],
             **({"alpha_by_position": quantities["alpha_by_position"]} if "alpha_by_position" in quantities else {}),
             "source": f"{ingested.format}: {', '.join(Path(s).name for s in ingested.sources)}",
             "fit": counts, "ingest": ingested.provenance()}
    AcceptanceModel.from_dict(entry, name=ingested.format)
    return entry


def stated_context(options: IngestOptions, ingested: Ingested, temperature_known: bool = False,
                   dataset_known: bool = False) -> None:
    """Record the run context the user states (or its default) in `not_provided`."""
    if not temperature_known:
        ingested.not_provided.append(
            f"sampling temperature: {options.temperature:g} (--temperature)" if options.temperature is not None
            else "sampling temperature: assumed 0, greedy (pass --temperature)")
    if not options.dataset and not dataset_known:
        ingested.not_provided.append("dataset name: left empty (pass --dataset)")


# ---- models and the Profile merge -----------------------------------------------------------------
def same_model(a: str, b: str) -> bool:
    """Names agree when equal after lower-casing and dropping a hub organisation or directory."""
    return a.strip().rstrip("/").split("/")[-1].lower() == b.strip().rstrip("/").split("/")[-1].lower()


def profile_drafter(profile: Profile, name: str) -> str:
    """The Profile drafter `name` refers to (its key or its model); InputError naming both otherwise."""
    for key, spec in profile.drafters.items():
        if same_model(key, name) or (spec.get("model") and same_model(str(spec["model"]), name)):
            return key
    raise InputError(f"drafter '{name}' is not a drafter of profile '{profile.name}' "
                     f"(has: {', '.join(sorted(profile.drafters)) or 'none'})")


def merge_into_profile(base: Profile, ingested: Ingested, options: IngestOptions,
                       entry: dict[str, Any], commit: str = "") -> Profile:
    """A copy of `base` with the ingested acceptance entry and its provenance; refuses other models."""
    target = ingested.models.get("target") or options.target
    if target and not same_model(target, base.target):
        raise InputError(f"the source's target '{target}' differs from profile '{base.name}' target '{base.target}'")
    vocab = ingested.models.get("target_vocab")
    known_vocab = base.models.get(base.target, {}).get("vocab")
    if vocab is not None and known_vocab is not None and int(vocab) != int(known_vocab):
        raise InputError(f"the source's target vocabulary {vocab} differs from profile '{base.name}' "
                         f"vocabulary {known_vocab} of '{base.target}'")
    drafter = options.drafter or ingested.models.get("drafter")
    if not drafter:
        raise InputError(f"the source does not name its drafter: pass --drafter "
                         f"(profile '{base.name}' has: {', '.join(sorted(base.drafters)) or 'none'})")
    source_drafter = ingested.models.get("drafter")
    if options.drafter and source_drafter and not same_model(options.drafter, source_drafter):
        raise InputError(f"--drafter '{options.drafter}' differs from the source's drafter '{source_drafter}'")
    key_drafter = profile_drafter(base, drafter)
    raw = base.to_dict()
    entry = {**entry, "drafter": key_drafter}
    temperature = float(entry.get("temperature", 0.0))
    key = f"{key_drafter}/{entry.get('dataset') or 'data'}/T{temperature:g}/{ingested.format}"
    raw["acceptance"] = {**raw["acceptance"], key: entry}
    provenance = dict(raw.get("provenance", {}))
    provenance["ingested"] = [*provenance.get("ingested", []), {
        **ingested.provenance(), "acceptance_key": key, "latency_s": ingested.latency,
        "throughput": ingested.throughput, "commit": commit,
        "created": dt.datetime.now(dt.timezone.utc).isoformat()}]
    raw["provenance"] = provenance
    merged = Profile.from_dict(raw, source=f"profile '{base.name}' with {ingested.format}")
    merged.acceptance_model(key)
    return merged


# ---- chain StepTraces -----------------------------------------------------------------------------
def chain_config(method: str, gamma: int) -> str:
    """The StepTrace `config` text of a chain step of draft length `gamma` (the method's own parser)."""
    import methods

    try:
        spec = methods.get(method)
    except (KeyError, ValueError) as exc:
        raise InputError(f"--method: {str(exc).splitlines()[0]}") from None
    return json.dumps(spec.parse({"gamma": int(gamma)}).to_dict(), sort_keys=True)


def chain_mask(accepted: int, drafted: int) -> list[bool]:
    """accept_mask of a chain step: accepted - 1 hits, then the miss unless every draft was accepted."""
    hits = min(max(accepted - 1, 0), drafted)
    return [True] * hits + ([False] if hits < drafted else [])


def from_steps(result: Ingested, frame: pd.DataFrame, metadata: Any, options: IngestOptions) -> Ingested:
    """Fill `result` from a chain StepTrace: its acceptance entry (fit_step_acceptance) and summary."""
    from calibrate.fit_acceptance import fit_step_acceptance

    result.steps, result.step_metadata = frame, metadata
    drafter = options.drafter or result.models.get("drafter", "")
    entry = fit_step_acceptance(frame, drafter=drafter, dataset=metadata.dataset, temperature=metadata.temperature,
                                source=f"{result.format}: {', '.join(Path(s).name for s in result.sources)}")
    entry["ingest"] = result.provenance()
    AcceptanceModel.from_dict(entry, name=result.format)
    result.acceptance = entry
    drafted = frame["accept_mask"].map(len)
    hits = frame["accept_mask"].map(lambda m: sum(bool(x) for x in m))
    depth = int(drafted.max()) if len(frame) else 0
    result.summary.update({
        "mean_accepted_tokens": float(frame["accepted"].mean()),
        "per_position_acceptance": [float((hits > i).mean()) for i in range(depth)],
        "alpha": entry["alpha"]})
    return result
