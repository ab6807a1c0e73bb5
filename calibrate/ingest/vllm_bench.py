"""`vllm-bench`: the result JSON of `vllm bench serve --save-result` (older: benchmarks/benchmark_serving.py).

One JSON object per file (a JSON-lines file of several runs is read line by line). Used:
- latency, in milliseconds in the file and seconds in the result: `mean_`, `median_`, `std_` and
  every `p<N>_` (from `--metric-percentiles`) of `ttft`, `tpot`, `itl` and `e2el`, whichever
  the run wrote (`--percentile-metrics` chooses them; `--skip-tokenizer-init` leaves out TTFT,
  TPOT and ITL);
- throughput: `request_throughput`, `output_throughput`, `total_token_throughput`, with the
  load it ran at (`max_concurrency`, `request_rate`);
- the model: `model_id` (`--target` overrides it);
- spec decoding, when the server ran it (newer vLLM; the bench reads the server's /metrics
  before and after), top-level or nested in an object `spec_decode` (names with or without the
  `spec_decode_` prefix; one field in both places with two values is refused):
  `spec_decode_num_drafts`, `spec_decode_draft_tokens`, `spec_decode_accepted_tokens` and
  `spec_decode_per_position_acceptance_rates` give a Profile acceptance entry as the
  `vllm-metrics` counters do (`calibrate.ingest.counts`, drafts of varying length included), and
  vLLM's means beside them, `spec_decode_acceptance_length` (tokens per step, bonus included) and
  `spec_decode_acceptance_rate` (accepted over draft tokens, in percent), must agree with them.
  A file with the means only gives the mean tokens per step, and alpha as the per-token acceptance
  that gives it at the draft length (`costmodel.leviathan.alpha_from_expected_tokens`, independent
  positions): the draft length is `--gamma`, else the whole number length - 1 over rate implies;
  a rate alone (no length) needs a value above 1 (a percentage). Without a draft length the means
  are reported and no entry is made (`--gamma` asked for); anything else is refused naming the
  fields found, never read as no speculation;
- the sampling temperature only when the run recorded one (`--metadata temperature=T` writes a
  `temperature` field): newer `vllm bench serve` no longer sends temperature 0 by default and does
  not record what the server used, so it is asked for (`--temperature`), never assumed.
What the file cannot give, and how it is filled:
- no per-step or per-forward latency: TTFT/TPOT/ITL are request-level observations of the whole
  server at its load, kept as observations (result and Profile provenance), not a latency model;
- no drafter or dataset: `--drafter`, `--dataset`;
- without the spec-decode fields there is no acceptance (latency observations only);
- from the means alone, no beta_i: positions are taken to accept at one rate.
A file another importer reads (SGLang's bench output, Spec-Bench answers) is refused naming it.
"""
from __future__ import annotations

import math
import re

from calibrate.ingest.counts import chain_acceptance, draft_length_note
from calibrate.ingest.result import (IngestOptions, Ingested, acceptance_entry, json_records, need, refuse_other,
                                     run_temperature, stated_dataset)
from common.errors import InputError
from costmodel.leviathan import alpha_from_expected_tokens

LATENCIES = {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2el": "e2e"}
THROUGHPUT = ("request_throughput", "output_throughput", "total_token_throughput", "max_concurrency", "request_rate")
STAT = re.compile(r"^(mean|median|std|p\d+(?:\.\d+)?)_(ttft|tpot|itl|e2el)_ms$")
SPEC_FIELDS = ("spec_decode_num_drafts", "spec_decode_draft_tokens", "spec_decode_accepted_tokens",
               "spec_decode_per_position_acceptance_rates", "spec_decode_acceptance_rate",
               "spec_decode_acceptance_length")
MEAN_TOLERANCE = 0.005     # relative: vLLM rounds its means to 4 decimals


def latency_stats(record: dict, where: str) -> dict[str, dict[str, float]]:
    """{observation: {statistic: seconds}} from `<stat>_<metric>_ms` keys (vLLM's and SGLang's naming)."""
    out: dict[str, dict[str, float]] = {}
    for key, value in record.items():
        match = STAT.match(key)
        if match and value is not None:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise InputError(f"{where}: field '{key}' must be a finite number, got {value!r}")
            out.setdefault(LATENCIES[match[2]], {})[match[1]] = float(value) / 1000.0
    return out


def throughput_of(record: dict, keys=THROUGHPUT) -> dict[str, float]:
    return {k: float(record[k]) for k in keys
            if isinstance(record.get(k), (int, float)) and not isinstance(record.get(k), bool)}


def recorded_temperature(record: dict, where: str) -> float | None:
    """A `temperature` the run recorded (`--metadata temperature=T` writes it as text), or None."""
    value = record.get("temperature")
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InputError(f"{where}: field 'temperature' must be a number, got {value!r}") from None
    if isinstance(value, bool) or not math.isfinite(number) or number < 0:
        raise InputError(f"{where}: field 'temperature' must be a number >= 0, got {value!r}")
    return number


def ingest(paths: list[str], options: IngestOptions) -> Ingested:
    records = [(f"{path}:{number}", record) for path in paths for number, record in json_records(path)]
    for where, record in records:
        refuse_other(record, where, "vllm-bench")
    if len(records) != 1:
        raise InputError(f"vllm-bench reads one benchmark result, got {len(records)} "
                         f"({', '.join(w for w, _ in records[:3])}); ingest them one at a time")
    where, record = records[0]
    result = Ingested("vllm-bench", [str(p) for p in paths])
    result.models["target"] = options.target or str(need(record, "model_id", where, str))
    if options.target and record.get("model_id") not in (None, options.target):
        result.not_provided.append(f"target name: '{options.target}' (--target; the file's model_id is "
                                   f"'{record['model_id']}')")
    result.latency = latency_stats(record, where)
    result.throughput = throughput_of(record)
    absent = [m.upper() for m, key in LATENCIES.items() if key not in result.latency]
    result.not_provided.append("per-step latency split (draft vs verify) and per-forward latency: only "
                               "request-level latencies at the benchmark's load, kept as observations"
                               + (f" (the run wrote no {', '.join(absent)})" if absent else ""))
    spec = spec_fields(record, where)
    if not spec:
        result.not_provided.append("acceptance: no spec_decode_* fields (speculative decoding off, or a vLLM "
                                   "too old to report it); latency observations only")
        result.missing = "no acceptance (the run has no spec_decode_* fields)"
        return result
    if "spec_decode_num_drafts" in spec:
        quantities, counts, positions = _from_counts(spec, where)
    else:
        quantities, counts, positions = _from_means(spec, where, options.gamma)
    result.summary = quantities
    if "alpha" not in quantities:
        result.not_provided.append("alpha: vLLM's means alone, and no draft length they imply; pass --gamma "
                                   "(num_speculative_tokens)")
        result.missing = "no alpha without the draft length: pass --gamma (num_speculative_tokens)"
        return result
    result.not_provided += [
        "drafter name: " + (f"'{options.drafter}' (--drafter)" if options.drafter else "not stated (pass --drafter)"),
        *draft_length_note(quantities, positions),
        *([f"per-position acceptance: only vLLM's means; alpha {quantities['alpha']:.4f} assumes independent "
           f"positions at draft length {quantities['gamma']} ({'--gamma' if options.gamma else 'length - 1 over rate'})"]
          if quantities.get("draft_lengths") == "from means" else []),
        "Markov and confidence-bin statistics: not in the result; the entry holds alpha and beta_i only"]
    unused = sorted(set(spec) - set(SPEC_FIELDS))
    if unused:
        result.not_provided.append(f"spec-decode fields this importer does not know, not used: {', '.join(unused)}")
    temperature = run_temperature(options, result, recorded_temperature(record, where), where)
    stated_dataset(options, result)
    if temperature is not None:
        result.acceptance = acceptance_entry(quantities, result, options, counts, temperature)
    return result


def spec_fields(record: dict, where: str) -> dict:
    """The run's spec_decode_* fields: top-level, or nested in an object `spec_decode` (its names with or
    without the prefix); InputError for a nested value that is not an object, or a field given in both
    places with two values."""
    found = {k: v for k, v in record.items() if k.startswith("spec_decode_")}
    nested = record.get("spec_decode")
    if nested is None:
        return found
    if not isinstance(nested, dict):
        raise InputError(f"{where}: field 'spec_decode' must be an object of spec-decode fields, got {nested!r}")
    for key, value in nested.items():
        name = key if key.startswith("spec_decode_") else f"spec_decode_{key}"
        if name in found and found[name] != value:
            raise InputError(f"{where}: '{name}' is {found[name]!r} but 'spec_decode.{key}' is {value!r}")
        found[name] = value
    return found


def _from_counts(spec: dict, where: str) -> tuple[dict, dict, int]:
    """Acceptance from the counts (`calibrate.ingest.counts`); the mean fields, where present, must agree."""
    drafts = need(spec, "spec_decode_num_drafts", where)
    accepted = need(spec, "spec_decode_accepted_tokens", where)
    rates = need(spec, "spec_decode_per_position_acceptance_rates", where, list)
    if any(isinstance(r, bool) or not isinstance(r, (int, float)) for r in rates):
        raise InputError(f"{where}: field 'spec_decode_per_position_acceptance_rates' must hold numbers")
    draft_tokens = spec.get("spec_decode_draft_tokens")
    quantities = chain_acceptance(drafts, accepted, [r * drafts for r in rates], where, draft_tokens=draft_tokens)
    implied = {"spec_decode_acceptance_length": quantities["mean_accepted_tokens"]}
    if draft_tokens:
        implied["spec_decode_acceptance_rate"] = 100.0 * accepted / draft_tokens
    for key, value in implied.items():
        given = spec.get(key)
        if _is_number(given) and abs(given - value) > MEAN_TOLERANCE * max(abs(value), 1e-9):
            raise InputError(f"{where}: field '{key}' is {given:g} but the counts give {value:.4g} "
                             "(spec_decode_num_drafts, _draft_tokens, _accepted_tokens): they describe different runs")
    return quantities, {"n_drafts": drafts, "n_draft_tokens": draft_tokens, "n_accepted": accepted}, len(rates)


def _from_means(spec: dict, where: str, gamma: int | None) -> tuple[dict, dict, int]:
    """Acceptance from vLLM's means alone (module docstring), or InputError naming the fields found."""
    length, rate = spec.get("spec_decode_acceptance_length"), spec.get("spec_decode_acceptance_rate")
    named = ", ".join(f"{k} = {v!r}" for k, v in sorted(spec.items()))
    for key, value in (("spec_decode_acceptance_length", length), ("spec_decode_acceptance_rate", rate)):
        if value is not None and not _is_number(value):
            raise InputError(f"{where}: field '{key}' must be a finite number, got {value!r}")
    if length is None and rate is None:
        raise InputError(f"{where}: spec-decode fields without counts or means ({named}): expected "
                         "spec_decode_num_drafts and _accepted_tokens, or spec_decode_acceptance_length")
    if rate is not None and not 0 <= rate <= 100:
        raise InputError(f"{where}: field 'spec_decode_acceptance_rate' is {rate:g}, not a percentage in [0, 100]")
    if length is not None and length < 1:
        raise InputError(f"{where}: field 'spec_decode_acceptance_length' is {length:g}, below 1 (tokens per step, "
                         "bonus included)")
    if gamma is None and length is not None and rate:
        implied = (length - 1) / (rate / 100)
        if abs(implied - round(implied)) <= MEAN_TOLERANCE * implied and round(implied) >= 1:
            gamma = int(round(implied))
    if length is None and rate <= 1:
        raise InputError(f"{where}: field 'spec_decode_acceptance_rate' is {rate:g}: vLLM writes a percentage, "
                         f"so {rate:g}% or {100 * rate:g}%? without spec_decode_acceptance_length to tell, refused")
    if gamma is None:                  # what the means say alone; alpha waits for the draft length
        said = {"mean_accepted_tokens": float(length)} if length is not None else {}
        if rate is not None:
            said["draft_acceptance_rate"] = rate / 100
        return said, {}, 0
    if length is None:
        length = 1 + rate / 100 * gamma
    elif rate is not None and abs((length - 1) - rate / 100 * gamma) > MEAN_TOLERANCE * max(length - 1, 1e-9):
        raise InputError(f"{where}: spec_decode_acceptance_length {length:g} and spec_decode_acceptance_rate {rate:g}% "
                         f"disagree at draft length {gamma} ({length - 1:.4g} accepted per draft against "
                         f"{rate / 100 * gamma:.4g})")
    if length > gamma + 1 + 1e-9:
        raise InputError(f"{where}: spec_decode_acceptance_length {length:g} exceeds the draft length {gamma} + 1")
    alpha = float(alpha_from_expected_tokens(min(length, gamma + 1.0), gamma))
    quantities = {"per_position_acceptance": [alpha ** i for i in range(1, gamma + 1)],
                  "mean_accepted_tokens": float(length), "alpha": alpha, "draft_lengths": "from means",
                  "gamma": gamma}
    return quantities, {"acceptance_length": length, "acceptance_rate_pct": rate, "gamma": gamma}, gamma


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
