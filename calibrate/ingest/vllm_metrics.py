"""`vllm-metrics`: the Prometheus text of vLLM's `/metrics` (one scrape, or two: before and after).

Read with prometheus_client's text parser. Used:
- counters `vllm:spec_decode_num_drafts_total`, `vllm:spec_decode_num_draft_tokens_total`,
  `vllm:spec_decode_num_accepted_tokens_total` and
  `vllm:spec_decode_num_accepted_tokens_per_pos_total{position="i"}` (0-based), each summed over
  every label set (engines, model names);
- latency histograms where present (`vllm:time_to_first_token_seconds`,
  `vllm:time_per_output_token_seconds` / `vllm:request_time_per_output_token_seconds`,
  `vllm:inter_token_latency_seconds`, `vllm:e2e_request_latency_seconds`, queue, prefill, decode
  and inference times): count, mean and p50/p90/p99 interpolated within the buckets.
Two files are two scrapes of one server: the result is their difference (the traffic between
them); a counter that went down (a restart, or another server) is an error naming file and metric.
Other metrics are ignored, but a `vllm:spec_decode_*` name this module does not know, or a name
that is a cut-off known name, is refused (it means a truncated file or a renamed metric).

What the counters cannot give, and how it is filled:
- no per-step latency split (draft vs verify): only request-level histograms, kept as
  observations in the result and the Profile's provenance, never as a latency model;
- no drafter name, dataset or temperature: `--drafter`, `--dataset`, `--temperature` (default 0);
- alpha assumes every draft proposed the full draft length (vLLM counts only accepted positions);
- no Markov or confidence-bin statistics: the entry holds alpha and beta_i only.
The target's name is the `model_name` label (checked against a Profile's target on a merge).
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from calibrate.ingest.result import (IngestOptions, Ingested, acceptance_entry, chain_acceptance, existing,
                                     stated_context)
from common.errors import InputError

COUNTERS = {
    "vllm:spec_decode_num_drafts": "drafts",
    "vllm:spec_decode_num_draft_tokens": "draft_tokens",
    "vllm:spec_decode_num_accepted_tokens": "accepted",
    "vllm:spec_decode_num_accepted_tokens_per_pos": "per_position",
}
IGNORED_SPEC = ("vllm:spec_decode_draft_acceptance_rate", "vllm:spec_decode_efficiency",
                "vllm:spec_decode_num_emitted_tokens")        # vLLM v0 names: recognised, not used
HISTOGRAMS = {
    "vllm:time_to_first_token_seconds": "ttft",
    "vllm:time_per_output_token_seconds": "tpot",
    "vllm:request_time_per_output_token_seconds": "tpot",
    "vllm:inter_token_latency_seconds": "itl",
    "vllm:e2e_request_latency_seconds": "e2e",
    "vllm:request_queue_time_seconds": "queue",
    "vllm:request_prefill_time_seconds": "prefill",
    "vllm:request_decode_time_seconds": "decode",
    "vllm:request_inference_time_seconds": "inference",
}
SUFFIXES = ("_total", "_created", "_bucket", "_count", "_sum")
QUANTILES = (0.5, 0.9, 0.99)


def _base(name: str) -> str:
    for suffix in SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _line_of(lines: list[str], name: str) -> int:
    return next((i for i, line in enumerate(lines, 1) if line.startswith(name)), 0)


def _check_name(base: str, lines: list[str], path: Path) -> None:
    known = (*COUNTERS, *HISTOGRAMS, *IGNORED_SPEC)
    if base in known:
        return
    cut = [k for k in known if k.startswith(base)]
    if cut or base.startswith("vllm:spec_decode"):
        what = f"truncated metric name (a cut-off '{cut[0]}')" if cut else "unknown spec-decode metric name"
        raise InputError(f"{path}:{_line_of(lines, base)}: {what} '{base}' "
                         f"(known: {', '.join(COUNTERS)})")


def _families(path: Path, text: str):
    """The parsed samples; a line the parser refuses is reported with its number."""
    try:
        return [s for family in text_string_to_metric_families(text) for s in family.samples]
    except (ValueError, TypeError, IndexError):
        pass
    for number, line in enumerate(text.splitlines(), 1):   # find the line the parser refused
        if line.strip() and not line.startswith("#"):
            try:
                list(text_string_to_metric_families(line + "\n"))
            except (ValueError, TypeError, IndexError) as exc:
                raise InputError(f"{path}:{number}: not Prometheus text ({str(exc).splitlines()[0]})") from None
    raise InputError(f"{path}: not Prometheus text")


def read_scrape(path: str | Path) -> dict:
    """One scrape: summed counters {name: value | {position: value}}, histograms, model names."""
    p = existing(path)
    text = p.read_text(encoding="utf-8")
    lines = text.splitlines()
    counters: dict = {"per_position": defaultdict(float)}
    histograms: dict = defaultdict(lambda: {"buckets": defaultdict(float), "count": 0.0, "sum": 0.0})
    models: set[str] = set()
    for sample in _families(p, text):
        if sample.name.endswith("_created"):
            continue
        base = _base(sample.name)
        _check_name(base, lines, p)
        if base in COUNTERS:
            role = COUNTERS[base]
            models.update([sample.labels["model_name"]] if "model_name" in sample.labels else [])
            if role == "per_position":
                pos = sample.labels.get("position")
                if pos is None or not pos.isdigit():
                    raise InputError(f"{p}:{_line_of(lines, sample.name)}: {sample.name} needs a label "
                                     f"position=\"<0-based int>\", got {pos!r}")
                counters["per_position"][int(pos)] += sample.value
            else:
                counters[role] = counters.get(role, 0.0) + sample.value
        elif base in HISTOGRAMS:
            h = histograms[HISTOGRAMS[base]]
            if sample.name.endswith("_bucket"):
                h["buckets"][float(sample.labels.get("le", "inf").replace("+Inf", "inf"))] += sample.value
            elif sample.name.endswith("_count"):
                h["count"] += sample.value
            elif sample.name.endswith("_sum"):
                h["sum"] += sample.value
    if not any(role in counters for role in ("drafts", "accepted")):
        raise InputError(f"{p}: no vllm:spec_decode_num_drafts_total / _num_accepted_tokens_total counters "
                         "(was the server started with --speculative-config?)")
    for name, role in COUNTERS.items():
        if role in ("drafts", "accepted") and role not in counters:
            raise InputError(f"{p}: counter {name}_total is missing (the other spec-decode counters are there)")
    return {"path": p, "counters": counters, "histograms": histograms, "models": models}


def difference(before: dict, after: dict) -> dict:
    """after - before; a counter that went down is an InputError naming the file and the metric."""
    def minus(name: str, a: float, b: float) -> float:
        if b < a:
            raise InputError(f"{after['path']}: counter {name} decreased from {a:g} to {b:g} since "
                             f"{before['path']} (a server restart or another server's scrape)")
        return b - a

    counters: dict = {"per_position": {}}
    for role, name in ((r, n) for n, r in COUNTERS.items() if r != "per_position"):
        if role in after["counters"] or role in before["counters"]:
            counters[role] = minus(f"{name}_total", before["counters"].get(role, 0.0),
                                   after["counters"].get(role, 0.0))
    for pos in sorted(set(before["counters"]["per_position"]) | set(after["counters"]["per_position"])):
        counters["per_position"][pos] = minus(
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{position="{pos}"}}',
            before["counters"]["per_position"].get(pos, 0.0), after["counters"]["per_position"].get(pos, 0.0))
    histograms = {}
    for key, h in after["histograms"].items():
        b = before["histograms"].get(key, {"buckets": {}, "count": 0.0, "sum": 0.0})
        name = next(n for n, k in HISTOGRAMS.items() if k == key)
        histograms[key] = {"buckets": {le: minus(f"{name}_bucket{{le=\"{le:g}\"}}", b["buckets"].get(le, 0.0), v)
                                       for le, v in h["buckets"].items()},
                           "count": minus(f"{name}_count", b["count"], h["count"]), "sum": h["sum"] - b["sum"]}
    return {"path": after["path"], "counters": counters, "histograms": histograms,
            "models": before["models"] | after["models"]}


def histogram_stats(h: dict) -> dict[str, float] | None:
    """count, mean and quantiles (linear within a bucket, the last finite bound past it) of a histogram."""
    count = h["count"] or max(h["buckets"].values(), default=0.0)
    if count <= 0:
        return None
    stats = {"count": count, "mean": h["sum"] / count}
    bounds = sorted(h["buckets"].items())
    for q in QUANTILES:
        rank, lower, below = q * count, 0.0, 0.0
        for upper, cumulative in bounds:
            if cumulative >= rank:
                if upper == float("inf"):
                    value = lower
                else:
                    inside = cumulative - below
                    value = lower + (upper - lower) * ((rank - below) / inside if inside > 0 else 1.0)
                stats[f"p{round(q * 100)}"] = value
                break
            lower, below = upper, cumulative
    return stats


def ingest(paths: list[str], options: IngestOptions) -> Ingested:
    if len(paths) not in (1, 2):
        raise InputError(f"vllm-metrics takes one scrape or two (before, after), got {len(paths)} files")
    scrapes = [read_scrape(p) for p in paths]
    scrape = scrapes[0] if len(scrapes) == 1 else difference(*scrapes)
    result = Ingested("vllm-metrics", [str(p) for p in paths])
    if len(scrape["models"]) == 1:
        result.models["target"] = next(iter(scrape["models"]))
    elif len(scrape["models"]) > 1:
        raise InputError(f"{scrape['path']}: counters of several models ({', '.join(sorted(scrape['models']))}); "
                         "scrape one model's server")
    c = scrape["counters"]
    per_position = [c["per_position"].get(i, 0.0) for i in range(max(c["per_position"], default=-1) + 1)]
    where = f"{scrape['path']}" + (" (difference of two scrapes)" if len(paths) == 2 else "")
    quantities = chain_acceptance(c.get("drafts", 0.0), c.get("accepted", 0.0), per_position, where)
    if "alpha" not in quantities:
        raise InputError(f"{where}: no vllm:spec_decode_num_accepted_tokens_per_pos_total counters; "
                         "per-position acceptance cannot be derived")
    result.summary = {**quantities, "drafts": c.get("drafts", 0.0), "draft_tokens": c.get("draft_tokens"),
                      "accepted_tokens": c.get("accepted", 0.0),
                      "draft_acceptance_rate": (c.get("accepted", 0.0) / c["draft_tokens"]) if c.get("draft_tokens") else None}
    for key, h in scrape["histograms"].items():
        stats = histogram_stats(h)
        if stats is not None:
            result.latency[key] = stats
    result.not_provided += [
        "per-step latency split (draft vs verify): vLLM counters carry none; request-level histograms kept "
        "as observations" + ("" if result.latency else " (none in this scrape)"),
        "drafter name: " + (f"'{options.drafter}' (--drafter)" if options.drafter else "not stated (pass --drafter)"),
        "drafts shorter than the draft length: not counted; alpha assumes every draft proposed "
        f"{len(per_position)} tokens",
        "Markov and confidence-bin statistics: not in counters; the entry holds alpha and beta_i only"]
    stated_context(options, result)
    counts = {"n_drafts": c.get("drafts", 0.0), "n_draft_tokens": c.get("draft_tokens"),
              "n_accepted": c.get("accepted", 0.0)}
    result.acceptance = acceptance_entry(quantities, result, options, counts)
    return result
