"""`vllm-metrics`: vLLM's `/metrics` (one scrape, or two: before and after), Prometheus text or OpenMetrics.

Read with prometheus_client's parsers (OpenMetrics when the scrape ends with `# EOF`, as
`Accept: application/openmetrics-text` returns it; names written `vllm_...` there are read as
`vllm:...`). Used:
- counters `vllm:spec_decode_num_drafts_total`, `vllm:spec_decode_num_draft_tokens_total`,
  `vllm:spec_decode_num_accepted_tokens_total` and
  `vllm:spec_decode_num_accepted_tokens_per_pos_total{position="i"}` (0-based), each summed over
  every label set (engines, model names); acceptance from them as `calibrate.ingest.counts`
  derives it (drafts of varying length included: alpha from per-position counts, never from
  drafts x positions);
- latency histograms where present (`vllm:time_to_first_token_seconds`,
  `vllm:time_per_output_token_seconds` / `vllm:request_time_per_output_token_seconds`,
  `vllm:inter_token_latency_seconds`, `vllm:e2e_request_latency_seconds`, queue, prefill, decode
  and inference times): count, mean and p50/p90/p99 interpolated within the buckets;
- the `_created` sample of each series (its process start), to see restarts.
A scrape holds each series (a metric and its labels) once: one written twice in a file (a block
pasted twice, two scrapes concatenated) is refused naming it and its second line, never summed.
Two files are two scrapes of one server: the result is the traffic between them, series by series.
A series whose `_created` time changed was restarted between the scrapes: its count since the
restart is the second scrape's value (what ran before the restart is lost, and the result says
so). A counter that fell without such a sample is refused (a restart, or another server's scrape;
the second scrape alone gives the traffic since its start). Scrapes given in the wrong order are refused.
A `vllm:spec_decode_*` metric this module does not know (vLLM adds some) is kept, named and not
used; a NaN or infinite value of a spec-decode or latency metric is refused.

What the counters cannot give, and how it is filled:
- no per-step latency split (draft vs verify): only request-level histograms, kept as
  observations in the result and the Profile's provenance, never as a latency model;
- no drafter name, dataset or temperature: `--drafter`, `--dataset`, `--temperature` (asked for);
- with drafts of varying length, beta_i beyond the first position (`calibrate.ingest.counts`);
- no Markov or confidence-bin statistics: the entry holds alpha and beta_i only.
The target's name is the `model_name` label (`--target` overrides it; checked against a Profile's
target on a merge).
"""
from __future__ import annotations

import datetime as dt
import math
from collections import defaultdict
from pathlib import Path

from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families as prometheus_families

from calibrate.ingest.counts import chain_acceptance, draft_length_note
from calibrate.ingest.result import (IngestOptions, Ingested, acceptance_entry, existing, read_text, run_temperature,
                                     stated_dataset)
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


def _vllm_name(name: str) -> str:
    """OpenMetrics scrapes may write vLLM's `vllm:` prefix as `vllm_`."""
    return "vllm:" + name[5:] if name.startswith("vllm_") else name


def _line_of(lines: list[str], name: str, labels: tuple = (), occurrence: int = 1) -> int:
    """The line (1-based; 0 when not found) of the `occurrence`-th sample of `name` with these labels."""
    forms = (name, "vllm_" + name[5:]) if name.startswith("vllm:") else (name,)
    pairs = [f'{k}="{v}"' for k, v in labels]
    found = 0
    for number, line in enumerate(lines, 1):
        if line.startswith(forms) and line[len(name):len(name) + 1] in ("{", " ") and all(p in line for p in pairs):
            found += 1
            if found == occurrence:
                return number
    return 0


def _shown(name: str, labels: tuple) -> str:
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in labels) + "}"


def _samples(path: Path, text: str) -> list:
    """The parsed samples; a line the parser refuses is reported with its number."""
    openmetrics = text.rstrip().endswith("# EOF")
    parse = openmetrics_families if openmetrics else prometheus_families
    kind = "OpenMetrics" if openmetrics else "Prometheus text"
    if text.lstrip().startswith(("{", "[")):
        raise InputError(f"{path}: JSON, not a /metrics scrape (a vllm-bench, sglang-bench or spec-bench file?)")
    if text and not text.endswith("\n"):
        raise InputError(f"{path}: ends in the middle of a line (a truncated scrape?)")
    # a colon in a metric name is written as "_" by newer OpenMetrics exposition, under a TYPE line that
    # keeps the colon: give the samples their family's name back before parsing
    text = "".join("vllm:" + line[5:] if line.startswith("vllm_") else line for line in text.splitlines(True))
    try:
        return [s for family in parse(text) for s in family.samples]
    except (ValueError, TypeError, IndexError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if not openmetrics:
        for number, line in enumerate(text.splitlines(), 1):   # find the line the parser refused
            if line.strip() and not line.startswith("#"):
                try:
                    list(parse(line + "\n"))
                except (ValueError, TypeError, IndexError) as exc:
                    raise InputError(f"{path}:{number}: not {kind} ({str(exc).splitlines()[0]})") from None
    raise InputError(f"{path}: not {kind} ({first})")


def read_scrape(path: str | Path) -> dict:
    """One scrape, series by series: values {(name, labels): value}, `_created` times
    {(base, labels without le): time}, model names, unknown spec-decode metrics."""
    p = existing(path)
    text = read_text(p)
    lines = text.splitlines()
    values: dict = defaultdict(float)
    created: dict = {}
    unknown: dict = defaultdict(float)
    models: set[str] = set()
    seen: set[tuple] = set()
    legacy = False
    for sample in _samples(p, text):
        name = _vllm_name(sample.name)
        base = _base(name)
        if base not in COUNTERS and base not in HISTOGRAMS and not base.startswith("vllm:spec_decode"):
            continue
        labels = tuple(sorted(sample.labels.items()))
        if (name, labels) in seen:            # summed, it would count a block written twice twice over
            line = _line_of(lines, sample.name, labels, occurrence=2)
            raise InputError(f"{p}{f':{line}' if line else ''}: series {_shown(name, labels)} appears twice in one "
                             "scrape (a block written twice, or two scrapes in one file?); give each scrape a file "
                             "of its own")
        seen.add((name, labels))
        if not math.isfinite(sample.value):
            raise InputError(f"{p}:{_line_of(lines, sample.name)}: {name} is {sample.value!r}, not a finite value")
        if name.endswith("_created"):
            created[(base, tuple(kv for kv in labels if kv[0] != "le"))] = sample.value
        elif base in COUNTERS or base in HISTOGRAMS:
            if base == "vllm:spec_decode_num_accepted_tokens_per_pos":
                pos = sample.labels.get("position")
                if pos is None or not pos.isdigit():
                    raise InputError(f"{p}:{_line_of(lines, sample.name)}: {name} needs a label "
                                     f"position=\"<0-based int>\", got {pos!r}")
            if base in COUNTERS and "model_name" in sample.labels:
                models.add(sample.labels["model_name"])
            values[(name, labels)] += sample.value
        elif base in IGNORED_SPEC:
            legacy = True
        else:
            unknown[base] += sample.value
    roles = {COUNTERS[_base(n)] for n, _ in values if _base(n) in COUNTERS}
    if legacy and "drafts" not in roles:
        raise InputError(f"{p}: vLLM v0 spec-decode metrics ({', '.join(IGNORED_SPEC)}): no drafts or per-position "
                         "counters, so per-position acceptance cannot be derived; scrape a V1 engine")
    if not roles & {"drafts", "accepted"}:
        raise InputError(f"{p}: no vllm:spec_decode_num_drafts_total / _num_accepted_tokens_total counters "
                         "(was the server started with --speculative-config?)")
    for name, role in COUNTERS.items():
        if role in ("drafts", "accepted") and role not in roles:
            raise InputError(f"{p}: counter {name}_total is missing (the other spec-decode counters are there)")
    return {"path": p, "values": dict(values), "created": created, "models": models, "unknown": dict(unknown)}


def _series_key(name: str, labels: tuple) -> tuple:
    return _base(name), tuple(kv for kv in labels if kv[0] != "le")


def difference(before: dict, after: dict) -> dict:
    """after - before series by series; a series restarted in between (its `_created` time changed)
    counts from the restart. InputError for a counter that fell without a restart to explain it."""
    values, restarts = {}, set()
    for (name, labels), value in after["values"].items():
        key = _series_key(name, labels)
        start, now = before["created"].get(key), after["created"].get(key)
        previous = before["values"].get((name, labels), 0.0)
        if start is not None and now is not None and now < start:
            raise InputError(f"{after['path']}: its {key[0]} series started before {before['path']}'s "
                             "(give the scrapes in order: before, after)")
        if start is not None and now is not None and now > start:
            restarts.add(now)
            values[(name, labels)] = value          # counted from zero since the restart
        elif value < previous:
            raise InputError(f"{after['path']}: counter {_shown(name, labels)} fell from {previous:g} to {value:g} since "
                             f"{before['path']} and no _created sample shows a restart (another server's scrape?); "
                             "the second scrape alone gives the traffic since that server started")
        else:
            values[(name, labels)] = value - previous
    return {"path": after["path"], "values": values, "models": before["models"] | after["models"],
            "unknown": after["unknown"], "restarts": sorted(restarts)}


def totals(values: dict) -> tuple[dict, dict]:
    """Counters {role: sum | {position: sum}} and histograms {observation: buckets, count, sum}."""
    counters: dict = {"per_position": defaultdict(float)}
    histograms: dict = defaultdict(lambda: {"buckets": defaultdict(float), "count": 0.0, "sum": 0.0})
    for (name, labels), value in values.items():
        base, label = _base(name), dict(labels)
        if base in COUNTERS:
            role = COUNTERS[base]
            if role == "per_position":
                counters["per_position"][int(label["position"])] += value
            else:
                counters[role] = counters.get(role, 0.0) + value
        elif base in HISTOGRAMS:
            h = histograms[HISTOGRAMS[base]]
            if name.endswith("_bucket"):
                h["buckets"][float(label.get("le", "inf").replace("+Inf", "inf"))] += value
            elif name.endswith("_count"):
                h["count"] += value
            elif name.endswith("_sum"):
                h["sum"] += value
    return counters, histograms


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


def _target(result: Ingested, models: set[str], options: IngestOptions, where: str) -> None:
    if options.target:
        result.models["target"] = options.target
        if models and options.target not in models:
            result.not_provided.append(f"target name: '{options.target}' (--target; the scrape's model_name is "
                                       f"{', '.join(repr(m) for m in sorted(models))})")
    elif len(models) == 1:
        result.models["target"] = next(iter(models))
    elif len(models) > 1:
        raise InputError(f"{where}: counters of several models ({', '.join(sorted(models))}); "
                         "scrape one model's server")


def ingest(paths: list[str], options: IngestOptions) -> Ingested:
    if len(paths) not in (1, 2):
        raise InputError(f"vllm-metrics takes one scrape or two (before, after), got {len(paths)} files")
    scrapes = [read_scrape(p) for p in paths]
    scrape = scrapes[0] if len(scrapes) == 1 else difference(*scrapes)
    result = Ingested("vllm-metrics", [str(p) for p in paths])
    where = f"{scrape['path']}" + (" (difference of two scrapes)" if len(paths) == 2 else "")
    _target(result, scrape["models"], options, where)
    c, histograms = totals(scrape["values"])
    per_position = [c["per_position"].get(i, 0.0) for i in range(max(c["per_position"], default=-1) + 1)]
    quantities = chain_acceptance(c.get("drafts", 0.0), c.get("accepted", 0.0), per_position, where,
                                  draft_tokens=c.get("draft_tokens"))
    if "alpha" not in quantities:
        raise InputError(f"{where}: no vllm:spec_decode_num_accepted_tokens_per_pos_total counters; "
                         "per-position acceptance cannot be derived")
    result.summary = {**quantities, "drafts": c.get("drafts", 0.0), "draft_tokens": c.get("draft_tokens"),
                      "accepted_tokens": c.get("accepted", 0.0),
                      "draft_acceptance_rate": (c.get("accepted", 0.0) / c["draft_tokens"]) if c.get("draft_tokens") else None}
    for key, h in histograms.items():
        stats = histogram_stats(h)
        if stats is not None:
            result.latency[key] = stats
    if scrape.get("restarts"):
        when = ", ".join(dt.datetime.fromtimestamp(t, dt.timezone.utc).isoformat(timespec="seconds")
                         for t in scrape["restarts"])
        result.summary["restarted_at"] = when
        result.not_provided.append(f"traffic before a server restart ({when}, from the _created samples): lost; the "
                                   "counts are those since the restart")
    if scrape["unknown"]:
        result.summary["unknown_spec_decode_metrics"] = scrape["unknown"]
        result.not_provided.append("spec-decode metrics this importer does not know, kept as read (last scrape) and "
                                   f"not used: {', '.join(sorted(scrape['unknown']))}")
    result.not_provided += [
        "per-step latency split (draft vs verify): vLLM counters carry none; request-level histograms kept "
        "as observations" + ("" if result.latency else " (none in this scrape)"),
        "drafter name: " + (f"'{options.drafter}' (--drafter)" if options.drafter else "not stated (pass --drafter)"),
        *draft_length_note(quantities, len(per_position)),
        "Markov and confidence-bin statistics: not in counters; the entry holds alpha and beta_i only"]
    temperature = run_temperature(options, result)
    stated_dataset(options, result)
    counts = {"n_drafts": c.get("drafts", 0.0), "n_draft_tokens": c.get("draft_tokens"),
              "n_accepted": c.get("accepted", 0.0)}
    if temperature is not None:
        result.acceptance = acceptance_entry(quantities, result, options, counts, temperature)
    return result

