"""The study's own simulator as a peer: the same points priced its way (docs/specdecode_bench_peer.md,
re-implemented here in our code, vectorised; none of its code is used).

Per (dataset, proposer, predictor, batch B): Python's `random` seeded 42, then `random.sample` of 300
of the file's requests whose spans are not empty (all of them, shuffled, where it holds 300); each
drawn request simulated alone as B copies of itself with the study's step-time fit
(`calibrate.vllm.study_fit.StudyFit`): a prefill of the B prompts, then plain decoding one token a step
over L - 1 steps (L its span count), and speculation reading span[cur - 1] with cur tokens generated:
FIXED_k verifies k + 1 tokens a copy (n-gram: a step whose span is 1 verifies one token unless a draw
from the same `random` stream, one per copy in order, falls below the dataset's matching probability),
ORACLE verifies the span itself; accepted = min(span, verified), the KV cache grows by what was
accepted; each copy's latency adds the verify time, its own draft time and the per-step overhead.
A request's throughput is B x L over the copies' mean latency; the point's speedup is the mean of the
speculative throughputs over the mean of the plain ones. The draws are the stream's own: after
`random.sample`, the generator's state moves to numpy's MT19937, whose doubles are Python's.
"""
from __future__ import annotations

import random

import numpy as np
import pandas as pd

from calibrate.vllm.streams import Stream
from calibrate.vllm.study_fit import STUDY_FIT, StudyFit

SEED = 42
SAMPLE = 300
MATCHING = {"sharegpt": 0.2, "cnn": 0.4, "gsm8k": 0.2, "instructcoder": 0.8}     # simulator.py:11-16
PREDICTORS = ("FIXED", "ORACLE")


def numpy_stream(state) -> np.random.RandomState:
    """A numpy generator continuing Python's `random` from `state` (`random.getstate()`)."""
    words = state[1]
    generator = np.random.RandomState()
    generator.set_state(("MT19937", np.array(words[:624], dtype=np.uint32), int(words[624])))
    return generator


def forward(fit: StudyFit, kv, tokens):
    return fit.target_c_fixed + fit.target_c_compute * np.asarray(tokens, float) + fit.target_c_kv * np.asarray(kv, float)


def plain_latency(fit: StudyFit, prompt: int, length: int, batch: int) -> float:
    """One copy's latency of plain decoding (every copy's is the same)."""
    decode = np.arange(max(length - 1, 0))
    kv = batch * (prompt + 1) + decode * batch
    return (float(forward(fit, 0, batch * prompt)) + fit.overhead_constant_per_step
            + float(np.sum(forward(fit, kv, batch) + fit.overhead_constant_per_step)))


def walk(spans: np.ndarray, verified: int | None) -> np.ndarray:
    """Indices of the spans the peer's steps read (span[cur - 1], cur from 1 while cur < L): each step
    accepts min(span, verified) (None: the span itself, the oracle)."""
    out, cur, length = [], 1, spans.size
    while cur < length:
        out.append(cur - 1)
        span = int(spans[cur - 1])
        cur += span if verified is None else min(span, verified)
    return np.array(out, np.int64)


def spec_latency(fit: StudyFit, prompt: int, spans: np.ndarray, batch: int, proposer: str, k: int | None,
                 matching: float, draws: np.random.RandomState) -> float:
    """The copies' mean latency of speculation (module docstring); k None: the oracle."""
    verified = None if k is None else k + 1
    index = walk(spans, verified)
    span = spans[index].astype(np.int64)
    accepted = span if verified is None else np.minimum(span, verified)
    kv = batch * (prompt + 1) + batch * (np.cumsum(accepted) - accepted)
    width = np.full(span.size, float(verified or 0)) if verified else span.astype(float)
    matched = np.ones(span.size)                       # the share of copies that verify `width` tokens
    if proposer == "ngram" and verified is not None:
        lone = span == 1
        hits = draws.random_sample(int(lone.sum()) * batch).reshape(-1, batch) < matching
        matched[lone] = hits.mean(axis=1)
    tokens = batch * (matched * width + (1 - matched) * 1.0)
    verify = forward(fit, kv, tokens)
    if proposer == "eagle":
        draft = fit.draft_c_fixed + fit.draft_c_kv * kv + fit.draft_c_num_spec_tokens * width
    else:
        draft = fit.ngram_draft_percentage * verify * matched * (width > 1)
    prefill = float(forward(fit, 0, batch * prompt)) + fit.overhead_constant_per_step
    return prefill + float(np.sum(verify + draft + fit.overhead_constant_per_step))


def peer_point(stream: Stream, proposer: str, k: int | None, batch: int, fit: StudyFit = STUDY_FIT) -> dict:
    """The peer's speedup and throughputs at one point (k None: its ORACLE predictor)."""
    data = [r for r in stream.requests if r.span_array(proposer).size > 0]
    random.seed(SEED)
    sample = random.sample(data, k=min(SAMPLE, len(data)))
    draws = numpy_stream(random.getstate())
    plain, spec = [], []
    for request in sample:
        spans = request.span_array(proposer)
        length = spans.size
        plain.append(batch * length / plain_latency(fit, request.prompt_len, length, batch))
        latency = spec_latency(fit, request.prompt_len, spans, batch, proposer, k, MATCHING[stream.dataset], draws)
        spec.append(batch * length / latency)
    return {"speedup": float(np.mean(spec) / np.mean(plain)), "tokens_per_s": float(np.mean(spec)),
            "plain_tokens_per_s": float(np.mean(plain))}


def peer_predictions(streams: dict[str, Stream], batches, ks) -> pd.DataFrame:
    """predictions.csv's peer rows: every (dataset, method, k, batch), the peer's ORACLE beside them."""
    rows = []
    for dataset, stream in streams.items():
        for method in ("eagle", "ngram"):
            for batch in batches:
                oracle = peer_point(stream, method, None, batch)["speedup"]
                for k in ks:
                    point = peer_point(stream, method, k, batch)
                    rows.append({"dataset": dataset, "method": method, "k": k, "batch": batch, "calibration": "peer",
                                 "predicted_speedup": point["speedup"], "tokens_per_s": point["tokens_per_s"],
                                 "plain_tokens_per_s": point["plain_tokens_per_s"], "oracle_speedup": oracle})
    return pd.DataFrame(rows)
