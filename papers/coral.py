"""CORAL (2025): Tables 1-5 and the inference settings quoted in the text.

Table 1 parameter counts are in M = 1024 x 1024 parameters (the paper's own unit) and exclude the
embedding layer; latencies are one-token forwards on one RTX A6000. Table 2 cells are
"tau/SR" (acceptance length per drafting-verification cycle / speedup ratio); rows
"<target> / <method>", "CORAL w/ r." is CORAL with the LM-head router (N=16, top-2).

How the project prices it (`MODEL`):

CORAL (2025) on RTX A6000: Llama2-7B/13B, Llama3-8B and Qwen2.5-7B/14B targets, EAGLE-style heads
(EAGLE, EAGLE-2, HASS, CORAL) and CORAL's LM-head router, each drafting EAGLE-2's tree of 60
candidates at depth 6.

Constraining numbers: Table 1's one-token latencies L_t (target) and L_d (head) of Llama2-7B,
Llama3-8B and Qwen2.5-7B, Sec. 4.2.3's Llama3-8B verify of 60 tokens (26 -> 31 ms), Table 2's SR
with tau of every target on one A6000 (Llama3-70B ran on four and is left out; EAGLE's static tree is not
stated, its rows are left out), Table 3's SR with tau
(Llama3-8B, HASS and CSRA at 2 and 4 training steps; step 3 repeats Table 2). One A6000 latency model
prices every target and head from its architecture (`calibrate.terms.model_latency`): the
13B and 14B targets and their heads have no measured latency and are priced as any other model
would be (`calibrate.transfer`). Fitted besides: the tree step's own work (tree building, masks).
"""
from __future__ import annotations

import copy
import functools
from papers.calibration import Cell, PaperModel, Param, seconds_cell, speedup_cell
from calibrate.terms import hardware_terms, model_latency
from papers.base import hardware_params, make_profile, workload_ctx
from costmodel.leviathan import alpha_from_expected_tokens
from costmodel.params import arch_dict, drafter_arch
from papers.published import grid, scalar
from papers import published
from costmodel import workloads as lengths


PAPER = "coral"

TABLE_1 = """
row | hidden | intermediate | vocab | W_d | W_t | L_d | L_t
Llama2-7B | 4096 | 11008 | 32000 | 350 | 6301 | 1.36 | 23.65
Llama3-8B | 4096 | 14336 | 128256 | 741 | 7157 | 2.58 | 26.06
Qwen2.5-7B | 3584 | 18944 | 152064 | 767 | 6743 | 2.69 | 24.58
"""

TABLE_2 = """
row | MT-bench T=0 | MT-bench T=1 | HumanEval T=0 | HumanEval T=1 | GSM8K T=0 | GSM8K T=1 | Average T=0
L2-13B / EAGLE | 3.93/3.04 | 3.64/2.65 | 4.51/3.47 | 4.24/3.13 | 4.01/3.10 | 3.84/2.83 | 4.15/3.20
L2-13B / EAGLE-2 | 4.80/3.16 | 4.68/3.06 | 5.59/3.75 | 5.41/3.60 | 4.98/3.38 | 4.84/3.25 | 5.12/3.43
L2-13B / HASS | 5.20/3.42 | 5.02/3.26 | 5.99/4.01 | 5.79/3.86 | 5.32/3.60 | 5.24/3.51 | 5.50/3.68
L2-13B / CORAL | 5.25/3.45 | 5.10/3.32 | 6.06/4.07 | 5.90/3.93 | 5.39/3.65 | 5.25/3.51 | 5.57/3.72
L2-7B / EAGLE | 3.80/2.67 | 3.62/2.37 | 4.29/3.04 | 3.96/2.60 | 3.84/2.73 | 3.74/2.48 | 3.87/2.81
L2-7B / EAGLE-2 | 4.68/2.89 | 4.45/2.70 | 5.34/3.35 | 5.02/3.11 | 4.70/2.98 | 4.67/2.89 | 4.91/3.07
L2-7B / HASS | 5.02/3.09 | 4.77/2.88 | 5.71/3.58 | 5.35/3.30 | 5.11/3.25 | 4.99/3.10 | 5.28/3.31
L2-7B / CORAL | 5.09/3.13 | 4.86/2.94 | 5.73/3.58 | 5.48/3.40 | 5.12/3.25 | 5.05/3.13 | 5.31/3.32
L3-70B / EAGLE | 2.87/2.24 | 2.67/2.06 | 3.73/2.93 | 3.53/2.74 | 3.46/2.71 | 3.26/2.52 | 3.35/2.63
L3-70B / EAGLE-2 | 4.08/2.70 | 3.91/2.61 | 4.95/3.31 | 4.89/3.27 | 4.03/2.70 | 3.73/2.50 | 4.35/2.90
L3-70B / HASS | 4.10/2.71 | 4.00/2.65 | 5.23/3.49 | 5.10/3.40 | 4.12/2.76 | 3.83/2.56 | 4.48/2.99
L3-70B / CORAL | 4.23/2.79 | 4.13/2.72 | 5.31/3.54 | 5.19/3.46 | 4.34/2.90 | 3.91/2.61 | 4.63/3.08
L3-8B / EAGLE | 2.63/1.65 | 2.40/1.41 | 3.65/2.29 | 3.29/1.92 | 3.47/2.18 | 3.22/1.89 | 3.25/2.04
L3-8B / EAGLE-2 | 4.16/2.28 | 3.84/2.08 | 4.78/2.61 | 4.64/2.50 | 4.21/2.32 | 3.94/2.13 | 4.38/2.40
L3-8B / HASS | 4.48/2.45 | 4.12/2.21 | 5.31/2.89 | 5.12/2.76 | 4.56/2.51 | 4.18/2.28 | 4.78/2.62
L3-8B / CORAL | 4.57/2.50 | 4.15/2.24 | 5.43/2.95 | 5.28/2.83 | 4.70/2.58 | 4.39/2.38 | 4.90/2.68
L3-8B / CORAL w/ r. | 4.26/2.63 | 3.92/2.39 | 5.22/3.21 | 5.03/3.07 | 4.42/2.76 | 4.12/2.53 | 4.63/2.87
Q2.5-14B / EAGLE | 2.63/1.83 | 2.44/1.62 | 3.31/2.31 | 3.12/2.10 | 3.62/2.52 | 3.46/2.33 | 3.19/2.22
Q2.5-14B / EAGLE-2 | 4.08/2.36 | 3.76/2.15 | 5.01/2.89 | 4.85/2.78 | 4.62/2.69 | 4.58/2.65 | 4.57/2.65
Q2.5-14B / HASS | 4.52/2.59 | 4.12/2.35 | 5.50/3.18 | 5.37/3.07 | 5.03/2.92 | 4.91/2.83 | 5.02/2.90
Q2.5-14B / CORAL | 4.56/2.62 | 4.13/2.35 | 5.64/3.26 | 5.40/3.09 | 5.16/3.00 | 5.12/2.95 | 5.12/2.96
Q2.5-14B / CORAL w/ r. | 4.26/2.74 | 3.88/2.46 | 5.31/3.44 | 5.12/3.28 | 4.80/3.14 | 4.72/3.05 | 4.79/3.11
Q2.5-7B / EAGLE | 2.53/1.56 | 2.25/1.27 | 3.04/1.87 | 2.79/1.58 | 3.32/2.05 | 3.00/1.72 | 2.96/1.83
Q2.5-7B / EAGLE-2 | 3.91/2.13 | 3.45/1.86 | 4.62/2.53 | 4.36/2.35 | 4.23/2.33 | 4.07/2.21 | 4.25/2.33
Q2.5-7B / HASS | 4.15/2.26 | 3.65/1.96 | 4.96/2.71 | 4.74/2.55 | 4.53/2.49 | 4.35/2.35 | 4.55/2.49
Q2.5-7B / CORAL | 4.22/2.30 | 3.83/2.05 | 5.09/2.78 | 4.86/2.62 | 4.67/2.57 | 4.50/2.44 | 4.66/2.55
Q2.5-7B / CORAL w/ r. | 4.02/2.50 | 3.62/2.21 | 4.86/3.05 | 4.57/2.81 | 4.38/2.76 | 4.16/2.58 | 4.42/2.77
"""

TABLE_3 = """
row | MT-bench HASS | MT-bench CSRA | HumanEval HASS | HumanEval CSRA | GSM8K HASS | GSM8K CSRA | Average HASS | Average CSRA
step 2 | 4.41/2.41 | 4.53/2.48 | 5.24/2.86 | 5.35/2.90 | 4.50/2.47 | 4.60/2.52 | 4.72/2.58 | 4.83/2.63
step 3 | 4.48/2.45 | 4.57/2.50 | 5.31/2.89 | 5.43/2.95 | 4.56/2.51 | 4.70/2.58 | 4.78/2.62 | 4.90/2.68
step 4 | 4.46/2.44 | 4.58/2.51 | 5.39/2.93 | 5.55/3.00 | 4.58/2.54 | 4.70/2.57 | 4.81/2.64 | 4.94/2.69
"""

TABLE_4 = """
row | N/A | top1 | top2 | top3 | top4 | top6 | top8
CORAL N/A | 2.50 | - | - | - | - | - | -
CORAL N=4 | - | 2.60 | 2.46 | - | - | - | -
CORAL N=8 | - | 2.62 | 2.61 | 2.54 | - | - | -
CORAL N=16 | - | 2.53 | 2.63 | 2.60 | 2.57 | - | -
CORAL N=32 | - | 2.41 | 2.59 | 2.60 | 2.61 | 2.56 | -
CORAL N=64 | - | 2.33 | 2.51 | 2.55 | 2.57 | 2.57 | 2.53
EAGLE-2 N/A | 2.28 | - | - | - | - | - | -
EAGLE-2 N=4 | - | 2.44 | 2.29 | - | - | - | -
EAGLE-2 N=8 | - | 2.40 | 2.39 | 2.33 | - | - | -
EAGLE-2 N=16 | - | 2.30 | 2.41 | 2.39 | 2.36 | - | -
EAGLE-2 N=32 | - | 2.24 | 2.37 | 2.40 | 2.38 | 2.35 | -
EAGLE-2 N=64 | - | 2.18 | 2.33 | 2.37 | 2.37 | 2.37 | 2.33
"""

TABLE_5 = """
row | MT-bench | HumanEval | GSM8K
EAGLE-2 | 4.16 | 4.78 | 4.21
CSRA Step1 | 4.10 | 4.70 | 4.10
"""

_T1_UNITS = {"hidden": "", "intermediate": "", "vocab": "tokens", "W_d": "Mi params", "W_t": "Mi params",
             "L_d": "ms", "L_t": "ms"}

RECORDS = (
    grid(PAPER, "1", TABLE_1, _T1_UNITS, note="embeddings excluded; M = 1024*1024; one token on one A6000")
    + grid(PAPER, "2", TABLE_2, {"tau": "tokens/cycle", "SR": "x"}, pair=("tau", "SR"),
           note="A6000 batch 1, tree depth 6, 60 candidates; L3-70B on 4 A6000")
    + grid(PAPER, "3", TABLE_3, {"tau": "tokens/cycle", "SR": "x"}, pair=("tau", "SR"),
           note="Llama3-8B, training steps 2-4, T=0")
    + grid(PAPER, "4", TABLE_4, "x", note="Llama3-8B MT-bench T=0 speedup with LM-head router of N groups, top-n")
    + grid(PAPER, "5", TABLE_5, "tokens/cycle", note="Llama3-8B single-step training acceptance length")
    + [
        scalar(PAPER, "text", "inference", "tree depth", 6, "draft steps", "Sec. 4.1: gamma of Eq. 1"),
        scalar(PAPER, "text", "inference", "candidates", 60, "tokens", "Sec. 4.1 tokens verified per cycle"),
        scalar(PAPER, "text", "router", "N", 16, "groups", "Sec. 4.2.1 best setting"),
        scalar(PAPER, "text", "router", "top-n", 2, "groups", "Sec. 4.2.1 best setting"),
        scalar(PAPER, "text", "Llama3-8B", "L_t 1 token", 26, "ms", "Sec. 4.2.3"),
        scalar(PAPER, "text", "Llama3-8B", "L_t 60 tokens", 31, "ms", "Sec. 4.2.3: +19% for 60 tokens in parallel"),
        scalar(PAPER, "text", "Llama3-8B", "ideal tau/SR", 1.6, "", "Sec. 4.2.3 with L_t' = L_t"),
        scalar(PAPER, "text", "Llama3-8B", "expected tau/SR", 1.8, "", "Sec. 4.2.3 with L_t' = 1.19 L_t"),
        scalar(PAPER, "text", "Llama3-8B draft head", "latency", 1.51, "ms", "App. F, A6000 fp16"),
        scalar(PAPER, "text", "Llama3-8B draft head", "theoretical latency", 1.3, "ms", "App. F: 1002M bytes at 768 GB/s"),
        scalar(PAPER, "text", "Llama3-8B draft transformer", "latency", 1.07, "ms", "App. F (theory 0.63 ms)"),
        scalar(PAPER, "text", "A6000", "bandwidth", 768, "GB/s", "App. F"),
    ]
)

published.register(PAPER, RECORDS)

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
    return int(published.value("coral", "text", section, name))


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
    t2 = published.table("coral", "2")
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
    t2 = published.table("coral", "2")
    return {row: d for row, d in DRAFTERS.items() if f"{short} / {row}" in t2}


def build(values: dict[str, float]) -> list:
    terms = hardware_terms(values)
    depth, candidates, groups, top_n = (_setting(k) for k in ("tree depth", "candidates", "N", "top-n"))
    how = ("A6000 terms fitted to CORAL Tables 1-3 and Sec. 4.2.3 over every target (papers.calibration): "
           + ", ".join(f"{k} {v:.4g}" for k, v in terms.items()))
    tree = {"depth": depth, "candidates": candidates}
    loads = lengths.workloads(COLUMNS, "coral")
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
                     *lengths.workload_sources(COLUMNS)],
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
    t1 = published.table("coral", "1")
    return seconds_cell("coral", "1", row, column, t1[row][column] / 1e3, f"coral-{arch_name}-a6000", model,
                        size=TARGETS[arch_name][0])


def cells() -> list[Cell]:
    t2, t3 = published.table("coral", "2"), published.table("coral", "3")
    config = f"coral g{_setting('tree depth')}"
    loads = lengths.workloads(COLUMNS, "coral")
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
    n60 = published.value("coral", "text", "inference", "candidates")
    out.append(seconds_cell("coral", "text", "Llama3-8B", "L_t 60 tokens",
                            published.value("coral", "text", "Llama3-8B", "L_t 60 tokens") / 1e3,
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
