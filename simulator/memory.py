"""KV-cache memory of one replica, in tokens, and the arithmetic behind it in words.

Bytes per token come from the architecture (`costmodel.params.kv_bytes_per_token`, GQA included):
the target's, plus what a co-located drafter caches of its own (`costmodel.params.own_kv_bytes_per_token`:
Kangaroo's shallow layers write the target's cache, only its adapter layer is its own). The weights of
every model on the replica's GPUs come off first, each stored once (`costmodel.params.own_params`: a
drafter's borrowed layers and embeddings are the target's), then a reserve fraction for activations
and the allocator. A speculation step reserves slots for all its query tokens and releases the
rejected ones after verification.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from costmodel.hardware import dtype_bytes, get_hardware
from costmodel.params import kv_bytes_per_token, own_kv_bytes_per_token, own_params, total_params
from simulator.costs import Parallelism
from simulator.methods import StepModel
from common.errors import InputError

DRAFTER_MODEL_KEYS = ("model", "adapter_model", "head_model")     # a drafter entry's models with weights


@dataclass
class KVMemory:
    capacity_tokens: int     # KV tokens (target + co-located drafter) that fit on one replica (0: none)
    bytes_per_token: float
    weight_bytes: float
    total_bytes: float
    usable_bytes: float = 0.0                                   # total less the reserve
    weights: dict[str, float] = field(default_factory=dict)     # model -> bytes it stores
    gpus: int = 1
    hardware: str = ""

    @property
    def fits(self) -> bool:
        """Whether any KV memory is left once the weights are loaded."""
        return self.capacity_tokens >= 1

    def describe(self) -> str:
        """The arithmetic in one line, e.g. 'weights 65.2 GB (llama-33b 65.1 + llama-68m 0.1) of 43.2 GB
        usable on 1 x 48 GB A6000 (10% reserved): no KV memory left'."""
        parts = " + ".join(f"{name} {b / 1e9:.1f}" for name, b in self.weights.items())
        gpus = f"{self.gpus} x {self.total_bytes / self.gpus / 1e9:.0f} GB {self.hardware}".rstrip()
        reserve = 1.0 - self.usable_bytes / self.total_bytes if self.total_bytes else 0.0
        head = (f"weights {self.weight_bytes / 1e9:.1f} GB" + (f" ({parts})" if len(self.weights) > 1 else "")
                + f" of {self.usable_bytes / 1e9:.1f} GB usable on {gpus} ({reserve:.0%} reserved)")
        if not self.fits:
            return head + ": no KV memory left"
        return (f"{head}: {(self.usable_bytes - self.weight_bytes) / 1e9:.1f} GB for the KV cache, "
                f"{self.capacity_tokens:,} tokens of {self.bytes_per_token / 1e6:.2f} MB")


def drafter_models(profile, drafter: str | None) -> list[str]:
    """The models with weights of a Profile drafter entry, other than the target, each named once."""
    spec = profile.drafter(drafter) if drafter else None
    names = [getattr(spec, k) for k in DRAFTER_MODEL_KEYS] if spec is not None else []
    return list(dict.fromkeys(n for n in names if n and n in profile.models and n != profile.target))


def memory_of(profile, drafter: str | None = None, parallel: Parallelism | None = None,
              gpu_mem_gb: float | None = None, reserve_fraction: float = 0.1) -> KVMemory:
    """KV capacity of one replica (tp x pp GPUs; branch-parallel GPUs each hold a full copy) serving
    the target with `drafter` co-located (None: plain decoding); capacity 0 when the weights leave none."""
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
    target = profile.arch()
    per_token = kv_bytes_per_token(target, b)
    weights = {profile.target: total_params(target) * b}
    if not parallel.draft_on_own_gpu:
        for name in drafter_models(profile, drafter):
            draft = profile.arch(name)
            weights[name] = own_params(draft) * b
            per_token += own_kv_bytes_per_token(draft, b)
    gpus = parallel.tp * parallel.pp
    total = gpus * per_gpu
    usable = total * (1.0 - reserve_fraction)
    free = usable - sum(weights.values())
    capacity = int(free // per_token) if free > per_token else 0
    return KVMemory(capacity, per_token, sum(weights.values()), total, usable, weights, gpus,
                    "" if gpu_mem_gb else profile.hardware)


def replica_memory(profile, step: StepModel, parallel: Parallelism | None = None,
                   gpu_mem_gb: float | None = None, reserve_fraction: float = 0.1) -> KVMemory:
    """`memory_of` the step's target and drafter; InputError with the arithmetic when nothing fits."""
    memory = memory_of(profile, step.drafter, parallel, gpu_mem_gb, reserve_fraction)
    if not memory.fits:
        raise InputError(f"does not fit: {memory.describe()}")
    return memory


def static_batch_fits(memory: KVMemory, batch: int, prompt_len: int, output_len: int, step: StepModel) -> bool:
    """A static batch (every sequence kept to the end, as in GLIDE Table 4): does it fit?"""
    return batch * (prompt_len + output_len + step.reserve_tokens) <= memory.capacity_tokens
