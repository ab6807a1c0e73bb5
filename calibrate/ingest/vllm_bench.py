"""`vllm-bench`: the result JSON of `vllm bench serve --save-result` (older: benchmarks/benchmark_serving.py).

One JSON object per file (a JSON-lines file of several runs is read line by line). Used:
- latency, in milliseconds in the file and seconds in the result: `mean_`, `median_`, `std_` and
  every `p<N>_` (from `--metric-percentiles`) of `ttft`, `tpot`, `itl` and `e2el`; at least
  TTFT and TPOT must be there;
- throughput: `request_throughput`, `output_throughput`, `total_token_throughput`, with the
  load it ran at (`max_concurrency`, `request_rate`);
- the model: `model_id`;
- spec decoding, when the server ran it (newer vLLM): `spec_decode_num_drafts`,
  `spec_decode_draft_tokens`, `spec_decode_accepted_tokens` and
  `spec_decode_per_position_acceptance_rates` give a Profile acceptance entry as the
  `vllm-metrics` counters do.
What the file cannot give, and how it is filled:
- no per-step or per-forward latency: TTFT/TPOT/ITL are request-level observations of the whole
  server at its load, kept as observations (result and Profile provenance), not a latency model;
- no drafter, dataset or temperature: `--drafter`, `--dataset`, `--temperature` (default 0);
- without the spec-decode fields there is no acceptance (latency observations only).
"""
from __future__ import annotations

import re

from calibrate.ingest.result import (IngestOptions, Ingested, acceptance_entry, chain_acceptance, json_records,
                                     need, stated_context)
from common.errors import InputError

LATENCIES = {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2el": "e2e"}
REQUIRED = ("ttft", "tpot")
THROUGHPUT = ("request_throughput", "output_throughput", "total_token_throughput", "max_concurrency", "request_rate")
STAT = re.compile(r"^(mean|median|std|p\d+(?:\.\d+)?)_(ttft|tpot|itl|e2el)_ms$")


def latency_stats(record: dict, where: str, required=REQUIRED) -> dict[str, dict[str, float]]:
    """{observation: {statistic: seconds}} from `<stat>_<metric>_ms` keys (vLLM's and SGLang's naming)."""
    out: dict[str, dict[str, float]] = {}
    for key, value in record.items():
        match = STAT.match(key)
        if match and value is not None:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise InputError(f"{where}: field '{key}' must be a number, got {value!r}")
            out.setdefault(LATENCIES[match[2]], {})[match[1]] = float(value) / 1000.0
    for metric in required:
        if LATENCIES[metric] not in out:
            raise InputError(f"{where}: missing field 'mean_{metric}_ms' (no {metric.upper()} statistics)")
    return out


def throughput_of(record: dict, keys=THROUGHPUT) -> dict[str, float]:
    return {k: float(record[k]) for k in keys
            if isinstance(record.get(k), (int, float)) and not isinstance(record.get(k), bool)}


def ingest(paths: list[str], options: IngestOptions) -> Ingested:
    records = [(f"{path}:{number}", record) for path in paths for number, record in json_records(path)]
    if len(records) != 1:
        raise InputError(f"vllm-bench reads one benchmark result, got {len(records)} "
                         f"({', '.join(w for w, _ in records[:3])}); ingest them one at a time")
    where, record = records[0]
    result = Ingested("vllm-bench", [str(p) for p in paths])
    result.models["target"] = str(need(record, "model_id", where, str))
    result.latency = latency_stats(record, where)
    result.throughput = throughput_of(record)
    result.not_provided.append("per-step latency split (draft vs verify) and per-forward latency: only "
                               "request-level TTFT/TPOT/ITL at the benchmark's load, kept as observations")
    if "spec_decode_num_drafts" in record:
        drafts = need(record, "spec_decode_num_drafts", where)
        accepted = need(record, "spec_decode_accepted_tokens", where)
        rates = need(record, "spec_decode_per_position_acceptance_rates", where, list)
        if any(isinstance(r, bool) or not isinstance(r, (int, float)) for r in rates):
            raise InputError(f"{where}: field 'spec_decode_per_position_acceptance_rates' must hold numbers")
        quantities = chain_acceptance(drafts, accepted, [r * drafts for r in rates], where)
        result.summary = quantities
        counts = {"n_drafts": drafts, "n_draft_tokens": record.get("spec_decode_draft_tokens"), "n_accepted": accepted}
        result.not_provided += [
            "drafter name: " + (f"'{options.drafter}' (--drafter)" if options.drafter else "not stated (pass --drafter)"),
            "Markov and confidence-bin statistics: not in the result; the entry holds alpha and beta_i only"]
        stated_context(options, result)
        result.acceptance = acceptance_entry(quantities, result, options, counts)
    else:
        result.not_provided.append("acceptance: no spec_decode_* fields (speculative decoding off, or a vLLM "
                                   "too old to report it); latency observations only")
    return result
