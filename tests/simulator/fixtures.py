"""Hand-built Profiles for the simulator tests: every drafter kind, fixed or roofline latencies (the
Profile's own are one-point tables of the fixed seconds, so it loads as any Profile must)."""
from __future__ import annotations

import copy

import numpy as np

from costmodel.params import arch_dict
from simulator.costs import FixedLatency

HIT1 = [0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.97]
FREQ = [0.02, 0.03, 0.05, 0.08, 0.1, 0.1, 0.1, 0.12, 0.12, 0.13, 0.15]
TOPK = {str(k): [min(1.0, h + extra) for h in HIT1] for k, extra in ((1, 0.0), (2, 0.15), (4, 0.25), (6, 0.3), (8, 0.33))}

TARGET_S, DRAFT_S = 0.020, 0.002

_ALL = {
    "schema_version": 2, "name": "sim-test", "hardware": "A100-80G", "dtype": "fp16", "target": "T",
    "models": {"T": dict(arch_dict("vicuna-7b")), "D": dict(arch_dict("llama-68m"))},
    "latency": {m: {"kind": "table", "params": {"n_tokens": [1], "ctx_len": [0], "batch": [1], "seconds": [[[s]]]}}
                for m, s in (("T", 0.020), ("D", 0.002), ("G", 0.002), ("KA", 0.0005), ("CM", 0.001), ("CH", 0.001))},
    "drafters": {
        "D": {"kind": "draft_model", "model": "D"},
        "G": {"kind": "glide", "model": "G"},
        "K": {"kind": "kangaroo", "exit_layer": 2, "adapter_model": "KA"},
        "C": {"kind": "coral", "model": "CM", "head_model": "CH"},
        "lookahead": {"kind": "lookahead"},
        "prompt_lookup": {"kind": "prompt_lookup"},
    },
    "acceptance": {
        "D": {"alpha": 0.7, "markov": {"p_aa": 0.85, "p_ra": 0.4},
              "alpha_at_k": {"1": 0.7, "2": 0.8, "4": 0.88, "8": 0.92},
              "alpha_at_k_without_replacement": {"1": 0.7, "2": 0.82, "4": 0.9},
              "conf_bins": {"freq": FREQ, "topk_hit": TOPK}},
        "G": {"alpha": 0.75, "conf_bins": {"freq": FREQ, "topk_hit": TOPK}},
        "K": {"alpha": 0.6, "conf_bins": {"freq": FREQ, "topk_hit": TOPK}},
        "C": {"alpha": 0.8, "alpha_by_position": [0.85, 0.8, 0.75, 0.7], "router_recall": {"16/2": 0.95}},
        "lookahead": {"alpha": 0.5, "lookahead": {"alpha": 0.5, "f": 2.0}},
        "prompt_lookup": {"alpha": 0.4, "prompt_lookup": {"hit": 0.8, "decay": 0.6, "alpha": 0.4, "alpha_next": 0.75,
                                                           "rho": 0.9, "sigma": 0.1}},
    },
}

for _entry in _ALL["acceptance"].values():       # every entry states the temperature it was measured at
    _entry["temperature"] = 0.0

FIXED = {"T": FixedLatency(TARGET_S), "D": FixedLatency(DRAFT_S), "G": FixedLatency(DRAFT_S),
         "KA": FixedLatency(0.0005), "CM": FixedLatency(0.001), "CH": FixedLatency(0.001)}

CASES = [  # (method, config): every method of the catalogue, with its variants
    ("ar", {}), ("sd", {"gamma": 4}), ("sd", {"gamma": 3, "acceptance_model": "markov"}),
    ("mcsd", {"k": "4x2x1"}), ("mcsd", {"k": "2x2", "replacement": False}),
    ("cape", {"gamma": 5, "bins": [4, 4, 4, 2, 2, 2, 1, 1, 1, 1, 1]}),
    ("glide", {"gamma": 5}), ("glide", {"gamma": 4, "bins": [4, 4, 2, 2, 2, 1, 1, 1, 1, 1, 1]}),
    ("lookahead", {"W": 5, "N": 4, "G": 5}), ("kangaroo", {"gamma": 6, "eta": 0.6}),
    ("kangaroo", {"gamma": 4, "eta": 0.0}), ("coral", {"gamma": 4}),
    ("coral", {"gamma": 4, "groups": 16, "top_n": 2}), ("prompt_lookup", {"gamma": 4, "n_min": 1, "n_max": 3}),
]


def profile_dict() -> dict:
    return copy.deepcopy(_ALL)


def roofline_profile(hardware: str = "A100-80G") -> dict:
    """Vicuna-7B + LLaMA-68M with roofline latency on datasheet figures (calibrate.latency)."""
    def lat(name, overhead):
        return {"kind": "roofline", "params": {"hardware": hardware, "dtype": "fp16", "arch": arch_dict(name),
                                               "bw_eff": 0.8, "flops_eff": 0.6, "overhead_s": overhead}}
    return {
        "schema_version": 2, "name": "vicuna-7b roofline", "hardware": hardware, "dtype": "fp16",
        "target": "vicuna-7b",
        "models": {"vicuna-7b": arch_dict("vicuna-7b"), "llama-68m": arch_dict("llama-68m")},
        "latency": {"vicuna-7b": lat("vicuna-7b", 0.004), "llama-68m": lat("llama-68m", 0.0015)},
        "drafters": {"llama-68m": {"kind": "draft_model", "model": "llama-68m"}},
        "acceptance": {"llama-68m": {"alpha": 0.7, "temperature": 0.0}},
    }


class LinearLatency:
    """A test latency that grows with context, tokens and batch, so timing bugs show up."""

    def __init__(self, base: float, per_ctx: float = 1e-6, per_token: float = 1e-4, per_seq: float = 1e-4):
        self.base, self.per_ctx, self.per_token, self.per_seq = base, per_ctx, per_token, per_seq

    def predict(self, n_tokens, ctx_len, batch=1):
        n, c, b = (np.asarray(v, dtype=float) for v in (n_tokens, ctx_len, batch))
        return self.base + self.per_ctx * c * b + self.per_token * n * b + self.per_seq * b


LINEAR = {m: LinearLatency(f.seconds) for m, f in FIXED.items()}
