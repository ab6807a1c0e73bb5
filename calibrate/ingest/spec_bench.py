"""`spec-bench`: Spec-Bench's model-answer JSON lines (`data/spec_bench/model_answer/<model-id>.jsonl`).

One line per question: `question_id`, `category`, `model_id`, `choices` (one per sampled
completion), each choice with per-turn lists `turns` (text), `new_tokens`, `wall_time` (seconds)
and, for most methods, `decoding_steps` (some scripts write `idxs`, not a step count, unused),
plus `accept_lengths`: the tokens every decoding step committed, bonus included, all turns of the
choice in order. Each step becomes one
StepTrace row (prompt ids `spec-bench/<question_id>/turn<t>`, `#<choice>` after the id for choices
past the first), written with `traces.schema.write_trace` (atomically) by `--out FILE.parquet`;
its acceptance entry comes from `calibrate.fit_acceptance.fit_step_acceptance`.
Steps are split into turns by `decoding_steps` when it counts them all, else where the running
sum of accept lengths reaches each turn's `new_tokens`.
What the file cannot give, and how it is filled (also in the trace's metadata, `extra.not_provided`):
- the draft length: `--gamma`, else the largest accept length - 1 in the file; the accept mask
  is accept length - 1 hits then one miss (none when all were accepted); tree methods (EAGLE,
  Medusa) become their accepted path, as a StepTrace stores it;
- per-step time: only each turn's wall time, spread evenly over its steps and booked as verify_s
  (draft_s and overhead_s 0); draft_forwards = gamma, verify_tokens = gamma + 1 as for a chain;
- the prompt length: ctx_len counts the turn's generated tokens only; no drafter confidences;
- model names and dataset: `--target`, `--drafter`, `--dataset` (default "spec-bench");
  `model_id` is kept in the metadata;
- the sampling temperature: Spec-Bench's scripts end `model_id` with `-temperature-<T>`, which is
  read (checked against `--temperature`); without it `--temperature` is asked for, never assumed.
Its memory is estimated from the files' sizes before they are read (`ANSWER_BYTES` per byte of
answers) and a read past `common.memory.READ_LIMIT` is refused in one line with the estimate.
A run without speculation (Spec-Bench's baseline: every step commits one token) is refused: it
has nothing to calibrate, and its accept lengths would read as alpha 0. So is a file another
importer reads (a `vllm bench serve` result, SGLang bench output).
"""
from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from calibrate.ingest.result import (IngestOptions, Ingested, chain_config, chain_mask, from_steps, json_records,
                                     need, refuse_other, run_temperature, stated_dataset)
from common.errors import InputError
from common.memory import READ_LIMIT, check_fits, gb
from traces.schema import RunMetadata, validate

TEMPERATURE = re.compile(r"-temperature-(\d+(?:\.\d+)?)$")
ANSWER_BYTES = 150         # peak bytes per byte of answers read (1.45 GB for a 10 MB file, the process included)


def _numbers(choice: dict, key: str, where: str, integer: bool, minimum: float) -> list:
    values = need(choice, key, where, list)
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, int if integer else (int, float)) or v < minimum:
            kind = "an integer" if integer else "a number"
            raise InputError(f"{where}: field '{key}[{i}]' must be {kind} >= {minimum:g}, got {v!r}")
    return values


def turn_steps(choice: dict, lengths: list[int], new_tokens: list[int]) -> list[list[int]]:
    """Accept lengths of each turn: by `decoding_steps` when it counts every step, else by new_tokens."""
    counts = choice.get("decoding_steps")
    if isinstance(counts, list) and len(counts) == len(new_tokens) and sum(counts) == len(lengths):
        out, start = [], 0
        for n in counts:
            out.append(lengths[start:start + n])
            start += n
        return out
    out, start, total, bound = [], 0, 0, 0
    for t, n in enumerate(new_tokens):
        bound += n
        end = len(lengths) if t == len(new_tokens) - 1 else start
        while t < len(new_tokens) - 1 and end < len(lengths) and total < bound:
            total += lengths[end]
            end += 1
        out.append(lengths[start:end])
        start = end
    return out


def read_answers(path: str) -> tuple[list[dict], set[str]]:
    """Per turn: (prompt id, category, accept lengths, wall time, new tokens); and the model ids."""
    turns, model_ids = [], set()
    for number, record in json_records(path):
        where = f"{path}:{number}"
        refuse_other(record, where, "spec-bench")
        qid = need(record, "question_id", where, (int, str))
        choices = need(record, "choices", where, list)
        if record.get("model_id"):
            model_ids.add(str(record["model_id"]))
        for c_index, choice in enumerate(choices):
            cw = f"{where}: choices[{c_index}]"
            if not isinstance(choice, dict):
                raise InputError(f"{cw}: must be an object")
            new_tokens = _numbers(choice, "new_tokens", cw, True, 0)
            wall = _numbers(choice, "wall_time", cw, False, 0)
            lengths = _numbers(choice, "accept_lengths", cw, True, 1)
            if len(wall) != len(new_tokens):
                raise InputError(f"{cw}: field 'wall_time' has {len(wall)} turns, 'new_tokens' {len(new_tokens)}")
            suffix = f"#{c_index}" if c_index else ""
            for t, steps in enumerate(turn_steps(choice, lengths, new_tokens)):
                if steps:
                    turns.append({"prompt_id": f"spec-bench/{qid}{suffix}/turn{t + 1}", "where": cw,
                                  "category": record.get("category", ""), "lengths": steps,
                                  "wall_time": float(wall[t]), "new_tokens": int(new_tokens[t])})
    if not turns:
        raise InputError(f"{path}: no decoding steps in the file (every 'accept_lengths' is empty)")
    return turns, model_ids


def model_temperature(model_ids: set[str], paths: list[str]) -> float | None:
    """The temperature Spec-Bench's scripts put at the end of `model_id` (`...-temperature-0.0`)."""
    found = {float(m[1]) for m in (TEMPERATURE.search(i) for i in model_ids) if m}
    if len(found) > 1:
        raise InputError(f"{paths[0]}: answers at several temperatures ({', '.join(f'{t:g}' for t in sorted(found))} "
                         "in model_id); ingest one temperature at a time")
    every = model_ids and all(TEMPERATURE.search(i) for i in model_ids)
    return found.pop() if found and every else None


def ingest(paths: list[str], options: IngestOptions) -> Ingested:
    result = Ingested("spec-bench", [str(p) for p in paths])
    size = sum(Path(p).stat().st_size for p in paths if Path(p).is_file())
    named = ", ".join(map(str, paths[:2])) + (f" and {len(paths) - 2} more" if len(paths) > 2 else "")
    check_fits(size * ANSWER_BYTES, f"spec-bench {named} ({gb(size)} of answers)", READ_LIMIT,
               "give fewer questions (a shorter answer file)")
    turns, model_ids = [], set()
    for path in paths:
        t, m = read_answers(path)
        turns, model_ids = turns + t, model_ids | m
    if all(length == 1 for turn in turns for length in turn["lengths"]):
        steps = sum(len(turn["lengths"]) for turn in turns)
        raise InputError(f"{paths[0]}: every one of the {steps} decoding steps committed exactly 1 token: a run without "
                         "speculation (Spec-Bench's baseline), nothing to calibrate")
    gamma = options.gamma or max(1, max(max(t["lengths"]) for t in turns) - 1)
    for turn in turns:
        if max(turn["lengths"]) > gamma + 1:
            raise InputError(f"{turn['where']}: field 'accept_lengths' holds {max(turn['lengths'])}, more than "
                             f"--gamma {gamma} + 1")
    config = chain_config(options.method, gamma)
    rows = []
    for turn in turns:
        step_s, ctx = turn["wall_time"] / len(turn["lengths"]), 0
        for step, accepted in enumerate(turn["lengths"]):
            rows.append({"run_id": f"spec-bench:{'+'.join(sorted(model_ids)) or 'unknown'}", "method": options.method,
                         "config": config, "prompt_id": turn["prompt_id"], "step": step, "ctx_len": ctx,
                         "draft_forwards": gamma, "draft_s": 0.0, "verify_tokens": gamma + 1, "verify_s": step_s,
                         "overhead_s": 0.0, "accepted": accepted, "accept_mask": chain_mask(accepted, gamma),
                         "confidences": []})
            ctx += accepted
    result.not_provided += [
        f"draft length: {gamma} ({'--gamma' if options.gamma else 'largest accept length - 1'}); accept masks "
        "are accept length - 1 hits then a miss",
        "per-step time: each turn's wall time spread evenly over its steps, all booked as verify_s",
        "prompt length: ctx_len counts generated tokens only; drafter confidences: none",
        "model names: " + (f"target '{options.target}'" if options.target else "target not stated (--target)")
        + (f", drafter '{options.drafter}'" if options.drafter else ", drafter not stated (--drafter)")]
    temperature = run_temperature(options, result, model_temperature(model_ids, paths), paths[0])
    stated_dataset(options, result, dataset_known=True)
    frame = validate(pd.DataFrame(rows), "step", source=str(paths[0]))
    metadata = None if temperature is None else RunMetadata(
        kind="step", models={k: v for k, v in (("target", options.target), ("draft", options.drafter)) if v},
        hardware="unknown", temperature=temperature, dataset=options.dataset or "spec-bench",
        extra={"source_format": "spec-bench", "sources": result.sources, "model_id": sorted(model_ids),
               "not_provided": result.not_provided})
    tokens = sum(t["new_tokens"] for t in turns)
    seconds = sum(t["wall_time"] for t in turns)
    result.throughput = {"tokens_per_s": tokens / seconds} if seconds > 0 else {}
    return from_steps(result, frame, metadata, options)
