"""`specdecode-bench`: per-position acceptance spans of SpecDecode-Bench (JSON lines, one per request).

The study "Speculative Decoding: Performance or Illusion?" (arXiv 2601.11580) published, for vLLM
0.10.1 serving Llama-3.1-8B-Instruct on one H100, `data/llama3.1-8B/combined_<dataset>.jsonl` of the
repository SpecDecode-Bench/simulator (`PUBLISHED`: their sha256 and paths), one object a line:
- `id`: the request's id (text);
- `prompt_token_ids`: the prompt's token ids, chat template included;
- `generated_token_ids`: the target's greedy output, ending with its stop token (<|eot_id|>)
  unless it ran to the length limit;
- `acc_ngram.acc_len`, `acc_eagle.acc_len`: per generated position, its span: the tokens a
  speculative step starting there produces (the target's own token included) with vLLM's n-gram
  proposer, and with the EAGLE drafter (the study's `eagle3` proposer). A file may hold either.
Why the spans are worth more than a mean: a step proposing k tokens produces min(span, k + 1), so
they replay every draft length exactly (`traces.span_replay`); this reader gives, per dataset
(`combined_<dataset>.jsonl` -> <dataset>, or --dataset for one file), for each drafter and each k
asked (default 1..`recorded_k`) the mean tokens per decode step and beta_i, P(draft position i
accepted | 1..i-1 accepted), over the steps the walk takes (the prefill's step left out; a position
past the output's end is not counted); the prompt and output length distributions; the replay
itself (`--out X.parquet`, a `traces.span_replay.SpanReplay`); and, from the token ids, vLLM's
n-gram proposer replayed (`traces.lookup_replay.lookup_spans`) against the recorded n-gram spans
for each --ngram-window asked (default `DEFAULT_WINDOWS`, the window that reproduces the files).
What the four published files show (measured; numbers in data/specdecode_bench/):
- the n-gram spans pile up at 21: the recorded proposer drafted k = 20. EAGLE's reach 20 with no
  pile-up, so its k is at least 19 and otherwise unknown. `recorded_k` is each drafter's largest
  span - 1; a k past it warns that acceptance past the data is extrapolated (each step stops where
  the spans stop; beta past it is null);
- the n-gram spans are vLLM 0.10.1's proposer with prompt_lookup_min 3, prompt_lookup_max 7 and
  k 20 over the stored tokens, at all but one position inside the outputs; the others are past the
  output's end: spans are not clipped there (at the stop token the proposer copies the chat
  template's next header from the prompt and the target's verification accepts it, tokens vLLM then
  discards), so the walk clips the last step at the output's end;
- the EAGLE spans come from EAGLE's own run, whose tokens the files do not hold: their count differs
  from `generated_token_ids` in about half the requests (the study takes a drafter's output length
  from its span count, and so does the replay); only the n-gram spans must match it.
What the files cannot give, and how it is filled: timings (none); the sampling temperature (not
recorded; the n-gram spans replay exactly under greedy verification); model names (the source's:
the published files are Llama-3.1-8B-Instruct's); a Profile acceptance entry or StepTrace (none:
the replay and the statistics are the product).
Bad input, one line naming file, line and field (exit 2): a span below 1 or not an integer, token
ids that are not integers >= 0, n-gram spans and generated tokens of different lengths, a line of
another format (a Spec-Bench answer, a JSON object without these fields), an empty file.
"""
from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from calibrate.ingest.result import IngestOptions, Ingested, json_lines, need, refuse_other
from common.errors import InputError
from traces.lookup_replay import lookup_spans
from traces.span_replay import MAX_SPAN, SPAN_DTYPE, ReplayRequest, SpanReplay, step_starts

FORMAT = "specdecode-bench"
DRAFTERS = ("eagle", "ngram")                     # field acc_<drafter>.acc_len
FIELDS = ("id", "prompt_token_ids", "generated_token_ids", *(f"acc_{d}" for d in DRAFTERS))
DEFAULT_WINDOWS = ((3, 7),)                       # (prompt_lookup_min, prompt_lookup_max) replayed by default
AGREEMENT_K = (1, 3, 5)
QUANTILES = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 1.0)
CHUNK_POSITIONS = 1 << 20                         # positions walked at once (bounds the walk's memory)
REPOSITORY = "SpecDecode-Bench/simulator"
DATA_COMMIT = "59fc3d7876f12ed4a15f68aba0cdb799ef0810d5"   # "add acc data"; the files are unchanged at 2fdccbd
PUBLISHED = {
    "6d6bfb9993f4a540ff73cb330bdd4348dc3e6a6c77a111d3e35b96caf83c26f1": "data/llama3.1-8B/combined_gsm8k.jsonl",
    "90637b8cb4c410b3de6cdf2898ef1104d41b0fc5bff5e8692a6bfc836101899b": "data/llama3.1-8B/combined_cnn.jsonl",
    "748df2df1e89b986009aad1a42fee604b1fe57558b690aef0da7d9c7b9708b75": "data/llama3.1-8B/combined_sharegpt.jsonl",
    "cfd6b6b156076a704f7aff0f060920bb7c5e4c3b80ef32efbe858b62d85cd910": "data/llama3.1-8B/combined_instructcoder.jsonl"}


# ---- reading --------------------------------------------------------------------------------------
def dataset_name(path: str, options: IngestOptions) -> str:
    name = Path(path).name.split(".")[0]
    return options.dataset or (name[len("combined_"):] if name.startswith("combined_") else name)


def integers(values: Any, label: str, where: str, minimum: int) -> list[int]:
    """`values`, a list of integers >= minimum; InputError naming the field and the first bad entry."""
    if not isinstance(values, list):
        raise InputError(f"{where}: field '{label}' must be a list, got {type(values).__name__}")
    if not values:
        raise InputError(f"{where}: field '{label}' is empty")
    if not all(type(v) is int for v in values) or min(values) < minimum:
        i, v = next((i, v) for i, v in enumerate(values) if type(v) is not int or v < minimum)
        raise InputError(f"{where}: field '{label}[{i}]' must be an integer >= {minimum}, got {v!r}")
    return values


def record_spans(record: dict, drafter: str, where: str) -> np.ndarray:
    key = f"acc_{drafter}"
    holder = need(record, key, where, dict)
    spans = integers(need(holder, "acc_len", f"{where}: field '{key}'", list), f"{key}.acc_len", where, 1)
    if max(spans) > MAX_SPAN:
        raise InputError(f"{where}: field '{key}.acc_len' holds a span of {max(spans)}, past {MAX_SPAN}")
    return np.asarray(spans, dtype=SPAN_DTYPE)


def read_file(path: str, dataset: str) -> tuple[list[ReplayRequest], tuple[str, ...], str]:
    """The requests of one file (streamed: only lengths and spans are kept), its drafters and sha256."""
    digest, requests, drafters = hashlib.sha256(), [], None
    for number, record in json_lines(path, digest):
        where = f"{path}:{number}"
        refuse_other(record, where, FORMAT)
        if not any(key in record for key in FIELDS):
            raise InputError(f"{where}: not a {FORMAT} record (none of its fields {', '.join(FIELDS)})")
        request_id = need(record, "id", where, (str, int))
        prompt = integers(need(record, "prompt_token_ids", where, list), "prompt_token_ids", where, 0)
        output = integers(need(record, "generated_token_ids", where, list), "generated_token_ids", where, 0)
        present = tuple(d for d in DRAFTERS if f"acc_{d}" in record)
        if not present:
            raise InputError(f"{where}: missing field 'acc_ngram' or 'acc_eagle' (no spans)")
        if drafters is not None and present != drafters:
            raise InputError(f"{where}: spans of {', '.join(present)}, but the file's first line has "
                             f"{', '.join(drafters)}")
        drafters = present
        spans = {d: record_spans(record, d, where) for d in present}
        if "ngram" in spans and spans["ngram"].size != len(output):
            raise InputError(f"{where}: field 'acc_ngram.acc_len' has {spans['ngram'].size} spans but "
                             f"'generated_token_ids' {len(output)} tokens (one span per generated token)")
        requests.append(ReplayRequest(dataset, str(request_id), len(prompt), len(output), spans))
    return requests, drafters, digest.hexdigest()


# ---- statistics -----------------------------------------------------------------------------------
def chunks(arrays: list[np.ndarray]) -> list[tuple[np.ndarray, np.ndarray]]:
    """(concatenated spans, lengths) of consecutive requests, about CHUNK_POSITIONS positions each."""
    out, group, size = [], [], 0
    for a in arrays:
        group.append(a)
        size += a.size
        if size >= CHUNK_POSITIONS:
            out.append((np.concatenate(group), np.array([g.size for g in group])))
            group, size = [], 0
    if group:
        out.append((np.concatenate(group), np.array([g.size for g in group])))
    return out


def decode_steps(chunked: list[tuple[np.ndarray, np.ndarray]], k: int, recorded_k: int | None = None) -> dict[str, Any]:
    """Mean tokens per decode step and beta_1..beta_k over the decode steps of the walk at draft
    length k (module docstring): a step of raw span r = min(span, k + 1) with `room` tokens left
    evaluates positions 1..min(r, room) and accepts 1..min(r - 1, room). Past `recorded_k` the
    spans tell nothing: beta there is None (the steps stop where the spans stop)."""
    steps, tokens = 0, 0
    evaluated, accepted = np.zeros(k + 2, dtype=np.int64), np.zeros(k + 2, dtype=np.int64)
    for spans, lengths in chunked:
        starts, sizes = step_starts(spans, lengths, k)
        first = np.zeros(spans.size, dtype=bool)
        first[(np.cumsum(lengths) - lengths)[lengths > 0]] = True
        decode = ~first[starts]
        raw, sizes = np.minimum(spans[starts[decode]].astype(np.int64), k + 1), sizes[decode]
        hits = np.where(sizes == raw, sizes - 1, sizes)      # a clipped step accepted every position in the output
        evaluated += np.bincount(sizes, minlength=k + 2)[:k + 2]
        accepted += np.bincount(hits, minlength=k + 2)[:k + 2]
        steps, tokens = steps + int(decode.sum()), tokens + int(sizes.sum())
    reach_eval, reach_acc = np.cumsum(evaluated[::-1])[::-1], np.cumsum(accepted[::-1])[::-1]
    known = k if recorded_k is None else min(k, recorded_k)
    beta = [round(float(reach_acc[i] / reach_eval[i]), 4) if reach_eval[i] and i <= known else None
            for i in range(1, k + 1)]
    return {"mean_tokens_per_step": round(tokens / steps, 5) if steps else None, "steps": steps, "beta": beta}


def length_stats(lengths: list[int]) -> dict[str, Any]:
    """Mean, quantiles and a histogram over power-of-two bins [2^j, 2^(j+1)) of token counts."""
    values = np.asarray(lengths, dtype=np.int64)
    top = int(values.max()).bit_length() - 1          # the last bin [2^top, 2^(top+1)) holds the largest
    edges = [2 ** j for j in range(top + 1)]
    counts = np.histogram(values, bins=edges + [edges[-1] * 2])[0]
    return {"mean": round(float(values.mean()), 2),
            "quantiles": {f"p{round(q * 100):g}": round(float(np.quantile(values, q)), 2) for q in QUANTILES},
            "histogram": {"bin_starts": edges, "counts": [int(c) for c in counts]}}


def drafter_summary(requests: list[ReplayRequest], drafter: str, ks: list[int], recorded_k: int) -> dict[str, Any]:
    arrays = [r.spans[drafter] for r in requests]
    values = np.concatenate(arrays)
    largest = int(values.max())
    chunked = chunks(arrays)
    return {"positions": int(values.size), "largest_span": largest,
            "share_at_largest": round(float((values == largest).mean()), 5),
            "first_span_above_1": sum(int(a[0] > 1) for a in arrays),
            "output_len_mean": round(float(np.mean([a.size for a in arrays])), 2),
            "requests_other_length": sum(a.size != r.output_len for a, r in zip(arrays, requests)),
            "by_k": by_k(chunked, ks, recorded_k)}


def by_k(chunked: list[tuple[np.ndarray, np.ndarray]], ks: list[int], recorded_k: int | None = None) -> dict[str, list]:
    """`decode_steps` at each k, as parallel lists (k, mean tokens per step, steps, beta per k)."""
    rows = [decode_steps(chunked, k, recorded_k) for k in ks]
    return {"k": list(ks), **{key: [row[key] for row in rows] for key in ("mean_tokens_per_step", "steps", "beta")}}


def ngram_agreement(path: str, requests: list[ReplayRequest], window: tuple[int, int], k: int) -> dict[str, Any]:
    """vLLM's n-gram proposer (window, k) replayed from the file's token ids against its n-gram spans."""
    recorded, replayed, proposed_any, proposed_at_1 = [], [], 0, [0, 0]
    past_end = inside = 0
    for (number, record), request in zip(json_lines(path), requests):
        spans, proposed = lookup_spans(record["prompt_token_ids"], record["generated_token_ids"], k, *window)
        rec = request.spans["ngram"].astype(np.int64)
        within = np.minimum(rec, np.arange(rec.size, 0, -1))             # the recorded span clipped at the output's end
        past_end += int(((rec != spans) & (within == spans)).sum())
        inside += int((within != spans).sum())
        proposed_any += int((proposed[1:] > 0).sum())
        ones = spans[1:] == 1
        proposed_at_1 = [proposed_at_1[0] + int((proposed[1:][ones] > 0).sum()), proposed_at_1[1] + int(ones.sum())]
        recorded.append(request.spans["ngram"])
        replayed.append(spans.astype(SPAN_DTYPE))
    positions = sum(a.size for a in recorded)
    decode_positions = positions - len(recorded)
    steps = {"k": list(AGREEMENT_K), "recorded": by_k(chunks(recorded), AGREEMENT_K)["mean_tokens_per_step"],
             "replayed": by_k(chunks(replayed), AGREEMENT_K)["mean_tokens_per_step"]}
    steps["difference"] = [round(a - b, 5) for a, b in zip(steps["replayed"], steps["recorded"])]
    return {"n_min": window[0], "n_max": window[1], "k": k, "positions": positions,
            "identical_share": round(1 - (past_end + inside) / positions, 6),
            "identical_within_output_share": round(1 - inside / positions, 6),
            "differ_past_output_end": past_end, "differ_inside_output": inside,
            "proposal_share": round(proposed_any / decode_positions, 5) if decode_positions else None,
            "proposal_share_when_span_1": round(proposed_at_1[0] / proposed_at_1[1], 5) if proposed_at_1[1] else None,
            "mean_tokens_per_step": steps}


# ---- the result -----------------------------------------------------------------------------------
def report_lines(datasets: dict[str, Any], ks: dict[str, list[int]]) -> list[str]:
    lines = []
    for drafter, k_list in ks.items():
        lines.append(f"mean tokens per decode step, {drafter} (k = draft length):")
        lines.append(f"  {'dataset':<14}" + "".join(f"{'k=' + str(k):>7}" for k in k_list))
        for name, summary in datasets.items():
            row = summary["drafters"].get(drafter)
            if row:
                lines.append(f"  {name:<14}" + "".join(f"{v:>7.3f}" for v in row["by_k"]["mean_tokens_per_step"]))
    for name, summary in datasets.items():
        for label, a in summary.get("ngram_replay", {}).items():
            steps = a["mean_tokens_per_step"]
            deltas = ", ".join(f"k={q} {new:.4f} vs {old:.4f}" for q, new, old in zip(steps["k"], steps["replayed"],
                                                                                     steps["recorded"]))
            lines.append(f"n-gram replay {name} (vLLM rule, n {label}, k {a['k']}): {a['identical_share']:.4%} of "
                         f"{a['positions']} spans identical, {a['identical_within_output_share']:.4%} within the output "
                         f"({a['differ_past_output_end']} differ past its end only); tokens/step replayed vs "
                         f"recorded: {deltas}")
    return lines


def ingest(paths: list[str], options: IngestOptions) -> Ingested:
    result = Ingested(FORMAT, [str(p) for p in paths])
    if options.draft_lengths is not None and (not options.draft_lengths or min(options.draft_lengths) < 1):
        raise InputError(f"draft lengths k must be integers >= 1, got {list(options.draft_lengths)}")
    if options.dataset and len(paths) > 1:
        raise InputError(f"--dataset names one file's dataset; {len(paths)} files were given (each is named "
                         "from its file name)")
    names = [dataset_name(p, options) for p in paths]
    repeated = [n for n, c in Counter(names).items() if c > 1]
    if repeated:
        raise InputError(f"two files of dataset '{repeated[0]}': {', '.join(p for p, n in zip(paths, names) if n == repeated[0])}")
    read = [read_file(p, n) for p, n in zip(paths, names)]
    requests = [r for file_requests, _, _ in read for r in file_requests]
    drafters = sorted({d for _, file_drafters, _ in read for d in file_drafters})
    recorded_k = {d: max(int(r.spans[d].max()) for r in requests if d in r.spans) - 1 for d in drafters}
    files = [{"dataset": n, "file": Path(p).name, "sha256": sha, "requests": len(reqs),
              **({"repository": REPOSITORY, "commit": DATA_COMMIT, "path": PUBLISHED[sha]} if sha in PUBLISHED else {})}
             for p, n, (reqs, _, sha) in zip(paths, names, read)]
    source = {"files": files, **({"model": "Llama-3.1-8B-Instruct (vLLM 0.10.1, one H100)"}
                                 if all(f["sha256"] in PUBLISHED for f in files) else {})}
    ks = {d: list(options.draft_lengths or range(1, max(recorded_k[d], 1) + 1)) for d in drafters}
    for d in drafters:
        past = [k for k in ks[d] if k > recorded_k[d]]
        if past:
            result.warnings.append(
                f"k {', '.join(map(str, past))} past the recorded {d} proposer's k ({recorded_k[d]}: no span above "
                f"{recorded_k[d] + 1}): acceptance past the data is extrapolated (each step stops where the spans "
                f"stop, a lower bound; beta past position {recorded_k[d]} is null)")
    windows = DEFAULT_WINDOWS if options.ngram_windows is None else options.ngram_windows
    datasets: dict[str, Any] = {}
    for path, name, (file_requests, file_drafters, _) in zip(paths, names, read):
        summary = {"requests": len(file_requests),
                   "prompt_len": length_stats([r.prompt_len for r in file_requests]),
                   "output_len": length_stats([r.output_len for r in file_requests]),
                   "drafters": {d: drafter_summary(file_requests, d, ks[d], recorded_k[d]) for d in file_drafters}}
        if "ngram" in file_drafters and windows:
            summary["ngram_replay"] = {f"{a}-{b}": ngram_agreement(path, file_requests, (a, b), recorded_k["ngram"])
                                       for a, b in windows}
        datasets[name] = summary
        if summary["drafters"].get("eagle", {}).get("requests_other_length"):
            result.not_provided.append(
                f"{name}: EAGLE's generated tokens: not in the file; its spans count another length than "
                f"'generated_token_ids' in {summary['drafters']['eagle']['requests_other_length']} of "
                f"{len(file_requests)} requests (EAGLE's own run); its output length is its span count")
        if any(row["first_span_above_1"] for row in summary["drafters"].values()):
            result.warnings.append(f"{name}: a span above 1 at position 0 (the prefill's token, never speculated "
                                   "by vLLM); the walk takes it as recorded and the statistics leave that step out")
    result.replay = SpanReplay(requests, recorded_k, source)
    result.summary = {"source": source, "recorded_k": recorded_k, "datasets": datasets}
    result.report = report_lines(datasets, ks)
    result.not_provided += [
        "timings: none (acceptance spans and lengths only)",
        "sampling temperature: not recorded (the n-gram spans replay exactly under greedy verification)",
        "spans past the output's end: not clipped in the file (accepted tokens after the stop token); the walk "
        "clips the last step at the output's end",
        "Profile acceptance entry and StepTrace: none; --out FILE.parquet writes the span replay, FILE.json "
        "these statistics"]
    result.missing = "a span replay, not a StepTrace or Profile entry (--out FILE.parquet writes the replay)"
    return result
