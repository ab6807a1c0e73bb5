"""Lookahead decoding (Fu et al., 2024): Tables 2-4 and the Fig. 4(b) setting alpha=0.425, f=3.106.

Table 3 rows are "(tag) N,W,G" with prompt-as-reference on (+ref) or off; LLaMA-2-7B-Chat on
MT-Bench, A100, FlashAttention. S is the step compression ratio (Eq. 6).

How the project prices it (`MODEL`):

Lookahead decoding (Fu et al., 2024) on A100-80G: LLaMA-2-7B-Chat.

Constraining numbers: speedups with their compression ratio S, Table 3 (MT-Bench; the rows without
prompt-as-reference: (5), (7), (8)) and Table 2 (CNN and XSum summarisation, at Table 4's 7B
configuration W15 N5 G15), each priced at its dataset's context (`costmodel.workloads`: a
CNN article is ~1000 tokens). The paper gives no absolute latency and runs one model: the bandwidth
efficiency is assumed and no launch floor is separable from it; fitted are the A100 compute
efficiency (how a lookahead forward of (W+G)(N-1)+1 tokens grows) and a per-step overhead of the
lookahead step (pool upkeep, n-gram matching).
"""
from __future__ import annotations

from papers.calibration import Cell, PaperModel, Param, speedup_cell
from calibrate.terms import model_latency
from papers.base import make_profile, workload_ctx
from costmodel.params import arch_dict
from papers.published import grid, scalar
from papers import published
from costmodel import workloads as lengths


PAPER = "lookahead"

TABLE_2 = """
row | speedup | S
CNN temp=1.0 LA | 1.46 | 1.64
CNN temp=0.0 LA | 1.57 | 1.72
XSum temp=1.0 LA | 1.50 | 1.67
XSum temp=0.0 LA | 1.60 | 1.77
"""

TABLE_3 = """
row | N | W | G | prompt ref | speedup | S
(1) autoregressive | - | - | - | 0 | 1.00 | 1.00
(2) prompt lookup | - | - | - | 1 | 1.44 | 1.55
(3) 10,1,3 +ref | 10 | 1 | 3 | 1 | 1.36 | 1.45
(4) 5,1,10 +ref | 5 | 1 | 10 | 1 | 1.36 | 1.51
(5) 5,1,30 | 5 | 1 | 30 | 0 | 1.04 | 1.12
(6) 5,1,30 +ref | 5 | 1 | 30 | 1 | 1.46 | 1.59
(7) 5,30,1 | 5 | 30 | 1 | 0 | 1.61 | 1.79
(8) 5,15,15 | 5 | 15 | 15 | 0 | 1.78 | 1.96
(9) 5,15,15 +ref | 5 | 15 | 15 | 1 | 1.88 | 2.05
"""

TABLE_4 = """
row | W | N | G
7B | 15 | 5 | 15
13B | 10 | 5 | 10
34B | 7 | 5 | 7
"""

RECORDS = (
    grid(PAPER, "2", TABLE_2, "x", note="LLaMA-2-7B-Chat summarisation; speedup and S vs autoregressive")
    + grid(PAPER, "3", TABLE_3, {"N": "", "W": "", "G": "", "prompt ref": "bool", "speedup": "x", "S": "x"},
           note="LLaMA-2-7B-Chat, MT-Bench, A100, FlashAttention")
    + grid(PAPER, "4", TABLE_4, "", note="good config on A100 with G = W")
    + [
        scalar(PAPER, "fig4b", "setting", "alpha", 0.425, "", "Fig. 4(b): per-token acceptance of Eq. 5"),
        scalar(PAPER, "fig4b", "setting", "f", 3.106, "steps", "Fig. 4(b): one good speculation every f steps (Eq. 7)"),
        scalar(PAPER, "text", "7B", "extra FLOPs per step", 120, "x", "Sec. 5.5: (W+G)(N-1) per-step input tokens"),
        scalar(PAPER, "text", "13B", "extra FLOPs per step", 80, "x", "Sec. 5.5"),
        scalar(PAPER, "text", "34B", "extra FLOPs per step", 56, "x", "Sec. 5.5"),
    ]
)

published.register(PAPER, RECORDS)

BW_EFF = 0.8
DATASETS = {"CNN": "cnn", "XSum": "xsum"}       # Table 2 rows -> workloads; Table 3 is MT-Bench
PARAMS = (
    Param("flops_eff", 0.5, 0.02, 1.0, 0.2, unit="", what="A100 compute efficiency",
          why="the datasheet peak is the ceiling"),
    Param("step_overhead_s", 0.0, 0.0, 0.01, 2e-3, what="lookahead step overhead beyond its forward",
          why="half a 7B forward on an A100 (~20 ms)"),
)


def build(values: dict[str, float]) -> list:
    arch = arch_dict("llama-2-7b")
    terms = {"bw_eff": BW_EFF, "flops_eff": values["flops_eff"], "launch_s": 0.0, "launch_per_layer_s": 0.0,
             "overhead_s": 0.0}
    how = (f"bw_eff {BW_EFF} assumed, no launch floor or fixed overhead; flops_eff {values['flops_eff']:.3f} fitted "
           "to Lookahead Tables 2 and 3 speedups with S (papers.calibration)")
    target = model_latency(arch, "A100-80G", terms, "llama-2-7b", how)
    fig = {c: published.value("lookahead", "fig4b", "setting", c) for c in ("alpha", "f")}
    acceptance = {"lookahead/mt-bench": {"drafter": "lookahead", "temperature": 0.0, "dataset": "mt-bench",
                                         "alpha": fig["alpha"], "lookahead": fig,
                                         "source": "Lookahead Fig. 4(b) setting alpha = 0.425, f = 3.106"}}
    datasets = ("mt-bench", *DATASETS.values())
    return [make_profile("lookahead-llama-2-7b-a100", "A100-80G", "llama-2-7b", {"llama-2-7b": arch},
                         {"llama-2-7b": target}, {"lookahead": {"kind": "lookahead"}}, acceptance,
                         sources=["Lookahead Fig. 4(b) (alpha, f)", "Lookahead Tables 2 and 3 (speedup with S: latency fit)",
                                  "Lookahead Table 4 (7B configuration of Table 2)", *lengths.workload_sources(datasets)],
                         assumptions=["LLaMA-2-7B-Chat has LLaMA-2-7B's architecture",
                                      f"bandwidth efficiency {BW_EFF} and no launch floor or fixed forward overhead: "
                                      "the paper gives no absolute latency and one model; only ratios are fitted",
                                      "prompt-as-reference rows (+ref) are left out (their S includes prompt n-grams)",
                                      "Table 2 ran Table 4's 7B configuration (W15 N5 G15)"],
                         engine={"methods": {"lookahead": {"overhead_s": values["step_overhead_s"]}}},
                         workloads=lengths.workloads(datasets, "lookahead"))]


def cells() -> list[Cell]:
    t2, t3, t4 = (published.table("lookahead", t) for t in ("2", "3", "4"))
    profile = "lookahead-llama-2-7b-a100"
    mt_bench = workload_ctx(lengths.workload("mt-bench"))
    out = []
    for row, cols in t3.items():
        if "N" not in cols or cols["prompt ref"]:
            continue
        config = {"W": int(cols["W"]), "N": int(cols["N"]), "G": int(cols["G"])}
        out.append(speedup_cell("lookahead", "3", row, "speedup", cols["speedup"], cols["S"], profile, "lookahead",
                                config, ctx=mt_bench, size="7B"))
    seven = {k: int(v) for k, v in t4["7B"].items()}
    for row, cols in t2.items():
        dataset = DATASETS[row.split()[0]]
        out.append(speedup_cell("lookahead", "2", row, "speedup", cols["speedup"], cols["S"], profile, "lookahead",
                                seven, ctx=workload_ctx(lengths.workload(dataset)),
                                note=f"Table 4's 7B configuration; {dataset} context", size="7B"))
    return out


MODEL = PaperModel("lookahead", PARAMS, build, cells)
