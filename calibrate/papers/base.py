"""What every paper's Profile builder shares: roofline latency models on the paper's GPU, the
Profile with its provenance, the context a paper's workload prices latency at.

One latency model per (hardware, engine) prices every model a paper ran, target or drafter, from its
architecture (`model_latency`): the device's time (bytes over bandwidth x bw_eff, FLOPs over peak x
flops_eff) or the host's time to issue the forward's kernels (launch_s + launch_per_layer_s x
layers), whichever is longer, plus work that does not overlap (overhead_s). A drafter's cost then
follows from its parameters and layers on the same hardware: a 2-layer drafter is launch-bound, a
33B target bandwidth-bound, and neither is a free number. (The project's own eager forward on an H100,
the shared measurements h100-2026-11-23/graph_grid.jsonl, takes 1.25 ms for LLaMA-68M's 2 layers and
5.85 ms for LLaMA-160M's 12: 0.46 ms per layer of launches, far above their device time.) `hardware_params` states these five terms
with the range each can physically take; the fitted values are kept in every latency model's `fit`
(`HARDWARE_FIT`), so `calibrate.transfer` prices another architecture on the same hardware.
"""
from __future__ import annotations

from typing import Any


from profiles.latency import RooflineLatency
from calibrate.paper_fit import Param
from profiles.profile import Profile
from common.rundir import git_commit
from costmodel.hardware import get_hardware

DTYPE = "fp16"
CTX_REF = 256          # context where a paper states none (and where one-token latencies are matched)


HARDWARE_FIT = "hardware_fit"     # key of a latency model's fit holding the hardware terms it was priced with
HARDWARE_TERMS = ("bw_eff", "flops_eff", "launch_s", "launch_per_layer_s", "overhead_s")


def hardware_params(hardware: str, prior: dict[str, float], prefix: str = "",
                    fixed: tuple[str, ...] = ()) -> tuple[Param, ...]:
    """The five terms of one (hardware, engine) latency model, each bounded by what is physically
    possible: an efficiency is at most 1 (the datasheet is the ceiling), a host launches one decoder
    layer's ~30 kernels in well under 1.5 ms, and nothing a forward does beside its kernels takes
    longer than a few milliseconds. Terms named in `fixed` are left out (the paper model holds them,
    `PaperModel.fixed`)."""
    hw = get_hardware(hardware).name
    return tuple(p for p in _hardware_params(hw, prior, prefix) if p.name[len(prefix):] not in fixed)


def _hardware_params(hw: str, prior: dict[str, float], prefix: str) -> tuple[Param, ...]:
    return (
        Param(f"{prefix}bw_eff", prior["bw_eff"], 0.3, 1.0, 0.1, unit="", what=f"{hw} bandwidth efficiency",
              why="the datasheet bandwidth is the ceiling"),
        Param(f"{prefix}flops_eff", prior["flops_eff"], 0.05, 1.0, 0.1, unit="", what=f"{hw} compute efficiency",
              why="the datasheet peak is the ceiling"),
        Param(f"{prefix}launch_s", prior["launch_s"], 0.0, 0.01, 1e-3,
              what=f"host time to issue a forward's embedding, head and sampling kernels on {hw}",
              why="a few dozen kernels at 10-100 us each"),
        Param(f"{prefix}launch_per_layer_s", prior["launch_per_layer_s"], 0.0, 1.5e-3, 2e-4,
              what=f"host time to issue one decoder layer's kernels on {hw}",
              why="an eager layer issues ~30 kernels at 10-50 us each"),
        Param(f"{prefix}overhead_s", prior["overhead_s"], 0.0, 5e-3, 5e-4,
              what=f"per-forward work on {hw} that does not overlap the kernels (synchronisation, sampling)",
              why="no more than a small forward's own time"),
    )


def hardware_terms(values: dict[str, float], prefix: str = "") -> dict[str, float]:
    return {k: float(values[f"{prefix}{k}"]) for k in HARDWARE_TERMS}


def launch_layers(arch: dict[str, Any]) -> float:
    """Blocks whose kernels a forward issues one by one: the decoder layers and any attention block
    beside them (an adapter's, GLIDE's cross-attention)."""
    return float(arch["n_layers"]) + float(arch.get("extra_kv_layers", 0)) + float(arch.get("cross_kv_layers", 0))


def model_latency(arch: dict[str, Any], hardware: str, terms: dict[str, float], name: str, how: str) -> RooflineLatency:
    """`arch` on `hardware` priced by the hardware terms (module docstring), which its fit records."""
    launch = terms["launch_s"] + terms["launch_per_layer_s"] * launch_layers(arch)
    return RooflineLatency(arch=arch, hardware=get_hardware(hardware).name, dtype=DTYPE, bw_eff=terms["bw_eff"],
                           flops_eff=terms["flops_eff"], overhead_s=terms["overhead_s"], launch_s=launch,
                           fit={"method": "paper", "how": how, HARDWARE_FIT: dict(terms)}, name=name)


def workload_ctx(entry: dict[str, float] | None) -> float:
    """Mean context of a decode step (as Profile.workload_ctx): prompt + half the new tokens."""
    return CTX_REF if not entry else entry["prompt_tokens"] + entry["new_tokens"] / 2.0


def make_profile(name, hardware, target, models, latency, drafters, acceptance, sources, assumptions,
                 engine: dict | None = None, workloads: dict | None = None) -> Profile:
    hardware = get_hardware(hardware).name
    return Profile.build(name=name, hardware=hardware, dtype=DTYPE, target=target, models=models,
                         latency={k: v.to_dict() for k, v in latency.items()}, drafters=drafters, acceptance=acceptance,
                         provenance={"built_by": "python -m calibrate.paper_profiles", "commit": git_commit(),
                                     "sources": sources, "assumptions": assumptions, "traces": []},
                         engine=dict(engine or {}), workload=dict(workloads or {}), machine={"datasheet": hardware})


def slug(text: str) -> str:
    return text.lower().replace(" ", "-").replace(".", "").replace("/", "-")
