"""The deployment answer for vLLM on one H100 (our calibration): per dataset, the configuration to run at
each batch size as vLLM takes it, the request rate one GPU sustains within a TPOT SLO, the GPUs a
target rate needs and the cost per million generated tokens, with and without speculation.

- Schedule: at each simulated batch size the method and k of the highest predicted speedup, or none
  where nothing beats plain decoding; written as vLLM's `--speculative-config` with
  `num_speculative_tokens_per_batch_size` ([start_bs, end_bs, K], K = 0: do not speculate; vLLM runs
  one method, so the file holds the method that wins at most batch sizes and K = 0 where it loses).
- Capacity: a closed loop at concurrency B is the load B clients keep; its sustained request rate
  (requests finished while others still waited, over that time) and the median TPOT of those requests
  give, at the largest B whose median TPOT meets the SLO, the rate one GPU sustains within it
  (Little's law: B in flight at that rate); where that is the largest batch simulated the SLO still holds
  there and the rate is a lower bound (`slo_binds` false). GPUs for a target rate: ceil(target / that
  rate). Cost: the GPU-hour price over the generated tokens one GPU produces in an hour at that point.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from calibrate.vllm import facts
from common.errors import InputError
from costmodel.price import DEFAULT_GPU_HOUR_PRICE, check_gpu_hour_price, usd_per_million_tokens
from sweep.export import vllm_schedule
from methods.engines import VLLM_SCHEDULE


@dataclass(frozen=True)
class DeployOptions:
    slo_tpot_p50_ms: float = 20.0
    target_rate: float = 10.0            # requests/s
    gpu_hour_price: float = DEFAULT_GPU_HOUR_PRICE      # USD

    def __post_init__(self):
        check_gpu_hour_price(self.gpu_hour_price)
        if not self.slo_tpot_p50_ms > 0:
            raise InputError(f"--slo-tpot-ms must be > 0, got {self.slo_tpot_p50_ms!r}")
        if not self.target_rate > 0:
            raise InputError(f"--target-rate must be > 0 requests/s, got {self.target_rate!r}")


def best_per_batch(predictions: pd.DataFrame) -> pd.DataFrame:
    """Per (dataset, batch) of our calibration: the best method and k, its speedup (k 0: none pays)."""
    ours = predictions[predictions["calibration"] == "ours"]
    best = ours.loc[ours.groupby(["dataset", "batch"])["predicted_speedup"].idxmax()]
    best = best[["dataset", "batch", "method", "k", "predicted_speedup"]].reset_index(drop=True)
    loses = best["predicted_speedup"] <= 1.0
    best.loc[loses, ["method", "k"]] = ["none", 0]
    return best


def speculative_config(best: pd.DataFrame) -> dict:
    """vLLM's --speculative-config of one dataset's schedule (module docstring)."""
    paying = best[best["method"] != "none"]
    method = paying["method"].mode().iloc[0] if len(paying) else "none"
    if method == "none":
        return {"speculative_config": None, "note": "plain decoding wins at every batch size priced"}
    pairs = [(int(b), int(k) if m == method else 0) for b, m, k in zip(best["batch"], best["method"], best["k"])]
    schedule = vllm_schedule(pairs)
    config = ({"method": "eagle3", "model": facts.EAGLE_CHECKPOINT} if method == "eagle" else
              {"method": "ngram", "prompt_lookup_min": facts.NGRAM_WINDOW[0], "prompt_lookup_max": facts.NGRAM_WINDOW[1]})
    config["num_speculative_tokens"] = max(k for _, _, k in schedule)
    config["num_speculative_tokens_per_batch_size"] = schedule
    return {"speculative_config": config, "requires": VLLM_SCHEDULE,
            "note": f"K = 0 where {method} does not pay or another method wins; a batch between two priced sizes "
                    "takes the smaller one's K"}


def operating_point(loops: pd.DataFrame, slo_ms: float) -> pd.Series | None:
    """The largest batch whose loaded median TPOT meets the SLO (None: not even batch 1)."""
    meets = loops[loops["tpot_loaded_p50_ms"].fillna(loops["tpot_p50_ms"]) <= slo_ms]
    return None if meets.empty else meets.loc[meets["batch"].idxmax()]


def capacity(loops: pd.DataFrame, best: pd.DataFrame, options: DeployOptions) -> pd.DataFrame:
    """Per dataset, plain decoding and the speculative schedule: the rate within the SLO, GPUs for the
    target rate, cost per million tokens (module docstring)."""
    ours = loops[loops["calibration"] == "ours"]
    rows = []
    for dataset, group in ours.groupby("dataset", sort=False):
        plain = group[group["proposer"] == "plain"]
        chosen = best[best["dataset"] == dataset].set_index("batch")
        picked = [group[(group["batch"] == b) & (group["proposer"] == r["method"]) & (group["k"] == r["k"])]
                  if r["method"] != "none" else plain[plain["batch"] == b] for b, r in chosen.iterrows()]
        for name, frame in (("plain decoding", plain), ("speculation (schedule)", pd.concat(picked))):
            point = operating_point(frame, options.slo_tpot_p50_ms)
            if point is None:
                rows.append({"dataset": dataset, "serving": name, "within_slo_to": None})
                continue
            rate = float(point["requests_per_s"])
            token_rate = rate * float(point["tokens_per_request"])
            rows.append({"dataset": dataset, "serving": name, "within_slo_to": int(point["batch"]),
                         "slo_binds": bool(point["batch"] < frame["batch"].max()),
                         "config": "plain" if point["proposer"] == "plain" else f"{point['method']} k={int(point['k'])}",
                         "tpot_p50_ms": float(point["tpot_loaded_p50_ms"]), "requests_per_s": rate,
                         "gpus_for_target": math.ceil(options.target_rate / rate) if rate > 0 else None,
                         "usd_per_million_tokens": usd_per_million_tokens(1, token_rate, options.gpu_hour_price)})
    return pd.DataFrame(rows)
