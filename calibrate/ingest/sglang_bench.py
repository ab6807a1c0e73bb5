"""`sglang-bench`: SGLang's benchmark JSON lines (`--output-file` / `--result-filename`), one run a line.

Three record kinds are recognised by their fields:
- `python -m sglang.bench_serving`: `<stat>_<metric>_ms` latency statistics (`mean`, `median`,
  `std`, `p99` ... of `ttft`, `tpot`, `itl`, `e2e_latency`), throughputs, `completed`,
  `total_output_tokens`, `accept_length` (mean tokens per verify step, bonus included; null
  without speculative decoding) and `server_info` (`model_path`, `speculative_algorithm`,
  `speculative_num_steps`, `speculative_eagle_topk`, `speculative_num_draft_tokens`,
  `speculative_draft_model_path`) where the server answered;
- `python -m sglang.bench_one_batch`: `batch_size`, `input_len`, `output_len`, `prefill_latency`,
  `median_decode_latency` (seconds), throughputs; no speculative decoding;
- `python -m sglang.bench_one_batch_server`: `batch_size`, `input_len`, `output_len`, `latency`,
  `last_ttft`, throughputs, `acc_length`.
Accept lengths of several runs are pooled as total output tokens over total steps.
What the output cannot give, and how it is filled:
- only the mean accept length: alpha is the per-token acceptance that gives it at the chain length
  `speculative_num_steps` (or `--gamma`) under independent positions
  (`costmodel.leviathan.alpha_from_expected_tokens`); with `speculative_eagle_topk` > 1 it is the
  chain-equivalent alpha of a tree; no beta_i, Markov or confidence-bin statistics;
- no per-step latency split: request-level TTFT/TPOT/ITL and bench_one_batch's median decode
  step are observations (result and Profile provenance), not a latency model;
- no dataset or temperature: `--dataset`, `--temperature` (default 0); the drafter is
  `speculative_draft_model_path`, else `--drafter`.
"""
from __future__ import annotations

from calibrate.ingest.result import (IngestOptions, Ingested, acceptance_entry, json_records, need,
                                     stated_context)
from calibrate.ingest.vllm_bench import latency_stats, throughput_of
from common.errors import InputError
from costmodel.leviathan import alpha_from_expected_tokens

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
    tau = need(record, "accept_length", where)
    return tau, float(need(record, "total_output_tokens", where))


def _one_batch(record: dict, where: str, result: Ingested, kind: str) -> tuple[float, float] | None:
    batch = need(record, "batch_size", where, int)
    label = f" (batch {batch})"
    if kind == "bench_one_batch":
        result.latency[f"prefill{label}"] = {"median": float(need(record, "prefill_latency", where))}
        if record.get("median_decode_latency") is not None:
            result.latency[f"decode_step{label}"] = {"median": float(need(record, "median_decode_latency", where))}
        return None
    result.latency[f"request{label}"] = {"mean": float(need(record, "latency", where))}
    if record.get("last_ttft") is not None:
        result.latency[f"ttft{label}"] = {"mean": float(need(record, "last_ttft", where))}
    tau = need(record, "acc_length", where)
    return tau, float(batch * need(record, "output_len", where, int))


def ingest(paths: list[str], options: IngestOptions) -> Ingested:
    result = Ingested("sglang-bench", [str(p) for p in paths])
    records = [(f"{path}:{number}", record) for path in paths for number, record in json_records(path)]
    steps = tokens = 0.0
    for where, record in records:
        kind = _kind(record, where)
        if kind == "bench_serving":
            label = "" if len(records) == 1 else (f" (rate {record.get('request_rate')}, concurrency "
                                                  f"{record.get('max_concurrency')})")
            label = f"{label[:-1]}, {where})" if f"ttft{label}" in result.latency else label
            measured = _serving(record, where, result, label)
        else:
            measured = _one_batch(record, where, result, kind)
        if measured is not None:
            tau, n_tokens = measured
            if not tau >= 1.0:
                raise InputError(f"{where}: accept length {tau!r} is below 1 (tokens per step include the bonus)")
            steps, tokens = steps + n_tokens / tau, tokens + n_tokens
    result.not_provided.append("per-step latency split (draft vs verify): request-level latencies and decode "
                               "steps kept as observations")
    if steps == 0:
        result.not_provided.append("acceptance: no accept length in the records (speculative decoding off)")
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
    stated_context(options, result)
    result.acceptance = acceptance_entry({"alpha": alpha}, result, options,
                                         {"mean_accepted_tokens": tau, "gamma": gamma, "output_tokens": tokens})
    return result
