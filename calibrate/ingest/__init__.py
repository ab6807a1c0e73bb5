"""Measurements from the engines people deploy, into specsim's contracts: `python -m calibrate.ingest`.

One module per format, each with `ingest(paths, IngestOptions) -> Ingested` and a docstring that
documents the format and what the source cannot provide (and how that is filled):
`vllm_metrics` (vLLM /metrics Prometheus text), `vllm_bench` (`vllm bench serve` result JSON),
`sglang_bench` (SGLang bench_serving / bench_one_batch JSON lines), `spec_bench` (Spec-Bench
answer JSONL -> StepTrace), `hf_assisted` (a recorder around transformers' assisted generate ->
StepTrace), `specdecode_bench` (SpecDecode-Bench's per-position acceptance spans -> statistics and a
`traces.span_replay.SpanReplay`). `result` holds what they share and the merge into a Profile.
"""
from __future__ import annotations

import importlib

from calibrate.ingest.result import IngestOptions, Ingested
from common.errors import InputError

FORMATS = {"vllm-metrics": "vllm_metrics", "vllm-bench": "vllm_bench", "sglang-bench": "sglang_bench",
           "spec-bench": "spec_bench", "hf-assisted": "hf_assisted", "specdecode-bench": "specdecode_bench"}


def ingest(format: str, paths: list[str], options: IngestOptions | None = None) -> Ingested:
    """Read `paths` in `format`; InputError (one line naming file, line and field) on bad input."""
    if format not in FORMATS:
        raise InputError(f"unknown format '{format}' (known: {', '.join(FORMATS)})")
    if not paths:
        raise InputError(f"{format}: give at least one file")
    module = importlib.import_module(f"calibrate.ingest.{FORMATS[format]}")
    return module.ingest([str(p) for p in paths], options or IngestOptions())


__all__ = ["FORMATS", "IngestOptions", "Ingested", "ingest"]
