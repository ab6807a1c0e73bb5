"""The shape of a deployment in capacity planning: the GPUs of one replica (tensor parallelism, the
one model of `simulator.costs.Parallelism`), its batch cap, and which shape serves the target load
on the fewest GPUs, with what that costs per million output tokens (`costmodel.price`)."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from costmodel.price import usd_per_million_tokens
from methods import BASELINE
from simulator.costs import Parallelism
from simulator.memory import memory_of
from simulator.methods import build_step_model

KV_CAP = "KV memory"          # the batch cap is what fits in the replica's KV cache
GIVEN_CAP = "--max-batch"     # the batch cap was given
MEASURED_CAP = "measured batches"   # the Profile's latency tables stop there (no batch is extrapolated)


def check_tp(profile, tps) -> None:
    """InputError naming the model and its head counts for a TP degree that splits a head."""
    arch = profile.arch()
    for tp in tps:
        Parallelism(tp=tp).check_heads(arch, profile.target, what="--tp")


def batch_cap(profile, method: str, config: dict, load, tp: int, seed: int) -> tuple[int, str]:
    """(running sequences a replica of `tp` GPUs admits, where that cap comes from): `load.max_batch`
    when given, else as many sequences of the workload's mean prompt + mean output (+ a step's
    reserved slots) as fit in the replica's KV memory; (0, KV_CAP) when the weights leave none; at
    most the largest batch the latency tables of the models it runs measured (`Profile.max_batch`,
    MEASURED_CAP)."""
    step = build_step_model(profile, method, config)
    memory = memory_of(profile, step.drafter, Parallelism(tp=tp))
    if not memory.fits:
        return 0, KV_CAP
    if load.max_batch:
        cap, source = int(load.max_batch), GIVEN_CAP
    else:
        workload = load.workload(1.0)
        per_sequence = workload.mean_prompt(seed) + workload.mean_output(seed) + step.reserve_tokens
        cap, source = max(1, int(memory.capacity_tokens // per_sequence)), KV_CAP
    measured = profile.max_batch(step.priced_models)
    return (int(measured), MEASURED_CAP) if cap > measured else (cap, source)


def fits_nowhere(profile, tps) -> str:
    """The memory arithmetic of plain decoding on the largest TP tried (for the error where nothing fits)."""
    return memory_of(profile, None, Parallelism(tp=max(tps))).describe()


def cheapest(per_tp: pd.DataFrame) -> pd.DataFrame:
    """Per method, the row (TP, replicas) that meets the SLO at the target on the fewest GPUs (ties:
    the smaller TP); a method no shape served keeps its highest rate per GPU, GPUs n/a."""
    rows = []
    for _, group in per_tp.groupby("method", sort=False):
        served = group[group["gpus"].notna()]
        rows.append(served.sort_values(["gpus", "tp"]).iloc[0] if len(served) else
                    group.sort_values("rate_per_gpu", ascending=False).iloc[0])
    return pd.DataFrame(rows).reset_index(drop=True)


def add_costs(best: pd.DataFrame, target_rate: float, mean_output: float, gpu_hour_price: float) -> pd.DataFrame:
    """USD per million output tokens at the target (its GPUs, the target's output tokens/s) and at each
    row's max load (one replica's GPUs at its highest rate within the SLO), and the saving against
    plain decoding at the target."""
    target_tok_s = target_rate * mean_output
    best = best.copy()
    best["usd_per_m_tok"] = [usd_per_million_tokens(g, target_tok_s, gpu_hour_price) if g == g else np.nan
                             for g in best["gpus"]]
    best["usd_per_m_tok_at_max"] = [usd_per_million_tokens(tp, rate * mean_output, gpu_hour_price)
                                    for tp, rate in zip(best["tp"], best["max_rate"])]
    plain = best.loc[best["method"] == BASELINE, "usd_per_m_tok"]
    base = float(plain.iloc[0]) if len(plain) else math.nan
    best["saving"] = 1.0 - best["usd_per_m_tok"] / base
    return best
