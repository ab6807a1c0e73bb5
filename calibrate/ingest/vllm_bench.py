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
  before and after): `spec_decode_num_drafts`, `spec_decode_draft_tokens`,
  `spec_decode_accepted_tokens` and `spec_decode_per_position_acceptance_rates` give a Profile
  acceptance entry as the `vllm-metrics` counters do (`calibrate.ingest.counts`, drafts of
  varying length included);
- the sampling temperature only when the run recorded one (`--metadata temperature=T` writes a
  `temperature` field): newer `vllm bench serve` no longer sends temperature 0 by default and does
  not record what the server used, so it is asked for (`--temperature`), never assumed.
What the file cannot give, and how it is filled:
- no per-step or per-forward latency: TTFT/TPOT/ITL are request-level observations of the whole
  server at its load, kept as observations (result and Profile provenance), not a latency model;
- no drafter or dataset: `--drafter`, `--dataset`;
- without the spec-decode fields there is no acceptance (latency observations only).
A file another importer reads (SGLang's bench output, Spec-Bench answers) is refused naming it.
"""
from __future__ import annotations

import math
import re

from calibrate.ingest.counts import chain_acceptance, draft_length_note
from calibrate.ingest.result import (IngestOptions, Ingested, acceptance_entry, json_records, need, refuse_other,
                                     run_temperature, stated_dataset)
from common.errors import InputError

LATENCIES = {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2el": "e2e"}
THROUGHPUT = ("request_throughput", "output_throughput", "total_token_throughput", "max_concurrency", "request_rate")
STAT = re.compile(r"^(mean|median|std|p\d+(?:\.\d+)?)_(ttft|tpot|itl|e2el)_ms$")


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
    if "spec_decode_num_drafts" not in record:
        result.not_provided.append("acceptance: no spec_decode_* fields (speculative decoding off, or a vLLM "
                                   "too old to report it); latency observations only")
        result.missing = "no acceptance (the run has no spec_decode_* fields)"
        return result
    drafts = need(record, "spec_decode_num_drafts", where)
    accepted = need(record, "spec_decode_accepted_tokens", where)
    rates = need(record, "spec_decode_per_position_acceptance_rates", where, list)
    if any(isinstance(r, bool) or not isinstance(r, (int, float)) for r in rates):
        raise InputError(f"{where}: field 'spec_decode_per_position_acceptance_rates' must hold numbers")
    draft_tokens = record.get("spec_decode_draft_tokens")
    quantities = chain_acceptance(drafts, accepted, [r * drafts for r in rates], where, draft_tokens=draft_tokens)
    result.summary = quantities
    counts = {"n_drafts": drafts, "n_draft_tokens": draft_tokens, "n_accepted": accepted}
    result.not_provided += [
        "drafter name: " + (f"'{options.drafter}' (--drafter)" if options.drafter else "not stated (pass --drafter)"),
        *draft_length_note(quantities, len(rates)),
        "Markov and confidence-bin statistics: not in the result; the entry holds alpha and beta_i only"]
    temperature = run_temperature(options, result, recorded_temperature(record, where), where)
    stated_dataset(options, result)
    if temperature is not None:
        result.acceptance = acceptance_entry(quantities, result, options, counts, temperature)
    return result
