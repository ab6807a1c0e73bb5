"""Kangaroo (Liu et al., 2024): Tables 1 and 2 and the settings quoted in the text.

Table 1 (Spec-Bench, Vicuna, V100): CR is the compression rate (Eq. 1, tokens per target forward),
speedup the walltime ratio. The source copy of Table 1 is partly garbled: cells that cannot be
read unambiguously are stored as NaN with the note "no entry in the paper" (marked "-"), and the
7B Lookahead and 7B Medusa rows are left out entirely for that reason.

How the project prices it (`MODEL`):

Kangaroo (Liu et al., 2024) on V100: Vicuna 7B/13B with the early-exit self-drafter.

Constraining numbers: Table 1's walltime speedups with their compression rates CR (every task of
the 7B and 13B Kangaroo rows) and Sec. 1's one absolute number (Vicuna-33B on four V100 at 7
tokens/s; pipeline, one GPU at a time). One V100 latency model prices the targets and the
self-drafter (its exit layers, the adapter and the LM head) from their architectures
(`calibrate.terms.model_latency`); fitted besides: the engine's work per step (plain
decoding included) and a drafting step's own work (the early-exit check, acceptance, rollback).
"""
from __future__ import annotations

import numpy as np
from papers.calibration import Cell, PaperModel, Param, speedup_cell
from calibrate.terms import hardware_terms, model_latency
from papers.base import CTX_REF, hardware_params, make_profile, slug
from costmodel.leviathan import alpha_from_expected_tokens
from costmodel.params import arch_dict, drafter_arch
from papers.published import grid, scalar
from papers import published


PAPER = "kangaroo"

_COLS = "row | Translation CR | Translation speedup | QA CR | QA speedup | Summarization CR | Summarization speedup | Math CR | Math speedup | RAG CR | RAG speedup | MT Bench CR | MT Bench speedup | Avg speedup"

TABLE_1 = _COLS + """
7B / REST | 1.54 | 1.26 | 1.91 | - | 1.64 | - | 1.53 | 1.23 | 1.92 | - | 2.00 | - | 1.43
7B / Kangaroo | 1.41 | 1.24 | 1.87 | 1.43 | 1.87 | 1.50 | 2.14 | 1.61 | 2.05 | 1.52 | 2.22 | 1.68 | 1.50
13B / REST | 1.53 | 1.07 | 1.92 | 1.41 | 1.66 | - | 1.55 | 1.06 | 1.87 | - | 1.98 | - | 1.23
13B / Medusa | 1.61 | 1.33 | 1.49 | 1.25 | 1.53 | 1.25 | 1.80 | 1.48 | 1.53 | 1.23 | 1.82 | 1.48 | 1.34
13B / Kangaroo | 1.45 | 1.18 | 1.79 | 1.34 | 2.00 | 1.41 | 2.42 | 1.63 | 2.16 | 1.40 | 2.44 | 1.66 | 1.44
"""

TABLE_2 = """
row | params | speedup
Medusa | 591 | 1.41
Kangaroo | 67 | 1.50
Kangaroo + Head | 198 | 1.44
1-Layer Transformer | 202 | 1.37
MLP Only | 165 | 1.22
"""

_UNITS = {c.strip(): ("tokens/forward" if c.strip().endswith("CR") else "x") for c in _COLS.split("|")[1:]}

RECORDS = (
    grid(PAPER, "1", TABLE_1, _UNITS, note="Spec-Bench, Vicuna, NVIDIA V100, gamma=6, eta=0.6")
    + grid(PAPER, "2", TABLE_2, {"params": "M params", "speedup": "x"},
           note="adapter architectures for Vicuna-7B; average Spec-Bench speedup")
    + [
        scalar(PAPER, "text", "Vicuna-7B", "exit layer", 2, "layers", "Sec. 4.2"),
        scalar(PAPER, "text", "Vicuna-13B", "exit layer", 3, "layers", "Sec. 4.2"),
        scalar(PAPER, "text", "setting", "gamma", 6, "tokens", "Sec. 4.2 maximum draft steps"),
        scalar(PAPER, "text", "setting", "eta", 0.6, "", "Sec. 4.2 early-exit confidence threshold"),
    ]
)

published.register(PAPER, RECORDS)

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
    return int(published.value("kangaroo", "text", "setting", "gamma")), published.value("kangaroo", "text", "setting", "eta")


def _tasks(row: dict) -> list[str]:
    return sorted({c.rsplit(" ", 1)[0] for c in row if c.endswith(" CR")})


def build(values: dict[str, float]) -> list:
    t1 = published.table("kangaroo", "1")
    gamma, eta = _settings()
    terms = hardware_terms(values)
    how = ("V100 terms fitted to Kangaroo Table 1 speedups and Sec. 1's Vicuna-33B tokens/s (papers.calibration): "
           + ", ".join(f"{k} {v:.4g}" for k, v in terms.items()))
    out = []
    for arch_name, label in TARGETS.items():
        row = t1[f"{label} / Kangaroo"]
        exit_layer = int(published.value("kangaroo", "text", f"Vicuna-{label}", "exit layer"))
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
    t1 = published.table("kangaroo", "1")
    gamma, _ = _settings()
    out = []
    for arch_name, label in TARGETS.items():
        row = t1[f"{label} / Kangaroo"]
        exit_layer = int(published.value("kangaroo", "text", f"Vicuna-{label}", "exit layer"))
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
