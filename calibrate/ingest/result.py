"""What every importer returns (`Ingested`), the helpers they share, and the merge into a Profile.

An importer reads one engine's or benchmark's output and returns an `Ingested`: a Profile
acceptance entry and/or a StepTrace and/or latency observations, each with provenance (format,
source files, the model names the source states) and `not_provided`, one line per thing the source
could not give and how it was filled. Bad input is one InputError line naming file, line and field;
so is a file of another format (`looks_like` names the format it is) and, when asked to write it,
a result missing what a Profile entry or StepTrace needs (`Ingested.missing`: a sampling
temperature the file does not record is asked for, never assumed). Acceptance from counts is
`calibrate.ingest.counts`.
"""
from __future__ import annotations

import datetime as dt
import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pandas as pd

from profiles.acceptance import AcceptanceModel
from profiles.profile import Profile
from profiles.record import Record
from common.errors import InputError
import methods
from calibrate.fit_acceptance import evaluated_positions, fit_step_acceptance

# engines whose files measure a chain of drafts (vLLM's EAGLE / draft model / n-gram, transformers'
# assisted generation): merged on a drafter that states a tree, the entry goes to its chain twin
CHAIN_FORMATS = ("vllm-metrics", "vllm-bench", "specdecode-bench", "hf-assisted")


@dataclass
class IngestOptions:
    """What the user states because the sources do not (each importer says which it reads)."""

    drafter: str | None = None        # the drafter's name (a Profile drafter or its model)
    target: str | None = None         # the target's name when the source does not state it
    dataset: str | None = None
    temperature: float | None = None
    gamma: int | None = None          # draft length when the source does not state it
    method: str = methods.CHAIN       # StepTrace method of imported chain steps
    accept_length: str = "cumulative"  # sglang-bench: bench_serving's accept_length since the server start, or per run
    draft_lengths: tuple[int, ...] | None = None          # specdecode-bench: the k to replay (None: 1..recorded)
    ngram_windows: tuple[tuple[int, int], ...] | None = None   # specdecode-bench: (n_min, n_max) to replay (None: default)


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
    missing: str = ""                 # why it cannot be written as a Profile entry / StepTrace ("" when it can)
    warnings: list[str] = field(default_factory=list)             # what the user should know (printed on stderr)
    report: list[str] = field(default_factory=list)               # a format's own lines for the printed summary
    replay: Any = None                                             # traces.span_replay.SpanReplay of a span format

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
        if self.warnings:
            out["warnings"] = self.warnings
        return out


# ---- reading --------------------------------------------------------------------------------------
def existing(path: str | Path) -> Path:
    p = Path(path)
    if not p.exists():
        raise InputError(f"{p}: file not found")
    if not p.is_file():
        raise InputError(f"{p}: not a file")
    return p


def read_text(path: str | Path) -> str:
    """The text of `path`; InputError naming the file when it is binary (a parquet file, say)."""
    p = existing(path)
    data = p.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        what = "a parquet file" if data[:4] == b"PAR1" else "binary, not UTF-8 text"
        raise InputError(f"{p}: {what}; this format reads text"
                         + (" (a StepTrace of the hf-assisted recorder is read as hf-assisted)" if data[:4] == b"PAR1"
                            else "")) from None


def json_records(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) of a JSON file (one object, line 1) or a JSON-lines file."""
    p = existing(path)
    text = read_text(p)
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
            if line.startswith(("# HELP", "# TYPE", "vllm:", "vllm_")):
                raise InputError(f"{p}:{number}: Prometheus text, not JSON: read it as vllm-metrics") from None
            raise InputError(f"{p}:{number}: not valid JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(record, dict):
            raise InputError(f"{p}:{number}: expected a JSON object, got {type(record).__name__}")
        found = True
        yield number, record
    if not found:
        raise InputError(f"{p}: no JSON object in the file")


def json_lines(path: str | Path, digest: Any = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) of a JSON-lines file read one line at a time (a file of any size), each
    line's bytes fed to `digest` (a hashlib object) as read; the same one-line refusals as `json_records`."""
    p = existing(path)
    found = False
    with p.open("rb") as handle:
        for number, raw in enumerate(handle, 1):
            if digest is not None:
                digest.update(raw)
            if number == 1 and raw.startswith(b"PAR1"):
                raise InputError(f"{p}: a parquet file; this format reads JSON lines")
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise InputError(f"{p}:{number}: binary, not UTF-8 text; this format reads JSON lines") from None
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"{p}:{number}: not valid JSON ({exc.msg} at column {exc.colno}); this format "
                                 "reads one JSON object per line") from None
            if not isinstance(record, dict):
                raise InputError(f"{p}:{number}: expected a JSON object, got {type(record).__name__}")
            found = True
            yield number, record
    if not found:
        raise InputError(f"{p}: no JSON object in the file")


def looks_like(record: dict[str, Any]) -> tuple[str, str] | None:
    """(format, the fields that show it) of a JSON record another importer reads, or None."""
    marks = {"vllm-bench": ("model_id", "tokenizer_id", "endpoint_type", "spec_decode_num_drafts", "mean_e2el_ms"),
             "sglang-bench": ("accept_length", "server_info", "total_output_tokens_retokenized", "mean_e2e_latency_ms",
                              "acc_length", "prefill_latency", "median_decode_latency"),
             "spec-bench": ("question_id", "choices", "answer_id"),
             "specdecode-bench": ("prompt_token_ids", "generated_token_ids", "acc_ngram", "acc_eagle")}
    found = {fmt: [k for k in keys if k in record] for fmt, keys in marks.items()}
    fmt, keys = max(found.items(), key=lambda item: len(item[1]))
    need_two = fmt != "sglang-bench" or not {"prefill_latency", "acc_length"} & set(keys)
    return (fmt, ", ".join(f"'{k}'" for k in keys)) if len(keys) >= (2 if need_two else 1) else None


def refuse_other(record: dict[str, Any], where: str, fmt: str) -> None:
    """InputError when `record` is another format's (a vLLM result read as sglang-bench, say)."""
    other = looks_like(record)
    if other is not None and other[0] != fmt:
        raise InputError(f"{where}: a {other[0]} record (fields {other[1]}), not {fmt}: "
                         f"run python -m calibrate.ingest {other[0]} on it")


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


# ---- acceptance entries ----------------------------------------------------------------------------
def acceptance_entry(quantities: dict[str, Any], ingested: Ingested, options: IngestOptions,
                     counts: dict[str, float], temperature: float) -> dict[str, Any]:
    """A validated Profile acceptance entry from `calibrate.ingest.counts` (or alpha) quantities."""
    entry = {"drafter": options.drafter or ingested.models.get("drafter", ""),
             "temperature": float(temperature),
             "dataset": options.dataset or "",
             "alpha": quantities["alpha"],
             **({"alpha_by_position": quantities["alpha_by_position"]} if "alpha_by_position" in quantities else {}),
             "source": f"{ingested.format}: {', '.join(Path(s).name for s in ingested.sources)}",
             "fit": counts, "ingest": ingested.provenance()}
    AcceptanceModel.from_dict(entry, name=ingested.format)
    return entry


def run_temperature(options: IngestOptions, ingested: Ingested, recorded: float | None = None,
                    where: str = "") -> float | None:
    """The run's sampling temperature: the file's, else --temperature; None (and `missing` set)
    when neither says it, never an assumed 0. InputError when the two disagree."""
    given = options.temperature
    if given is not None and (not math.isfinite(given) or given < 0):
        raise InputError(f"--temperature must be a number >= 0, got {given!r}")
    if recorded is not None:
        if given is not None and abs(given - recorded) > 1e-9:
            raise InputError(f"{where or ingested.sources[0]}: recorded at temperature {recorded:g}, not "
                             f"--temperature {given:g}")
        return float(recorded)
    if given is None:
        ingested.not_provided.append("sampling temperature: not recorded in the file; pass --temperature "
                                     "(needed for a Profile entry or a StepTrace)")
        ingested.missing = ("the file does not record the sampling temperature: pass --temperature "
                            "(0 for greedy decoding)")
        return None
    ingested.not_provided.append(f"sampling temperature: {given:g} (--temperature)")
    return float(given)


def stated_dataset(options: IngestOptions, ingested: Ingested, dataset_known: bool = False) -> None:
    """Record in `not_provided` that the dataset is the user's (or empty)."""
    if not options.dataset and not dataset_known:
        ingested.not_provided.append("dataset name: left empty (pass --dataset)")


# ---- models and the Profile merge -----------------------------------------------------------------
def same_model(a: str, b: str) -> bool:
    """Names agree when equal after lower-casing and dropping a hub organisation or directory."""
    return a.strip().rstrip("/").split("/")[-1].lower() == b.strip().rstrip("/").split("/")[-1].lower()


def profile_drafter(profile: Profile, name: str) -> str:
    """The Profile drafter `name` refers to (its key or its model); InputError naming both otherwise."""
    for key, spec in profile.drafters.items():
        if same_model(key, name) or (spec.model and same_model(spec.model, name)):
            return key
    raise InputError(f"drafter '{name}' is not a drafter of profile '{profile.name}' "
                     f"(has: {', '.join(sorted(profile.drafters)) or 'none'})")


def merge_into_profile(base: Profile, ingested: Ingested, options: IngestOptions,
                       entry: dict[str, Any], commit: str = "") -> Profile:
    """A copy of `base` with the ingested acceptance entry, first, and its provenance (the Profile's
    measured subject, `Profile.measured`); refuses other models and an entry no deployment uses."""
    target = options.target or ingested.models.get("target")
    if target and not same_model(target, base.target):
        said = "--target" if options.target else "the source's target"
        raise InputError(f"{said} '{target}' differs from profile '{base.name}' target '{base.target}'")
    vocab = ingested.models.get("target_vocab")
    known_vocab = getattr(base.models[base.target], "vocab", None)
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
    if ingested.format in CHAIN_FORMATS:      # the engine drafted a chain: priced as one, not as a stated tree
        base, key_drafter = base.with_chain_twin(key_drafter)
    entry = {**entry, "drafter": key_drafter}
    if not entry.get("dataset"):
        known = sorted({*base.workload, *base.datasets()})
        raise InputError(f"the source does not name its dataset, and an entry of no dataset is one no deployment of "
                         f"profile '{base.name}' uses: pass --dataset (the profile's: {', '.join(known) or 'none'})")
    temperature = float(entry.get("temperature", 0.0))
    key = f"{key_drafter}/{entry.get('dataset') or 'data'}/T{temperature:g}/{ingested.format}"
    where = f"profile '{base.name}' with {ingested.format}"
    try:
        model = AcceptanceModel.from_dict(entry, name=key)
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None
    details = base.provenance.details
    record = {**ingested.provenance(), "acceptance_key": key, "latency_s": ingested.latency,
              "throughput": ingested.throughput, "commit": commit, "created": dt.datetime.now(dt.timezone.utc).isoformat()}
    provenance = replace(base.provenance, details=Record({**details, "ingested": [*details.get("ingested", ()), record]}))
    # first of its drafter's entries: the measured deployment is the one the Profile answers for first
    acceptance = {key: model, **{k: v for k, v in base.acceptance.items() if k != key}}
    return replace(base, acceptance=acceptance, provenance=provenance)


# ---- chain StepTraces -----------------------------------------------------------------------------
def chain_config(method: str, gamma: int) -> str:
    """The StepTrace `config` text of a chain step of draft length `gamma` (the method's own parser)."""
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
    """Fill `result` from a chain StepTrace: its summary, and its acceptance entry
    (fit_step_acceptance) unless `result.missing` says what the entry lacks (metadata is then None)."""
    result.steps, result.step_metadata = frame, metadata
    masks = [np.asarray(m, bool) for m in frame["accept_mask"]]
    hits = pd.Series([int(m.sum()) for m in masks], dtype=float)
    evaluated = sum(evaluated_positions(m) for m in masks if len(m))
    depth = max((len(m) for m in masks), default=0)
    result.summary.update({
        "mean_accepted_tokens": float(frame["accepted"].mean()),
        "per_position_acceptance": [float((hits > i).mean()) for i in range(depth)],
        **({"alpha": float(hits.sum() / evaluated)} if evaluated else {})})
    if metadata is None:
        return result
    drafter = options.drafter or result.models.get("drafter", "")
    entry = fit_step_acceptance(frame, drafter=drafter, dataset=metadata.dataset, temperature=metadata.temperature,
                                source=f"{result.format}: {', '.join(Path(s).name for s in result.sources)}")
    entry["ingest"] = result.provenance()
    AcceptanceModel.from_dict(entry, name=result.format)
    result.acceptance = entry
    return result
