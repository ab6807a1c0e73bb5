"""Published facts about vLLM 0.10.1, the H100 and the models, each with its source: what the vLLM
Profile is built of besides the project's own measurements (`calibrate.vllm.grid`).

Nothing here is a measurement of the study being predicted (SpecDecode-Bench's end-to-end speedups
are held out); its own simulator's step-time fit is `calibrate.vllm.study_fit`.
"""
from __future__ import annotations

from dataclasses import dataclass

import methods

VLLM_VERSION = "0.10.1"
NGRAM = methods.engine_method("ngram")      # our method for vLLM's n-gram proposer, which the study ran
EAGLE3 = methods.engine_method("eagle3")    # and for its EAGLE-3 drafter

# ---- the scheduler and the runner (vLLM source at the 0.10.x tags) --------------------------------------
MAX_BATCHED_TOKENS = {"serve": 8192, "offline": 16384}
MAX_NUM_SEQS = 1024
BLOCK_TOKENS = 16
GPU_MEMORY_UTILIZATION = 0.9
GRAPH_SIZES = (1, 2, 4) + tuple(range(8, 513, 8))
SCHEDULER_SOURCES = [
    "vllm/engine/arg_utils.py (EngineArgs batch defaults, 0.10.x): on a GPU of >= 70 GiB that is not an A100, "
    "max_num_batched_tokens 8192 for the API server (16384 for the offline LLM class), max_num_seqs 1024",
    "vllm/config (CacheConfig): block_size 16, gpu_memory_utilization 0.9",
    "vllm/config (VllmConfig._set_cudagraph_sizes): CUDA graphs captured for [1, 2, 4] + range(8, 512 + 1, 8) "
    "tokens; a step is padded up to the next size, one past 512 runs without a graph (pad_for_cudagraph)",
    "vllm/v1/core/sched/scheduler.py: running requests are scheduled first (1 + their spec tokens, or the rest "
    "of a prompt), then waiting ones with what is left of the token budget (chunked prefill); KV slots are "
    "allocated for the new tokens plus num_lookahead_tokens (the proposer's k); a request that cannot grow "
    "preempts the last running one (recompute)",
    "vllm/v1/worker/gpu_model_runner.py (0.10.x): after the forward, sampling and rejection sampling, a GPU->CPU "
    "sync, then the proposer: EAGLE on the GPU (EagleProposer.propose: the first forward over the accepted "
    "tokens of every row, prepare_inputs dropping the rejected ones, then k - 1 forwards of one token a row, "
    "each under a CUDA graph up to the largest size), the n-gram proposer on the host in a Python loop over "
    "the requests (propose_ngram_draft_token_ids: NgramProposer.propose, a numba KMP scan of the request's "
    "whole token sequence)",
]

# ---- the machine --------------------------------------------------------------------------------------
HARDWARE = "H100"
H100_MEMORY_BYTES = 85_520_809_984      # 79.65 GiB: what torch reports of an H100 80GB HBM3 (81,559 MiB)
DATASHEET = ("NVIDIA H100 SXM5 80GB datasheet: 3.35 TB/s HBM3, 989.4 TFLOPS dense bf16 (costmodel.hardware 'H100'); "
             "an H100 80GB HBM3 reports 81,559 MiB to torch and nvidia-smi")

# ---- the models ------------------------------------------------------------------------------------------
TARGET = "llama-3.1-8b"
TARGET_SOURCE = ("meta-llama/Llama-3.1-8B-Instruct config.json: 32 layers, hidden 4096, intermediate 14336, 32 heads, "
                 "8 KV heads, vocab 128256, untied head (the architecture of llama-3-8b)")
EAGLE_CHECKPOINT = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
EAGLE_DRAFT_VOCAB = 32000
EAGLE_SOURCE = (f"{EAGLE_CHECKPOINT} config.json: one LlamaDecoderLayer, draft_vocab_size {EAGLE_DRAFT_VOCAB} (a d2t "
                "map to the target's vocabulary); vLLM's llama_eagle3.py: q, k, v projected from the embedding and "
                "the feature concatenated (2h), fc from the target's three auxiliary hidden states (3h -> h), the "
                "target's embedding table. ASSUMED: the study ran this checkpoint (its files name EAGLE(-3) only)")
NGRAM_WINDOW = (3, 7)
NGRAM_SOURCE = ("vLLM's n-gram rule replayed over the study's token ids reproduces every recorded span inside the "
                "outputs but one of 503,234 at prompt_lookup_min 3, max 7 (data/specdecode_bench/llama-3.1-8b.json)")


# ---- published vLLM measurements (not the study's) ------------------------------------------------------
@dataclass(frozen=True)
class EagleSweep:
    """vLLM V1 on one H100, Llama-3.1-8B-Instruct, MT-Bench, batch 1: plain TPOT and, per draft length K,
    EAGLE-3's acceptance length (tokens per step) and TPOT."""

    plain_tpot_s: float = 7.07e-3
    k: tuple[int, ...] = (2, 3, 4, 5, 6, 7)
    acceptance_length: tuple[float, ...] = (2.36, 2.79, 3.08, 3.32, 3.46, 3.54)
    tpot_s: tuple[float, ...] = (4.32e-3, 4.09e-3, 4.05e-3, 4.13e-3, 4.20e-3, 4.29e-3)
    mean_ctx: float = 300.0             # ASSUMED: MT-Bench's ~100-token questions and ~400-token answers
    source: str = ("vllm-project/vllm issue #20780 (2025-07-10, vLLM V1 at 0.9.x, H100): TPOT at batch 1 of "
                   "meta-llama/Llama-3.1-8B-Instruct, vanilla 7.07 ms, and of EAGLE-3 (yuhuili/EAGLE3-LLaMA3.1-"
                   "Instruct-8B) at K = 2..7 with its acceptance length")

    def step_s(self) -> list[float]:
        """Seconds of one EAGLE-3 step at each K: TPOT x tokens per step."""
        return [t * a for t, a in zip(self.tpot_s, self.acceptance_length)]


EAGLE_SWEEP = EagleSweep()
OFFLINE_BS1_TOK_S = (133.0, "vllm-project/vllm PR #16937 (2025-04-24): Llama-3.1-8B-Instruct on one H100, batch 1, "
                            "offline MT-Bench, vanilla 133 output tokens/s (the first token included)")
KV_CACHE_CHECK = (410_128, 51.63, "vllm-project/vllm issue #19996 (vLLM 0.9.1, H100 80GB, Llama-3.1-8B with an "
                                  "EAGLE drafter): 'Available KV cache memory: 51.63 GiB', 'GPU KV cache size: "
                                  "410,128 tokens'")

# ---- host costs without a published measurement (ASSUMED, reported as such) -----------------------------
HOST_PER_ROW_S = 10e-6
HOST_PER_ROW_SOURCE = ("ASSUMED 10 us per running request per step: V1's Python loops over the requests in the "
                       "scheduler (schedule, update_from_output) and the runner (_update_states, the sampled-token "
                       "bookkeeping its comment calls 'can be slow since it iterates over the requests one by one'); "
                       "no published per-request figure for 0.10.1 was found")
NGRAM_PER_ROW_S = 8e-6
NGRAM_PER_TOKEN_S = 1.5e-9
NGRAM_SOURCE_COST = ("ASSUMED: the n-gram proposer's Python loop costs ~8 us a request (indexing, the numba "
                     "dispatch, .tolist()) and its KMP scan ~1.5 ns per token of the request's sequence (a compiled "
                     "loop of a compare and a branch per token, ~4 cycles at ~3 GHz)")
NGRAM_SPECULATION_S = 0.3e-3
NGRAM_SPECULATION_SOURCE = ("ASSUMED 0.3 ms a speculative step without a drafter model: spec-decode metadata, the "
                            "rejection sampler's kernels and its output parsing (EAGLE's fitted fixed cost, which "
                            "also prepares the drafter's inputs and hidden states, is larger)")
