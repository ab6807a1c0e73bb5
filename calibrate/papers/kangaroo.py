"""Kangaroo (Liu et al., 2024) on V100: Vicuna 7B/13B with the early-exit self-drafter.

Constraining numbers: Table 1's walltime speedups with their compression rates CR (every task of
the 7B and 13B Kangaroo rows). The V100 bandwidth efficiency comes from Sec. 1's one absolute
number (Vicuna-33B on four V100 at 7 tokens/s; pipeline, one GPU's bandwidth at a time). Fitted:
the self-drafter's fixed overhead per draft forward (adapter kernels, early-exit check) and a
per-step overhead of the engine (every step, plain decoding included).
"""
from __future__ import annotations

import numpy as np

from calibrate.paper_fit import Cell, PaperModel, Param, speedup_cell
from calibrate.papers.base import CTX_REF, DTYPE, make_profile, roofline, slug
from costmodel import papers
from costmodel.hardware import get_hardware
from costmodel.latency import ForwardShape
from costmodel.leviathan import alpha_from_expected_tokens
from costmodel.params import arch_dict, drafter_arch

TARGETS = {"vicuna-7b": "7B", "vicuna-13b": "13B"}
PARAMS = (
    Param("draft_overhead_s", 5e-3, 0.0, 0.05, 5e-3, what="fixed overhead of a self-draft forward"),
    Param("step_overhead_s", 0.0, 0.0, 0.1, 0.01, what="per-step overhead of the engine (every step)"),
)


def _settings() -> tuple[int, float]:
    return int(papers.value("kangaroo", "text", "setting", "gamma")), papers.value("kangaroo", "text", "setting", "eta")


def v100_bw_eff() -> float:
    """"Vicuna-33B on four V100 yields seven tokens per second" (Sec. 1), one GPU's bandwidth at a time."""
    return ForwardShape.of("vicuna-33b", DTYPE).weight_bytes / get_hardware("V100").bandwidth / (1.0 / 7.0)


def _tasks(row: dict) -> list[str]:
    return sorted({c.rsplit(" ", 1)[0] for c in row if c.endswith(" CR")})


def build(values: dict[str, float]) -> list:
    t1 = papers.table("kangaroo", "1")
    gamma, eta = _settings()
    bw_eff = v100_bw_eff()
    out = []
    for arch_name, label in TARGETS.items():
        row = t1[f"{label} / Kangaroo"]
        exit_layer = int(papers.value("kangaroo", "text", f"Vicuna-{label}", "exit layer"))
        target_arch = arch_dict(arch_name)
        target = roofline(target_arch, "V100", f"bw_eff {bw_eff:.3f} from Kangaroo Sec. 1 (Vicuna-33B on four V100 "
                          "at 7 tokens/s, one GPU's bandwidth at a time); no overhead term; flops_eff 0.5 assumed",
                          arch_name, bw_eff=bw_eff)
        d_arch, d_name = drafter_arch("kangaroo", target_arch, exit_layer=exit_layer), f"kangaroo-{arch_name}"
        drafter = roofline(d_arch, "V100", f"the target's efficiencies + {values['draft_overhead_s'] * 1e3:.3f} ms per "
                           "forward fitted to Kangaroo Table 1 speedups (calibrate.paper_fit)", d_name,
                           bw_eff=bw_eff, overhead_s=values["draft_overhead_s"])
        acceptance = {}
        for task in _tasks(row):
            cr = row[f"{task} CR"]
            acceptance[f"kangaroo/{slug(task)}"] = {
                "drafter": "kangaroo", "temperature": 0.0, "dataset": f"spec-bench-{slug(task)}",
                "alpha": float(alpha_from_expected_tokens(cr, gamma)), "compression_rate": cr, "eta": eta,
                "source": f"Kangaroo Table 1, row {label} / Kangaroo, column {task} CR = {cr}; alpha = chain "
                          f"inverse (1 - a^(g+1)) / (1 - a) = CR at gamma {gamma}"}
        out.append(make_profile(
            f"kangaroo-{arch_name}-v100", "V100", arch_name, {arch_name: target_arch, d_name: d_arch},
            {arch_name: target, d_name: drafter},
            {"kangaroo": {"kind": "kangaroo", "exit_layer": exit_layer, "adapter_model": d_name, "model": d_name}},
            acceptance, sources=["Kangaroo Table 1 (CR; speedup with CR: latency fit)",
                                 "Kangaroo Sec. 1 (Vicuna-33B tokens/s on V100)",
                                 "Kangaroo Sec. 4.2 (exit layer, gamma, eta)"],
            assumptions=[f"per-token alpha inverted from CR with the chain formula at gamma {gamma}, ignoring the "
                         f"eta = {eta} early exit (which lowers CR for a given alpha): a lower bound on alpha",
                         "drafted steps per cycle taken as min(CR, gamma) where a published speedup is priced "
                         "(the paper gives no draft-step count under eta)",
                         "Spec-Bench's prompt lengths are not given in the paper: latency priced at the sweep's "
                         "default context"],
            engine={"pooled": {"overhead_s": values["step_overhead_s"]}}))
    return out


def cells() -> list[Cell]:
    t1 = papers.table("kangaroo", "1")
    gamma, _ = _settings()
    out = []
    for arch_name, label in TARGETS.items():
        row = t1[f"{label} / Kangaroo"]
        exit_layer = int(papers.value("kangaroo", "text", f"Vicuna-{label}", "exit layer"))
        for task in _tasks(row):
            if f"{task} speedup" not in row:
                continue
            cr = row[f"{task} CR"]
            steps = min(cr, gamma)
            reach = np.clip(steps - np.arange(gamma), 0.0, 1.0)
            out.append(speedup_cell("kangaroo", "1", f"{label} / Kangaroo", f"{task} speedup", row[f"{task} speedup"],
                                    cr, f"kangaroo-{arch_name}-v100", "kangaroo",
                                    {"exit_layer": exit_layer, "gamma": gamma, "eta": 0.0}, drafter="kangaroo",
                                    acceptance=f"kangaroo/{slug(task)}", ctx=CTX_REF, reach=reach,
                                    note=f"drafted steps min(CR, gamma) = {steps:g}"))
    return out


MODEL = PaperModel("kangaroo", PARAMS, build, cells)
