"""Kangaroo (Liu et al., 2024) on V100: Vicuna 7B/13B with the early-exit self-drafter.

Constraining numbers: Table 1's walltime speedups with their compression rates CR (every task of
the 7B and 13B Kangaroo rows) and Sec. 1's one absolute number (Vicuna-33B on four V100 at 7
tokens/s; pipeline, one GPU at a time). One V100 latency model prices the targets and the
self-drafter (its exit layers, the adapter and the LM head) from their architectures
(`calibrate.papers.base.model_latency`); fitted besides: the engine's work per step (plain
decoding included) and a drafting step's own work (the early-exit check, acceptance, rollback).
"""
from __future__ import annotations

import numpy as np

from calibrate.paper_fit import Cell, PaperModel, Param, speedup_cell
from calibrate.papers.base import (CTX_REF, hardware_params, hardware_terms, make_profile, model_latency, slug)
from costmodel import papers
from costmodel.leviathan import alpha_from_expected_tokens
from costmodel.params import arch_dict, drafter_arch

TARGETS = {"vicuna-7b": "7B", "vicuna-13b": "13B"}
V100_PRIOR = {"bw_eff": 0.6, "flops_eff": 0.5, "launch_s": 3e-3, "launch_per_layer_s": 5e-4, "overhead_s": 0.0}
PARAMS = hardware_params("V100", V100_PRIOR) + (
    Param("step_overhead_s", 0.0, 0.0, 0.02, 1e-3, what="the engine's work per step beside its forwards (every "
          "step, plain decoding included)", why="half a 7B forward on a V100 (~30 ms)"),
    Param("speculation_s", 0.0, 0.0, 0.02, 1e-3, what="a drafting step's own work beside plain decoding's "
          "(early-exit check, acceptance, cache rollback)", why="half a 7B forward on a V100"),
)
SEC1_TOKENS_PER_S = 7.0         # Sec. 1: Vicuna-33B on four V100


def _settings() -> tuple[int, float]:
    return int(papers.value("kangaroo", "text", "setting", "gamma")), papers.value("kangaroo", "text", "setting", "eta")


def _tasks(row: dict) -> list[str]:
    return sorted({c.rsplit(" ", 1)[0] for c in row if c.endswith(" CR")})


def build(values: dict[str, float]) -> list:
    t1 = papers.table("kangaroo", "1")
    gamma, eta = _settings()
    terms = hardware_terms(values)
    how = ("V100 terms fitted to Kangaroo Table 1 speedups and Sec. 1's Vicuna-33B tokens/s (calibrate.paper_fit): "
           + ", ".join(f"{k} {v:.4g}" for k, v in terms.items()))
    out = []
    for arch_name, label in TARGETS.items():
        row = t1[f"{label} / Kangaroo"]
        exit_layer = int(papers.value("kangaroo", "text", f"Vicuna-{label}", "exit layer"))
        target_arch = arch_dict(arch_name)
        target = model_latency(target_arch, "V100", terms, arch_name, how)
        d_arch, d_name = drafter_arch("kangaroo", target_arch, exit_layer=exit_layer), f"kangaroo-{arch_name}"
        drafter = model_latency(d_arch, "V100", terms, d_name, how)
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
                                 "Kangaroo Sec. 1 (Vicuna-33B tokens/s on V100: latency fit)",
                                 "Kangaroo Sec. 4.2 (exit layer, gamma, eta)"],
            assumptions=[f"per-token alpha inverted from CR with the chain formula at gamma {gamma}, ignoring the "
                         f"eta = {eta} early exit (which lowers CR for a given alpha): a lower bound on alpha",
                         "drafted steps per cycle taken as min(CR, gamma) where a published speedup is priced "
                         "(the paper gives no draft-step count under eta)",
                         "Vicuna-33B on four V100 (Sec. 1) runs its layers one GPU at a time: one GPU's bandwidth",
                         "Spec-Bench's prompt lengths are not given in the paper: latency priced at the sweep's "
                         "default context"],
            engine={"pooled": {"overhead_s": values["step_overhead_s"], "speculation_s": values["speculation_s"]}}))
    return out


def _sec1_cell() -> Cell:
    def predict_one(profiles):
        profile = profiles["kangaroo-vicuna-7b-v100"]          # every Kangaroo Profile holds the same V100 terms
        terms = profile.latency_model(profile.target).fit["hardware_fit"]
        model = model_latency(arch_dict("vicuna-33b"), "V100", terms, "vicuna-33b", "")
        return float(model.predict(1, CTX_REF))
    return Cell("kangaroo", "text", "Vicuna-33B on four V100", "seconds per token", 1.0 / SEC1_TOKENS_PER_S,
                predict_one, "seconds", "Sec. 1: seven tokens per second; pipeline, one GPU at a time", "33B")


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
                                    note=f"drafted steps min(CR, gamma) = {steps:g}", size=label))
    out.append(_sec1_cell())
    return out


MODEL = PaperModel("kangaroo", PARAMS, build, cells)
