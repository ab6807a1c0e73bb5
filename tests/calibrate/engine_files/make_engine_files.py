"""Build the vLLM /metrics files of this corpus with prometheus_client's own exposition, the library vLLM
serves /metrics with (Prometheus text, and OpenMetrics as `Accept: application/openmetrics-text` gets it).
Seeded: `python tests/calibrate/engine_files/make_vllm_scrapes.py tests/calibrate/engine_files` rebuilds them."""
import json
import sys
from pathlib import Path

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import generate_latest as prometheus_text
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_text

OUT = Path(sys.argv[1])
LABELS = ["model_name", "engine"]


def registry(model, engines, counts, created, k, extra=None, histogram=None):
    """counts: engine -> (drafts, draft_tokens, accepted, [per position]); created: engine -> start time."""
    r = CollectorRegistry()
    c = {n: Counter(f"vllm:spec_decode_{n}", doc, LABELS, registry=r) for n, doc in
         (("num_drafts", "Number of spec decoding drafts."), ("num_draft_tokens", "Number of draft tokens."),
          ("num_accepted_tokens", "Number of accepted tokens."))}
    pos = Counter("vllm:spec_decode_num_accepted_tokens_per_pos", "Accepted tokens per draft position.",
                  LABELS + ["position"], registry=r)
    g = Gauge("vllm:num_requests_running", "Number of requests in model execution batches.", LABELS, registry=r)
    for e in engines:
        d, t, a, per = counts[e]
        for name, value in (("num_drafts", d), ("num_draft_tokens", t), ("num_accepted_tokens", a)):
            child = c[name].labels(model, str(e))
            child.inc(value)
            child._created = created[e]
        for i in range(k):
            child = pos.labels(model, str(e), str(i))
            child.inc(per[i])
            child._created = created[e]
        g.labels(model, str(e)).set(3)
    if histogram:
        h = Histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
                      ["model_name"], buckets=(0.5, 1.0, 2.5, 5.0, 10.0), registry=r)
        child = h.labels(model)
        for v in histogram:
            child.observe(v)
        child._created = min(created.values())
    for name, value in (extra or {}).items():
        child = Counter(name, "A spec-decode counter this importer does not know.", LABELS, registry=r).labels(model, "0")
        child.inc(value)
        child._created = T0
    return r


def simulate(rng, drafts, lengths, probs, betas):
    ks = rng.choice(lengths, size=drafts, p=probs)
    per = np.zeros(max(lengths), dtype=int)
    for k in ks:
        a = 0
        while a < k and rng.random() < betas[a]:
            a += 1
        per[:a] += 1
    return int(drafts), int(ks.sum()), int(per.sum()), per.tolist()


def write(name, reg, openmetrics=False):
    (OUT / name).write_bytes((openmetrics_text if openmetrics else prometheus_text)(reg))


T0, T1 = 1763611200.0, 1763625600.0           # process start before, and after the restart (4 h later)
# a restart between two scrapes that no counter shows: the truth since it is 0.845 / 0.455 / 0.282
write("vllm_restart_before.prom", registry("llama-3.1-8b", [0], {0: (1700, 5100, 2844, [1410, 880, 554])}, {0: T0}, 3))
write("vllm_restart_after.prom", registry("llama-3.1-8b", [0], {0: (2000, 6000, 3164, [1690, 910, 564])}, {0: T1}, 3))
# the same server, not restarted: OpenMetrics (Accept: application/openmetrics-text), names as vllm_...
om = {0: (4000, 16000, 8180, [3200, 2400, 1600, 980]), 1: (3600, 14400, 7540, [2900, 2200, 1500, 940])}
om2 = {0: (9000, 36000, 18460, [7200, 5430, 3620, 2210]), 1: (8100, 32400, 16930, [6520, 4950, 3330, 2130])}
write("vllm_openmetrics_before.prom", registry("qwen2.5-7b", [0, 1], om, {0: T0, 1: T0}, 4,
                                               histogram=[0.8, 1.2, 3.0]), openmetrics=True)
write("vllm_openmetrics_after.prom", registry("qwen2.5-7b", [0, 1], om2, {0: T0, 1: T0}, 4,
                                              histogram=[0.8, 1.2, 3.0, 0.7, 2.2, 6.0]), openmetrics=True)
rng = np.random.default_rng(30)
# vLLM's batch-size schedule: 60% of drafts of K=4, 40% of K=2, every position accepted at 0.8
write("vllm_varying_k.prom", registry("llama-3.1-8b", [0], {0: simulate(rng, 20000, [4, 2], [0.6, 0.4], [0.8] * 4)},
                                      {0: T0}, 4))
# the same schedule, positions accepted at 0.9 / 0.8 / 0.6 / 0.4: no single rate explains the counts
write("vllm_varying_declining.prom", registry("llama-3.1-8b", [0], {0: simulate(rng, 20000, [4, 2], [0.6, 0.4],
                                                                                [0.9, 0.8, 0.6, 0.4])}, {0: T0}, 4))
# a spec-decode counter newer than this importer (one in review upstream counts scheduled steps)
write("vllm_unknown_metric.prom", registry("llama-3.1-8b", [0], {0: (1000, 3000, 1500, [700, 500, 300])}, {0: T0}, 3,
                                           extra={"vllm:spec_decode_num_scheduled_steps": 1040}))
# vLLM v0 (vllm/engine/metrics.py before V1): rates as gauges, no drafts or per-position counters
r = CollectorRegistry()
Gauge("vllm:spec_decode_draft_acceptance_rate", "Speulative token acceptance rate.", ["model_name"], registry=r).labels("vicuna-7b").set(0.642)
Gauge("vllm:spec_decode_efficiency", "Speculative decoding system efficiency.", ["model_name"], registry=r).labels("vicuna-7b").set(0.598)
for name, value in (("num_accepted_tokens", 8547), ("num_draft_tokens", 13311), ("num_emitted_tokens", 10616)):
    child = Counter(f"vllm:spec_decode_{name}", f"Number of {name}.", ["model_name"], registry=r).labels("vicuna-7b")
    child.inc(value)
    child._created = T0
write("vllm_v0.prom", r)
# a counter that came back NaN
reg = registry("llama-3.1-8b", [0], {0: (1000, 3000, 1500, [700, 500, 300])}, {0: T0}, 3)
text = prometheus_text(reg).decode().replace('vllm:spec_decode_num_drafts_total{engine="0",model_name="llama-3.1-8b"} 1000.0',
                                             'vllm:spec_decode_num_drafts_total{engine="0",model_name="llama-3.1-8b"} NaN')
assert "NaN" in text
(OUT / "vllm_nan.prom").write_text(text)


# ---- JSON results, in the fields each upstream writer sets -------------------------------------------
def dump(name, *records):
    text = "\n".join(json.dumps(r) for r in records) + "\n" if len(records) > 1 or name.endswith(".jsonl") \
        else json.dumps(records[0], indent=2) + "\n"
    (OUT / name).write_text(text)


def latency(metrics):
    """<stat>_<metric>_ms fields as `vllm bench serve` / sglang.bench_serving write them."""
    base = {"ttft": 40.0, "tpot": 12.0, "itl": 12.5, "e2el": 2400.0, "e2e_latency": 2400.0}
    out = {}
    for metric in metrics:
        ms = base[metric]
        out.update({f"mean_{metric}_ms": ms, f"median_{metric}_ms": ms * 0.95, f"std_{metric}_ms": ms * 0.3,
                    f"p99_{metric}_ms": ms * 2.2})
    return out


VLLM_HEAD = {"date": "20261120-141502", "endpoint_type": "openai", "backend": "openai", "label": None,
             "model_id": "meta-llama/Llama-3.1-8B-Instruct", "tokenizer_id": "meta-llama/Llama-3.1-8B-Instruct",
             "num_prompts": 500, "request_rate": "inf", "burstiness": 1.0, "max_concurrency": 32, "duration": 120.0,
             "completed": 500, "failed": 0, "total_input_tokens": 51200, "total_output_tokens": 128000,
             "request_throughput": 4.17, "request_goodput": None, "output_throughput": 1066.7,
             "total_token_throughput": 1493.3, "max_output_tokens_per_s": 1400.0, "max_concurrent_requests": 32,
             "rtfx": 0.0}


def spec_block(drafts, draft_tokens, per_position):
    accepted = int(sum(per_position))
    return {"spec_decode_acceptance_rate": 100.0 * accepted / draft_tokens,
            "spec_decode_acceptance_length": 1 + accepted / drafts, "spec_decode_num_drafts": drafts,
            "spec_decode_draft_tokens": draft_tokens, "spec_decode_accepted_tokens": accepted,
            "spec_decode_per_position_acceptance_rates": [c / drafts for c in per_position]}


# --percentile-metrics e2el: no TTFT/TPOT/ITL, the spec-decode block whole (K = 3, every draft full)
dump("vllm_bench_e2el_only.json", {**VLLM_HEAD, **latency(["e2el"]), **spec_block(40000, 120000, [30000, 22000, 14000])})
# --skip-tokenizer-init under a batch-size schedule: drafts of K = 4 and 2, one rate 0.75 at every position
d, t, _, per = simulate(np.random.default_rng(31), 50000, [4, 2], [0.5, 0.5], [0.75] * 4)
dump("vllm_bench_skip_tokenizer_varying.json", {**VLLM_HEAD, "tokenizer_id": None, **latency(["e2el"]),
                                                **spec_block(d, t, per)})
# --metadata temperature=0.7 (newer vllm bench serve records no temperature of its own)
dump("vllm_bench_metadata_temperature.json", {**VLLM_HEAD, "temperature": "0.7",
                                              **latency(["ttft", "tpot", "itl", "e2el"]),
                                              **spec_block(30000, 90000, [21000, 15000, 9600])})
# benchmarks/benchmark_serving.py of a server without speculation: latency only
dump("vllm_benchmark_serving_no_spec.json", {k: v for k, v in VLLM_HEAD.items() if k not in ("rtfx", "endpoint_type")}
     | {"best_of": 1} | latency(["ttft", "tpot", "itl"]))

SGLANG_INFO = {"model_path": "meta-llama/Llama-3.1-8B-Instruct", "tp_size": 1, "speculative_algorithm": "EAGLE",
               "speculative_draft_model_path": "lmsys/sglang-EAGLE-LLaMA3-Instruct-8B", "speculative_num_steps": 5,
               "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 6}


def sglang_run(rate, tokens, accept_length, info=SGLANG_INFO):
    return {"backend": "sglang", "dataset_name": "sharegpt", "request_rate": rate, "max_concurrency": 16,
            "sharegpt_output_len": None, "random_input_len": 1024, "random_output_len": 1024, "random_range_ratio": 0.0,
            "server_info": info, "duration": 100.0, "completed": 400, "total_input_tokens": 80000,
            "total_output_tokens": tokens, "total_output_tokens_retokenized": tokens - 120,
            "request_throughput": 4.0, "input_throughput": 800.0, "output_throughput": tokens / 100.0,
            "total_throughput": (80000 + tokens) / 100.0, **latency(["e2e_latency", "ttft", "tpot", "itl"]),
            "concurrency": 12.0, "accept_length": accept_length}


# two runs on one server without --flush-cache: each accept_length is the server's running mean;
# the runs' own values are 3.0 (200000 tokens) and 2.6 (300000 tokens)
steps = 200000 / 3.0 + 300000 / 2.6
dump("sglang_serving_cumulative.jsonl", sglang_run(2.0, 200000, 3.0), sglang_run(4.0, 300000, 500000 / steps))
# a server without speculation: accept_length null
dump("sglang_serving_no_spec.jsonl", sglang_run(4.0, 300000, None, {"model_path": SGLANG_INFO["model_path"], "tp_size": 1,
                                                                    "speculative_algorithm": None}))
# bench_one_batch_server: each record's acc_length is its own batch's
dump("sglang_one_batch_server.jsonl",
     *[{"run_name": "eagle", "batch_size": b, "input_len": 1024, "output_len": 512, "latency": 4.0 + b / 8,
        "output_throughput": b * 512 / (4.0 + b / 8), "overall_throughput": b * 1536 / (4.0 + b / 8),
        "last_ttft": 0.05 * b, "acc_length": a} for b, a in ((1, 3.2), (8, 2.9))])


def answer(qid, category, model_id, turns):
    """One Spec-Bench answer line: turns of accept lengths (one choice)."""
    return {"question_id": qid, "category": category, "answer_id": f"a{qid}", "model_id": model_id,
            "choices": [{"index": 0, "turns": [f"(turn {i + 1})" for i in range(len(turns))],
                         "decoding_steps": [len(t) for t in turns], "new_tokens": [sum(t) for t in turns],
                         "wall_time": [0.02 * len(t) for t in turns],
                         "accept_lengths": [a for t in turns for a in t]}], "tstamp": 1763651783.5}


# Spec-Bench's baseline (plain decoding): every step commits one token
dump("spec_bench_baseline.jsonl", *[answer(q, "writing", "vicuna-7b-v1.3-vanilla-float16-temperature-0.0",
                                           [[1] * 20, [1] * 18]) for q in (81, 82)])
# EAGLE (a tree: up to 6 tokens a step) sampled at temperature 1.0, as its model_id says
dump("spec_bench_eagle_t1.jsonl", answer(91, "qa", "vicuna-7b-v1.3-eagle-float16-temperature-1.0",
                                         [[3, 4, 1, 6, 2, 5], [2, 2, 6, 3]]),
     answer(92, "math_reasoning", "vicuna-7b-v1.3-eagle-float16-temperature-1.0", [[5, 1, 4, 4], [6, 6, 2]]))
# a model_id without the temperature
dump("spec_bench_no_temperature.jsonl", answer(93, "rag", "vicuna-7b-v1.3-pld", [[2, 1, 3, 1, 4], [1, 2, 2]]))
