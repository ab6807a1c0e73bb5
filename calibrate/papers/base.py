"""What every paper's Profile builder shares: roofline latency models on the paper's GPU, the
Profile with its provenance, the context a paper's workload prices latency at."""
from __future__ import annotations

from typing import Any

import numpy as np

from calibrate.latency import RooflineLatency
from calibrate.profile import Profile
from common.rundir import git_commit
from costmodel.hardware import get_hardware
from costmodel.latency import ForwardShape
from costmodel.params import get_arch

DTYPE = "fp16"
CTX_REF = 256          # context where a paper states none (and where one-token latencies are matched)
DEFAULT_FLOPS_EFF = 0.5
TOKENS_PER_WORD = 4.0 / 3.0     # where a paper states prompt lengths in words (assumption, stated in provenance)


def fit_target_overheads(points: list[tuple[str, float]], hardware: str) -> tuple[float, float, float]:
    """Bounded least squares (relative error) over (architecture, measured seconds of a 1-token
    forward): seconds ~ weight_bytes / (bandwidth * bw_eff) + fixed_s + n_layers * per_layer_s with
    bw_eff in (0, 1] and both overheads >= 0. Returns (bw_eff, fixed_s, per_layer_s)."""
    from scipy.optimize import lsq_linear

    hw = get_hardware(hardware)
    memory = np.array([ForwardShape.of(a, DTYPE).weight_bytes / hw.bandwidth for a, _ in points])
    layers = np.array([get_arch(a).n_layers for a, _ in points], float)
    seconds = np.array([s for _, s in points])
    design = np.column_stack([memory, np.ones_like(memory), layers]) / seconds[:, None]
    solution = lsq_linear(design, np.ones_like(seconds), bounds=([1.0, 0.0, 0.0], [np.inf, np.inf, np.inf]))
    inv_eff, fixed, per_layer = solution.x
    return 1.0 / inv_eff, float(fixed), float(per_layer)


def roofline(arch: dict[str, Any], hardware: str, how: str, name: str, *, bw_eff: float,
             flops_eff: float = DEFAULT_FLOPS_EFF, overhead_s: float = 0.0) -> RooflineLatency:
    return RooflineLatency(arch=arch, hardware=get_hardware(hardware).name, dtype=DTYPE, bw_eff=bw_eff,
                           flops_eff=flops_eff, overhead_s=max(float(overhead_s), 0.0),
                           fit={"method": "paper", "how": how}, name=name)


def timed_roofline(arch: dict[str, Any], like: RooflineLatency, seconds: float, how: str, name: str,
                   ctx: float = CTX_REF) -> RooflineLatency:
    """`like`'s efficiencies, with the fixed overhead that makes one 1-token forward at `ctx` take
    `seconds` (0 where the roofline alone takes longer: then the roofline's time, said in `how`)."""
    bare = roofline(arch, like.hardware, how, name, bw_eff=like.bw_eff, flops_eff=like.flops_eff)
    overhead = seconds - float(bare.predict(1, ctx))
    if overhead < 0:
        how += f"; the roofline alone exceeds {seconds * 1e3:.3f} ms, overhead 0"
    return roofline(arch, like.hardware, how, name, bw_eff=like.bw_eff, flops_eff=like.flops_eff,
                    overhead_s=max(overhead, 0.0))


def workload(prompt_tokens: float, new_tokens: float) -> dict[str, float]:
    return {"prompt_tokens": float(prompt_tokens), "new_tokens": float(new_tokens)}


def workload_ctx(entry: dict[str, float] | None) -> float:
    """Mean context of a decode step (as Profile.workload_ctx): prompt + half the new tokens."""
    return CTX_REF if not entry else entry["prompt_tokens"] + entry["new_tokens"] / 2.0


def make_profile(name, hardware, target, models, latency, drafters, acceptance, sources, assumptions,
                 engine: dict | None = None, workloads: dict | None = None) -> Profile:
    return Profile(name=name, hardware=get_hardware(hardware).name, dtype=DTYPE, target=target, models=models,
                   latency={k: v.to_dict() for k, v in latency.items()}, drafters=drafters, acceptance=acceptance,
                   provenance={"built_by": "python -m calibrate.paper_profiles", "commit": git_commit(),
                               "sources": sources, "assumptions": assumptions, "traces": []},
                   engine=dict(engine or {}), workload=dict(workloads or {}))


def slug(text: str) -> str:
    return text.lower().replace(" ", "-").replace(".", "").replace("/", "-")
