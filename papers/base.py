"""What every paper's Profile builder shares: the five hardware terms of one latency model of the
paper's GPU with the range each can physically take (`hardware_params`; the pricing itself is
`calibrate.terms.model_latency`), the Profile with its provenance (`make_profile`), the context a
paper's workload prices latency at. (The project's own eager forward on an H100, the shared
measurements h100-2026-11-23/graph_grid.jsonl, takes 1.25 ms for LLaMA-68M's 2 layers and 5.85 ms for
LLaMA-160M's 12: 0.46 ms per layer of launches, far above their device time.)
"""
from __future__ import annotations


from papers.calibration import Param
from profiles.profile import Profile
from common.rundir import git_commit
from costmodel.hardware import get_hardware

DTYPE = "fp16"
CTX_REF = 256          # context where a paper states none (and where one-token latencies are matched)


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


def workload_ctx(entry: dict[str, float] | None) -> float:
    """Mean context of a decode step (as Profile.workload_ctx): prompt + half the new tokens."""
    return CTX_REF if not entry else entry["prompt_tokens"] + entry["new_tokens"] / 2.0


def make_profile(name, hardware, target, models, latency, drafters, acceptance, sources, assumptions,
                 engine: dict | None = None, workloads: dict | None = None) -> Profile:
    hardware = get_hardware(hardware).name
    return Profile.build(name=name, hardware=hardware, dtype=DTYPE, target=target, models=models,
                         latency={k: v.to_dict() for k, v in latency.items()}, drafters=drafters, acceptance=acceptance,
                         provenance={"built_by": "python -m experiments.paper_profiles", "commit": git_commit(),
                                     "sources": sources, "assumptions": assumptions, "traces": []},
                         engine=dict(engine or {}), workload=dict(workloads or {}), machine={"datasheet": hardware})


def slug(text: str) -> str:
    return text.lower().replace(" ", "-").replace(".", "").replace("/", "-")
