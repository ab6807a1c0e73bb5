"""CORAL (2025) on RTX A6000: Llama3-8B and Qwen2.5-7B targets, EAGLE-style heads (EAGLE-2, HASS,
CORAL) and CORAL's LM-head router, each drafting EAGLE-2's tree of 60 candidates at depth 6.

Constraining numbers: Table 1's one-token latencies L_t (target) and L_d (head), Sec. 4.2.3's
Llama3-8B verify of 60 tokens (26 -> 31 ms), Table 2's SR with tau (Llama3-8B, Qwen2.5-7B rows of
the four drafters), Table 3's SR with tau (Llama3-8B, HASS and CSRA at 2 and 4 training steps; step 3
repeats Table 2). Fitted: the A6000 bandwidth and compute efficiencies of the targets, how much
a head forward in the tree loop costs over its isolated L_d (`draft_scale`), the tree step's own
overhead (masks, tree building: `overhead_s`), and what the routed head costs beyond its top-2/16
share (tree decoding activates more groups, App. F).
"""
from __future__ import annotations

import copy
import functools

from calibrate.paper_fit import Cell, PaperModel, Param, seconds_cell, speedup_cell
from calibrate.papers.base import CTX_REF, make_profile, roofline, timed_roofline
from calibrate.papers.mcsd import A6000_FIT_SOURCE, A6000_FLOPS_EFF, a6000_target_fit
from costmodel import papers
from costmodel.leviathan import alpha_from_expected_tokens
from costmodel.params import arch_dict, drafter_arch

TARGETS = {"llama-3-8b": ("L3-8B", "Llama3-8B"), "qwen2.5-7b": ("Q2.5-7B", "Qwen2.5-7B")}
DRAFTERS = {"EAGLE-2": "eagle", "HASS": "hass", "CORAL": "coral", "CORAL w/ r.": "coral-router"}
COLUMNS = ("MT-bench", "HumanEval", "GSM8K")
TABLE_3 = {"HASS": "hass", "CSRA": "coral"}


def _setting(name: str) -> int:
    section = {"tree depth": "inference", "candidates": "inference", "N": "router", "top-n": "router"}[name]
    return int(papers.value("coral", "text", section, name))


PARAMS = (
    Param("bw_eff", a6000_target_fit()[0], 0.3, 1.0, 0.1, unit="", what="A6000 bandwidth efficiency (targets)"),
    Param("flops_eff", A6000_FLOPS_EFF, 0.02, 1.0, 0.2, unit="", what="A6000 compute efficiency (targets)"),
    Param("draft_scale", 1.0, 0.5, 5.0, 1.0, unit="x", what="a head forward in the tree loop over its isolated L_d"),
    Param("step_overhead_s", 0.0, 0.0, 0.1, 0.005, what="tree step overhead beyond the forwards"),
    Param("router_extra_s", 0.0, 0.0, 0.02, 1e-3, what="routed head forward beyond its top-n/N share"),
)


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


def build(values: dict[str, float]) -> list:
    _, fixed, per_layer = a6000_target_fit()
    t1 = papers.table("coral", "1")
    depth, candidates, groups, top_n = (_setting(k) for k in ("tree depth", "candidates", "N", "top-n"))
    how_t = (f"overhead {fixed * 1e3:.3f} ms + {per_layer * 1e3:.3f} ms per layer from {A6000_FIT_SOURCE}; "
             "bw_eff and flops_eff fitted to CORAL Tables 1-3 and Sec. 4.2.3 (calibrate.paper_fit)")
    tree = {"depth": depth, "candidates": candidates}
    out = []
    for arch_name, (short, t1_row) in TARGETS.items():
        target_arch = arch_dict(arch_name)
        target = roofline(target_arch, "A6000", how_t, arch_name, bw_eff=values["bw_eff"],
                          flops_eff=values["flops_eff"], overhead_s=fixed + per_layer * target_arch["n_layers"])
        head, router = drafter_arch("coral", target_arch), drafter_arch("coral", target_arch, top_n=top_n, groups=groups)
        l_d = t1[t1_row]["L_d"] / 1e3
        head_latency = timed_roofline(head, target, l_d, f"one head forward = CORAL Table 1 L_d = {l_d * 1e3} ms "
                                                          f"({t1_row})", f"eagle-{arch_name}")
        router_latency = roofline(router, "A6000", f"the head's efficiencies and overhead + {values['router_extra_s'] * 1e3:.3f} "
                                  f"ms fitted (top-{top_n}/{groups} of the LM head, more groups in a tree)",
                                  f"coral-router-{arch_name}", bw_eff=target.bw_eff, flops_eff=target.flops_eff,
                                  overhead_s=head_latency.overhead_s + values["router_extra_s"])
        models = {arch_name: target_arch, f"eagle-{arch_name}": head, f"coral-router-{arch_name}": router}
        latency = {arch_name: target, f"eagle-{arch_name}": head_latency, f"coral-router-{arch_name}": router_latency}
        drafters = {d: {"kind": "coral", "model": f"{'coral-router' if d == 'coral-router' else 'eagle'}-{arch_name}",
                        "tree": dict(tree), **({"router": {"groups": groups, "top_n": top_n}} if d == "coral-router" else {})}
                    for d in DRAFTERS.values()}
        acceptance = copy.deepcopy(_acceptance(short, depth, tree))
        out.append(make_profile(
            f"coral-{arch_name}-a6000", "A6000", arch_name, models, latency, drafters, acceptance,
            sources=["CORAL Table 1 (L_t, L_d)", "CORAL Table 2 (tau; SR with tau: latency fit)",
                     "CORAL Table 3 (SR with tau: latency fit)", "CORAL Sec. 4.1-4.2 (tree, router, 60-token verify)"],
            assumptions=[f"alpha is the chain alpha giving the tree's tau at depth {depth}: the tree of {candidates} "
                         "candidates reaches tau with a lower per-token alpha, so this alpha overstates a chain drafter's",
                         f"a step drafts EAGLE-2's tree: {depth} head forwards, the first on one sequence and the "
                         f"others on {candidates // depth}, then verifies {candidates} candidates + 1 "
                         "(methods.coral tree_width)",
                         "EAGLE head: fc 2h -> h + one target-shaped decoder layer + the target's LM head",
                         "A6000 fixed overheads of the targets: the CORAL Table 1 fit (shared with MCSD's profiles)",
                         "CORAL gives no prompt lengths: latency priced at the sweep's default context",
                         "Table 4 (router settings) prints SR without tau and is left out"],
            engine={"methods": {"coral": {"draft_scale": values["draft_scale"],
                                          "overhead_s": values["step_overhead_s"]}}}))
    return out


def cells() -> list[Cell]:
    t1, t2, t3 = papers.table("coral", "1"), papers.table("coral", "2"), papers.table("coral", "3")
    depth = _setting("tree depth")
    config = f"coral g{depth}"
    out = []
    for arch_name, (short, t1_row) in TARGETS.items():
        profile = f"coral-{arch_name}-a6000"
        out.append(seconds_cell("coral", "1", t1_row, "L_t", t1[t1_row]["L_t"] / 1e3, profile, arch_name))
        out.append(seconds_cell("coral", "1", t1_row, "L_d", t1[t1_row]["L_d"] / 1e3, profile, f"eagle-{arch_name}",
                                ctx=CTX_REF))
        for row_name, drafter in DRAFTERS.items():
            row = f"{short} / {row_name}"
            for column in COLUMNS:
                for temp in (0, 1):
                    tau, sr = t2[row][f"{column} T={temp} tau"], t2[row][f"{column} T={temp} SR"]
                    out.append(speedup_cell("coral", "2", row, f"{column} T={temp} SR", sr, tau, profile, "coral",
                                            config, drafter=drafter, ctx=CTX_REF))
    n60 = papers.value("coral", "text", "inference", "candidates")
    out.append(seconds_cell("coral", "text", "Llama3-8B", "L_t 60 tokens",
                            papers.value("coral", "text", "Llama3-8B", "L_t 60 tokens") / 1e3,
                            "coral-llama-3-8b-a6000", "llama-3-8b", n_tokens=n60))
    for row in ("step 2", "step 4"):            # step 3 is Table 2's HASS and CORAL rows again
        for column in COLUMNS:
            for method, drafter in TABLE_3.items():
                tau, sr = t3[row][f"{column} {method} tau"], t3[row][f"{column} {method} SR"]
                out.append(speedup_cell("coral", "3", row, f"{column} {method} SR", sr, tau, "coral-llama-3-8b-a6000",
                                        "coral", config, drafter=drafter, ctx=CTX_REF))
    return out


MODEL = PaperModel("coral", PARAMS, build, cells)
