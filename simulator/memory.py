"""KV-cache memory of one replica, in tokens.

Bytes per token come from the architecture (`costmodel.params.kv_bytes_per_token`, GQA included):
the target's, plus a co-located drafter's own cache. The weights of every model on the replica's
GPUs come off first (`costmodel.params.total_params`), then a reserve fraction for activations and
the allocator. A speculation step reserves slots for all its query tokens and releases the
rejected ones after verification.
"""
from __future__ import annotations

from dataclasses import dataclass

from costmodel.hardware import dtype_bytes, get_hardware
from costmodel.params import as_arch, kv_bytes_per_token, total_params
from simulator.costs import Parallelism
from simulator.methods import StepModel
from common.errors import InputError


@dataclass
class KVMemory:
    capacity_tokens: int     # KV tokens (target + co-located drafter) that fit on one replica
    bytes_per_token: float
    weight_bytes: float
    total_bytes: float


def replica_memory(profile, step: StepModel, parallel: Parallelism | None = None,
                   gpu_mem_gb: float | None = None, reserve_fraction: float = 0.1) -> KVMemory:
    """KV capacity of one replica (tp x pp GPUs; branch-parallel GPUs each hold a full copy)."""
    parallel = parallel or Parallelism()
    if not 0 <= reserve_fraction < 1:
        raise InputError(f"reserve_fraction must lie in [0, 1), got {reserve_fraction}")
    try:
        b = dtype_bytes(profile.dtype)
        per_gpu = gpu_mem_gb * 1e9 if gpu_mem_gb else get_hardware(profile.hardware).memory
    except ValueError as exc:
        raise InputError(str(exc)) from None
    if not per_gpu > 0:
        raise InputError(f"GPU memory must be > 0 GB, got {gpu_mem_gb!r}")
    target = as_arch(profile.models[step.target], step.target)
    per_token = kv_bytes_per_token(target, b)
    weights = total_params(target) * b
    if step.drafter and not parallel.draft_on_own_gpu:
        name = step.draft_kv_model or profile.drafters.get(step.drafter, {}).get("model")
        if name and name in profile.models and name != step.target:
            draft = as_arch(profile.models[name], name)
            weights += total_params(draft) * b
            if step.draft_kv_model:
                per_token += kv_bytes_per_token(draft, b)
    total = parallel.tp * parallel.pp * per_gpu
    free = total * (1.0 - reserve_fraction) - weights
    if free <= per_token:
        raise InputError(f"the weights ({weights / 1e9:.1f} GB) leave no KV memory on {parallel.tp * parallel.pp} "
                         f"GPU(s) of {per_gpu / 1e9:.0f} GB")
    return KVMemory(int(free // per_token), per_token, weights, total)


def static_batch_fits(memory: KVMemory, batch: int, prompt_len: int, output_len: int, step: StepModel) -> bool:
    """A static batch (every sequence kept to the end, as in GLIDE Table 4): does it fit?"""
    return batch * (prompt_len + output_len + step.reserve_tokens) <= memory.capacity_tokens
