"""`sglang-bench`: SGLang's benchmark JSON lines (`--output-file` / `--result-filename`), one run a line.

Three record kinds are recognised by their fields:
- `python -m sglang.bench_serving`: `<stat>_<metric>_ms` latency statistics (`mean`, `median`,
  `std`, `p99` ... of `ttft`, `tpot`, `itl`, `e2e_latency`), throughputs, `completed`,
  `total_output_tokens`, `accept_length` (null without speculative decoding) and `server_info`
  (`model_path`, `speculative_algorithm`, `speculative_num_steps`, `speculative_eagle_topk`,
  `speculative_num_draft_tokens`, `speculative_draft_model_path`) where the server answered;
- `python -m sglang.bench_one_batch`: `batch_size`, `input_len`, `output_len`, `prefill_latency`,
  `median_decode_latency` (seconds), throughputs; no speculative decoding;
- `python -m sglang.bench_one_batch_server`: `batch_size`, `input_len`, `output_len`, `latency`,
  `last_ttft`, throughputs, `acc_length` (that run's own tokens per verify step).
bench_serving's `accept_length` is the server's `avg_spec_accept_length`: tokens per verify step,
bonus included, over everything the server decoded since it started (or since a /flush_cache,
which `--flush-cache` sends after each run's warmup), read when the run ends. Runs appended to one
file are therefore cumulative by default (`--accept-length cumulative`): the last line's value is
the mean over all of them, and run k's own value follows from the differences (steps so far =
tokens so far / accept length); they must come from one server (the same `server_info`), and a
run whose own value is impossible is refused (lines that are not cumulative: pass
`--accept-length per-run`, for runs with --flush-cache). Per-run values are pooled as total output
tokens over total steps; so are bench_one_batch_server's.
What the output cannot give, and how it is filled:
- only the mean accept length: alpha is the per-token acceptance that gives it at the chain length
  `speculative_num_steps` (or `--gamma`) under independent positions
  (`costmodel.leviathan.alpha_from_expected_tokens`); with `speculative_eagle_topk` > 1 it is the
  chain-equivalent alpha of a tree; no beta_i, Markov or confidence-bin statistics;
- the server's cumulative mean also holds each run's warmup requests and anything it served
  before the first run (or since the last flush);
- no per-step latency split: request-level TTFT/TPOT/ITL and bench_one_batch's median decode
  step are observations (result and Profile provenance), not a latency model;
- no dataset or temperature (the request payloads' temperature is not recorded): `--dataset`,
  `--temperature` (asked for); the drafter is `speculative_draft_model_path`, else `--drafter`.
A file another importer reads (a `vllm bench serve` result, Spec-Bench answers) is refused naming it.
"""
from __future__ import annotations

import math

from calibrate.ingest.result import (IngestOptions, Ingested, acceptance_entry, json_records, need, refuse_other,
                                     run_temperature, stated_dataset)
from calibrate.ingest.vllm_bench import latency_stats, throughput_of
from common.errors import InputError
from costmodel.leviathan import alpha_from_expected_tokens

ACCEPT_LENGTH = ("cumulative", "per-run")
SERVER = ("model_path", "speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
          "speculative_num_draft_tokens", "speculative_draft_model_path")
SERVING_THROUGHPUT = ("request_throughput", "input_throughput", "output_throughput", "total_throughput", "concurrency")


def _kind(record: dict, where: str) -> str:
    if "mean_ttft_ms" in record or "median_ttft_ms" in record:
        return "bench_serving"
    if "acc_length" in record:
        return "bench_one_batch_server"
    if "prefill_latency" in record:
        return "bench_one_batch"
    raise InputError(f"{where}: not an SGLang benchmark record (no field 'mean_ttft_ms', 'prefill_latency' "
                     "or 'acc_length')")


def _number(record: dict, key: str, where: str) -> float:
    value = float(need(record, key, where))
    if not math.isfinite(value):
        raise InputError(f"{where}: field '{key}' is {value!r}, not a finite number")
    return value


def _serving(record: dict, where: str, result: Ingested, label: str) -> tuple[float, float] | None:
    record = {k.replace("e2e_latency", "e2el"): v for k, v in record.items()}
    for metric, stats in latency_stats(record, where).items():
        result.latency[f"{metric}{label}"] = stats
    result.throughput.update({f"{k}{label}": v for k, v in throughput_of(record, SERVING_THROUGHPUT).items()})
    info = record.get("server_info") or {}
    if not isinstance(info, dict):
        raise InputError(f"{where}: field 'server_info' must be an object")
    for role, key in (("target", "model_path"), ("drafter", "speculative_draft_model_path")):
        if info.get(key):
            result.models[role] = str(info[key])
    for key in ("speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
                "speculative_num_draft_tokens"):
        if info.get(key) is not None:
            result.summary[key] = info[key]
    if record.get("accept_length") is None:
        return None
    return _number(record, "accept_length", where), _number(record, "total_output_tokens", where)


def _one_batch(record: dict, where: str, result: Ingested, kind: str) -> tuple[float, float] | None:
    batch = need(record, "batch_size", where, int)
    label = f" (batch {batch})"
    if kind == "bench_one_batch":
        result.latency[f"prefill{label}"] = {"median": _number(record, "prefill_latency", where)}
        if record.get("median_decode_latency") is not None:
            result.latency[f"decode_step{label}"] = {"median": _number(record, "median_decode_latency", where)}
        return None
    result.latency[f"request{label}"] = {"mean": _number(record, "latency", where)}
    if record.get("last_ttft") is not None:
        result.latency[f"ttft{label}"] = {"mean": _number(record, "last_ttft", where)}
    return _number(record, "acc_length", where), float(batch * need(record, "output_len", where, int))


def cumulative_steps(runs: list[tuple[str, float, float]]) -> tuple[float, list[float]]:
    """Total verify steps of runs whose accept lengths are the server's running mean, and each
    run's own accept length (InputError naming the run whose own value is impossible)."""
    own, tokens, steps = [], 0.0, 0.0
    for run_where, tau, n_tokens in runs:
        tokens += n_tokens
        now = tokens / tau
        if now - steps <= 0 or n_tokens / (now - steps) < 1.0:
            raise InputError(f"{run_where}: accept length {tau:g} cannot follow the runs before it as the server's "
                             "running mean (its own run would take no steps or accept less than 1 token a step); "
                             "pass --accept-length per-run if each line is its own run (--flush-cache)")
        own.append(n_tokens / (now - steps))
        steps = now
    return steps, own


def ingest(paths: list[str], options: IngestOptions) -> Ingested:
    if options.accept_length not in ACCEPT_LENGTH:
        raise InputError(f"--accept-length must be one of {', '.join(ACCEPT_LENGTH)}, got {options.accept_length!r}")
    result = Ingested("sglang-bench", [str(p) for p in paths])
    records = [(f"{path}:{number}", record) for path in paths for number, record in json_records(path)]
    serving, per_run, servers = [], [], {}
    for where, record in records:
        refuse_other(record, where, "sglang-bench")
        kind = _kind(record, where)
        if kind == "bench_serving":
            label = "" if len(records) == 1 else (f" (rate {record.get('request_rate')}, concurrency "
                                                  f"{record.get('max_concurrency')})")
            label = f"{label[:-1]}, {where})" if f"ttft{label}" in result.latency else label
            measured = _serving(record, where, result, label)
            info = record.get("server_info") or {}
            servers[where] = tuple(str(info.get(k)) for k in SERVER)
            running_mean = options.accept_length == "cumulative"
            (serving if running_mean else per_run).extend([(where, *measured)] if measured else [])
        else:
            measured = _one_batch(record, where, result, kind)
            per_run.extend([(where, *measured)] if measured else [])
    for where, tau, _ in serving + per_run:
        if not tau >= 1.0:
            raise InputError(f"{where}: accept length {tau!r} is below 1 (tokens per step include the bonus)")
    result.not_provided.append("per-step latency split (draft vs verify): request-level latencies and decode "
                               "steps kept as observations")
    steps = sum(n / tau for _, tau, n in per_run)
    tokens = sum(n for _, _, n in serving + per_run)
    if serving:
        if len({servers[w] for w, _, _ in serving}) > 1:
            raise InputError(f"{paths[0]}: bench_serving runs of different servers (server_info differs); their "
                             "accept lengths are each server's running mean: ingest one server's runs at a time")
        serving_steps, own = cumulative_steps(serving)
        steps += serving_steps
        result.summary["accept_length_per_run"] = own
        result.not_provided.append("each bench_serving accept length is the server's running mean since its start "
                                   "(or last flush), warmup requests and earlier traffic included; runs taken as "
                                   "one server's, in order (--accept-length per-run otherwise)")
    if steps == 0:
        result.not_provided.append("acceptance: no accept length in the records (speculative decoding off)")
        result.missing = "no acceptance (no accept length in the records: speculative decoding off)"
        return result
    tau = tokens / steps
    gamma = options.gamma or result.summary.get("speculative_num_steps")
    if not gamma:
        raise InputError(f"{paths[0]}: the records do not say the draft length (server_info."
                         "speculative_num_steps); pass --gamma")
    gamma = int(gamma)
    if tau > gamma + 1 + 1e-9:
        raise InputError(f"{paths[0]}: accept length {tau:.3f} exceeds draft length {gamma} + 1; check --gamma")
    alpha = float(alpha_from_expected_tokens(min(tau, gamma + 1.0), gamma))
    result.summary.update({"mean_accepted_tokens": tau, "alpha": alpha, "gamma": gamma})
    topk = int(result.summary.get("speculative_eagle_topk") or 1)
    result.not_provided += [
        f"per-position acceptance: only the mean accept length; alpha {alpha:.4f} assumes independent positions "
        f"at draft length {gamma}" + (f" (chain-equivalent alpha of a top-{topk} tree)" if topk > 1 else ""),
        "drafter name: " + (f"'{result.models['drafter']}' (server_info)" if "drafter" in result.models else
                            f"'{options.drafter}' (--drafter)" if options.drafter else "not stated (pass --drafter)")]
    if options.target:
        result.models["target"] = options.target
    temperature = run_temperature(options, result)
    stated_dataset(options, result)
    if temperature is not None:
        result.acceptance = acceptance_entry({"alpha": alpha}, result, options,
                                             {"mean_accepted_tokens": tau, "gamma": gamma, "output_tokens": tokens},
                                             temperature)
    return result
