"""Lookahead decoding (Fu et al., 2024) on A100-80G: LLaMA-2-7B-Chat.

Constraining numbers: speedups with their compression ratio S, Table 3 (MT-Bench; the rows without
prompt-as-reference: (5), (7), (8)) and Table 2 (CNN and XSum summarisation, at Table 4's 7B
configuration W15 N5 G15), each priced at its dataset's context (`costmodel.papers.workloads`: a
CNN article is ~1000 tokens). The paper gives no absolute latency and runs one model: the bandwidth
efficiency is assumed and no launch floor is separable from it; fitted are the A100 compute
efficiency (how a lookahead forward of (W+G)(N-1)+1 tokens grows) and a per-step overhead of the
lookahead step (pool upkeep, n-gram matching).
"""
from __future__ import annotations

from calibrate.paper_fit import Cell, PaperModel, Param, speedup_cell
from calibrate.papers.base import make_profile, model_latency, workload_ctx
from costmodel import papers
from costmodel.params import arch_dict

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
           "to Lookahead Tables 2 and 3 speedups with S (calibrate.paper_fit)")
    target = model_latency(arch, "A100-80G", terms, "llama-2-7b", how)
    fig = {c: papers.value("lookahead", "fig4b", "setting", c) for c in ("alpha", "f")}
    acceptance = {"lookahead/mt-bench": {"drafter": "lookahead", "temperature": 0.0, "dataset": "mt-bench",
                                         "alpha": fig["alpha"], "lookahead": fig,
                                         "source": "Lookahead Fig. 4(b) setting alpha = 0.425, f = 3.106"}}
    datasets = ("mt-bench", *DATASETS.values())
    return [make_profile("lookahead-llama-2-7b-a100", "A100-80G", "llama-2-7b", {"llama-2-7b": arch},
                         {"llama-2-7b": target}, {"lookahead": {"kind": "lookahead"}}, acceptance,
                         sources=["Lookahead Fig. 4(b) (alpha, f)", "Lookahead Tables 2 and 3 (speedup with S: latency fit)",
                                  "Lookahead Table 4 (7B configuration of Table 2)", *papers.workload_sources(datasets)],
                         assumptions=["LLaMA-2-7B-Chat has LLaMA-2-7B's architecture",
                                      f"bandwidth efficiency {BW_EFF} and no launch floor or fixed forward overhead: "
                                      "the paper gives no absolute latency and one model; only ratios are fitted",
                                      "prompt-as-reference rows (+ref) are left out (their S includes prompt n-grams)",
                                      "Table 2 ran Table 4's 7B configuration (W15 N5 G15)"],
                         engine={"methods": {"lookahead": {"overhead_s": values["step_overhead_s"]}}},
                         workloads=papers.workloads(datasets, "lookahead"))]


def cells() -> list[Cell]:
    t2, t3, t4 = (papers.table("lookahead", t) for t in ("2", "3", "4"))
    profile = "lookahead-llama-2-7b-a100"
    mt_bench = workload_ctx(papers.workload("mt-bench"))
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
                                seven, ctx=workload_ctx(papers.workload(dataset)),
                                note=f"Table 4's 7B configuration; {dataset} context", size="7B"))
    return out


MODEL = PaperModel("lookahead", PARAMS, build, cells)
