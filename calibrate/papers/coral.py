"""CORAL (2025) on RTX A6000: Llama2-7B/13B, Llama3-8B and Qwen2.5-7B/14B targets, EAGLE-style heads
(EAGLE, EAGLE-2, HASS, CORAL) and CORAL's LM-head router, each drafting EAGLE-2's tree of 60
candidates at depth 6.

Constraining numbers: Table 1's one-token latencies L_t (target) and L_d (head) of Llama2-7B,
Llama3-8B and Qwen2.5-7B, Sec. 4.2.3's Llama3-8B verify of 60 tokens (26 -> 31 ms), Table 2's SR
with tau of every target on one A6000 (Llama3-70B ran on four and is left out; EAGLE's static tree is not
stated, its rows are left out), Table 3's SR with tau
(Llama3-8B, HASS and CSRA at 2 and 4 training steps; step 3 repeats Table 2). One A6000 latency model
prices every target and head from its architecture (`calibrate.papers.base.model_latency`): the
13B and 14B targets and their heads have no measured latency and are priced as any other model
would be (`calibrate.transfer`). Fitted besides: the tree step's own work (tree building, masks).
"""
from __future__ import annotations

import copy
import functools

from calibrate.paper_fit import Cell, PaperModel, Param, seconds_cell, speedup_cell
from calibrate.papers.base import (hardware_params, hardware_terms, make_profile, model_latency,
                                   workload_ctx)
from costmodel import papers
from costmodel.leviathan import alpha_from_expected_tokens
from costmodel.params import arch_dict, drafter_arch

# target arch -> (Table 2 row prefix, Table 1 row or None)
TARGETS = {"llama-2-7b": ("L2-7B", "Llama2-7B"), "llama-2-13b": ("L2-13B", None),
           "llama-3-8b": ("L3-8B", "Llama3-8B"), "qwen2.5-7b": ("Q2.5-7B", "Qwen2.5-7B"),
           "qwen2.5-14b": ("Q2.5-14B", None)}
DRAFTERS = {"EAGLE-2": "eagle", "HASS": "hass", "CORAL": "coral", "CORAL w/ r.": "coral-router"}
COLUMNS = ("MT-bench", "HumanEval", "GSM8K")
TABLE_3 = {"HASS": "hass", "CSRA": "coral"}
A6000_PRIOR = {"bw_eff": 0.75, "flops_eff": 0.2, "launch_s": 1e-3, "launch_per_layer_s": 3e-4, "overhead_s": 0.0}


def _setting(name: str) -> int:
    section = {"tree depth": "inference", "candidates": "inference", "N": "router", "top-n": "router"}[name]
    return int(papers.value("coral", "text", section, name))


PARAMS = hardware_params("A6000", A6000_PRIOR, fixed=("overhead_s",)) + (
    Param("router_groups", 2.0, 2.0, 16.0, 2.0, unit="groups", what="LM-head groups a routed head reads per tree "
          "forward (App. F: tree decoding activates more than top-n)", why="between top-n and all N groups"),
)
FIXED = {"overhead_s": (0.0, "fitted, it fell to the floor of its range: the launch floor and the device time "
                              "account for every forward"),
         "step_overhead_s": (0.0, "the tree step's own work beside its forwards, fitted, fell to the floor of its "
                                  "range: the forwards account for the step")}


@functools.lru_cache(maxsize=None)
def _acceptance_cached(short: str, depth: int, depth_key: tuple) -> dict:
    tree = dict(depth_key)
    t2 = papers.table("coral", "2")
    acceptance = {}
    for row_name, drafter in DRAFTERS.items():
        cells = t2.get(f"{short} / {row_name}", {})
        for column in COLUMNS:
            for temp in (0, 1):
                tau = cells.get(f"{column} T={temp} tau")
                if tau is None:
                    continue
                acceptance[f"{drafter}/{column.lower()}/T{temp}"] = {
                    "drafter": drafter, "temperature": float(temp), "dataset": column.lower(),
                    "alpha": float(alpha_from_expected_tokens(min(tau, depth + 1.0), depth)), "tau": tau,
                    "tree": dict(tree),
                    "source": f"CORAL Table 2, row {short} / {row_name}, column {column} T={temp} tau = {tau}; "
                              f"alpha = chain-equivalent inverse at gamma {depth}"}
    return acceptance


def _acceptance(short: str, depth: int, tree: dict) -> dict:
    """Table 2's tau of each drafter as chain-equivalent alpha (computed once: fits rebuild often)."""
    return _acceptance_cached(short, depth, tuple(sorted(tree.items())))


def _drafters_of(short: str) -> dict[str, str]:
    t2 = papers.table("coral", "2")
    return {row: d for row, d in DRAFTERS.items() if f"{short} / {row}" in t2}


def build(values: dict[str, float]) -> list:
    terms = hardware_terms(values)
    depth, candidates, groups, top_n = (_setting(k) for k in ("tree depth", "candidates", "N", "top-n"))
    how = ("A6000 terms fitted to CORAL Tables 1-3 and Sec. 4.2.3 over every target (calibrate.paper_fit): "
           + ", ".join(f"{k} {v:.4g}" for k, v in terms.items()))
    tree = {"depth": depth, "candidates": candidates}
    loads = papers.workloads(COLUMNS, "coral")
    out = []
    for arch_name, (short, t1_row) in TARGETS.items():
        target_arch = arch_dict(arch_name)
        head = drafter_arch("coral", target_arch)
        router = drafter_arch("coral", target_arch, top_n=top_n, groups=groups)
        router["lm_head_fraction"] = values["router_groups"] / groups      # what a tree step reads of the head
        models = {arch_name: target_arch, f"eagle-{arch_name}": head}
        latency = {arch_name: model_latency(target_arch, "A6000", terms, arch_name, how),
                   f"eagle-{arch_name}": model_latency(head, "A6000", terms, f"eagle-{arch_name}", how)}
        drafters = {}
        for row, d in _drafters_of(short).items():
            model = f"{'coral-router' if d == 'coral-router' else 'eagle'}-{arch_name}"
            if d == "coral-router":
                models[model] = router
                latency[model] = model_latency(router, "A6000", terms, model, how)
            drafters[d] = {"kind": "coral", "model": model, "tree": dict(tree),
                           **({"router": {"groups": groups, "top_n": top_n}} if d == "coral-router" else {})}
        acceptance = copy.deepcopy(_acceptance(short, depth, tree))
        measured = (f"its L_t and L_d are CORAL Table 1's ({t1_row})" if t1_row else
                    "no latency of it is published: target and heads priced from their architectures")
        out.append(make_profile(
            f"coral-{arch_name}-a6000", "A6000", arch_name, models, latency, drafters, acceptance,
            sources=["CORAL Table 1 (L_t, L_d: latency fit)", "CORAL Table 2 (tau; SR with tau: latency fit)",
                     "CORAL Table 3 (SR with tau: latency fit)", "CORAL Sec. 4.1-4.2 (tree, router, 60-token verify)",
                     *papers.workload_sources(COLUMNS)],
            assumptions=[f"alpha is the chain alpha giving the tree's tau at depth {depth}: the tree of {candidates} "
                         "candidates reaches tau with a lower per-token alpha, so this alpha overstates a chain drafter's",
                         f"a step drafts EAGLE-2's tree: {depth} head forwards, the first on one sequence and the "
                         f"others on {candidates // depth}, then verifies {candidates} candidates + 1 "
                         "(methods.coral tree_width)",
                         "EAGLE head: fc 2h -> h + one target-shaped decoder layer + the target's LM head",
                         f"one A6000 latency model prices every target and head of the paper; {measured}",
                         "EAGLE (Table 2's first row) drafts a static tree the paper does not state: left out",
                         "Table 4 (router settings) prints SR without tau and is left out"],
            engine={"methods": {"coral": {"overhead_s": values["step_overhead_s"]}}}, workloads=loads))
    return out


def _t1_cell(row: str, column: str, arch_name: str, model: str) -> Cell:
    t1 = papers.table("coral", "1")
    return seconds_cell("coral", "1", row, column, t1[row][column] / 1e3, f"coral-{arch_name}-a6000", model,
                        size=TARGETS[arch_name][0])


def cells() -> list[Cell]:
    t2, t3 = papers.table("coral", "2"), papers.table("coral", "3")
    config = f"coral g{_setting('tree depth')}"
    loads = papers.workloads(COLUMNS, "coral")
    out = []
    for arch_name, (short, t1_row) in TARGETS.items():
        profile = f"coral-{arch_name}-a6000"
        if t1_row:
            out.append(_t1_cell(t1_row, "L_t", arch_name, arch_name))
            out.append(_t1_cell(t1_row, "L_d", arch_name, f"eagle-{arch_name}"))
        for row_name, drafter in _drafters_of(short).items():
            row = f"{short} / {row_name}"
            for column in COLUMNS:
                for temp in (0, 1):
                    tau, sr = t2[row][f"{column} T={temp} tau"], t2[row][f"{column} T={temp} SR"]
                    out.append(speedup_cell("coral", "2", row, f"{column} T={temp} SR", sr, tau, profile, "coral",
                                            config, drafter=drafter, ctx=workload_ctx(loads[column.lower()]),
                                            size=short))
    n60 = papers.value("coral", "text", "inference", "candidates")
    out.append(seconds_cell("coral", "text", "Llama3-8B", "L_t 60 tokens",
                            papers.value("coral", "text", "Llama3-8B", "L_t 60 tokens") / 1e3,
                            "coral-llama-3-8b-a6000", "llama-3-8b", n_tokens=n60, size="L3-8B"))
    for row in ("step 2", "step 4"):            # step 3 is Table 2's HASS and CORAL rows again
        for column in COLUMNS:
            for method, drafter in TABLE_3.items():
                tau, sr = t3[row][f"{column} {method} tau"], t3[row][f"{column} {method} SR"]
                out.append(speedup_cell("coral", "3", row, f"{column} {method} SR", sr, tau, "coral-llama-3-8b-a6000",
                                        "coral", config, drafter=drafter, ctx=workload_ctx(loads[column.lower()]),
                                        size="L3-8B"))
    return out


MODEL = PaperModel("coral", PARAMS, build, cells, FIXED)
