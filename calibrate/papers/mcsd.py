"""MCSD (Yang et al., 2024) on RTX A6000: LLaMA/Vicuna 13B and 33B targets, LLaMA-68M/160M drafters.

MCSD prints no absolute latency, only speedups with their tokens per step: Tables 2-3 (33B
targets, every k configuration printed), Table 4 (13B and 33B, LLaMA-68M, Alpaca, T=1, the best
configuration of Sec. 4.3). One A6000 latency model prices both targets and both draft models from
their architectures (`calibrate.papers.base.model_latency`), fitted jointly over both target sizes
with the engine's work per step (every step, plain decoding included), a drafting step's own work
and a cost per verified token. Tables 2-3's tau fit one more number, the acceptance's persistence
(`profiles.acceptance`). A 33B forward split over two A6000 is priced as one GPU's bandwidth at
a time.
"""
from __future__ import annotations

import functools

from profiles.acceptance import AlphaCurve
from calibrate.paper_fit import Cell, PaperModel, Param, model_pick, speedup_cell, step_ratio, tau_cell
from calibrate.papers.base import hardware_params, hardware_terms, make_profile, model_latency, workload_ctx
from costmodel import papers
from costmodel.params import arch_dict

TARGETS = {"llama-13b": "LLaMA-13B", "vicuna-13b": "Vicuna-13B", "llama-33b": "LLaMA-33B", "vicuna-33b": "Vicuna-33B"}
DRAFTS = {"llama-68m": ("LLaMA-68M", "2"), "llama-160m": ("LLaMA-160M", "3")}
FINETUNED = {"vicuna-68m": ("Vicuna-68M", "llama-68m"), "vicuna-160m": ("Vicuna-160M", "llama-160m")}
NEW_TOKENS = 128                                # Sec. 4.1: generations capped at 128 new tokens
TABLE_4_ROWS = {"MCSS w/o replacement": False, "MCSS w/ replacement": True, "MCNS": True}
A6000_FLOPS_EFF = 0.2     # prior: CORAL Sec. 4.2.3, Llama3-8B 26 -> 31 ms for 60 tokens on one A6000 is compute-bound at 0.2


def workloads() -> dict[str, dict]:
    return papers.workloads(("alpaca", "wmt"), "mcsd")


A6000_PRIOR = {"bw_eff": 0.75, "flops_eff": A6000_FLOPS_EFF, "launch_s": 3e-3, "launch_per_layer_s": 5e-4,
               "overhead_s": 0.0}
PARAMS = hardware_params("A6000", A6000_PRIOR) + (
    Param("step_overhead_s", 0.0, 0.0, 0.04, 1e-3, what="the engine's work per step beside its forwards (every "
          "step, plain decoding included)", why="a 13B forward on an A6000 (~45 ms): more would dwarf the forward"),
    Param("speculation_s", 0.0, 0.0, 0.01, 1e-3, what="a drafting step's own work beside plain decoding's "
          "(MCSS acceptance and residual sampling, cache rollback)", why="a fraction of a 13B forward"),
    Param("per_token_s", 0.0, 0.0, 2e-4, 2e-5, what="engine overhead per verified token (MCSS sampling, masks)",
          why="a few kernels' worth per token"),
    Param("persistence", 1.0, 0.5, 1.5, 0.1, unit="", what="how a draft position's miss shrinks once the positions "
          "before it were accepted (profiles.acceptance), fitted to Tables 2-3 tau",
          why="1 is independent positions; a miss halved or raised by half per position is no text's"),
)


def build(values: dict[str, float]) -> list:
    terms = hardware_terms(values)
    t1, t7 = papers.table("mcsd", "1"), papers.table("mcsd", "7")
    how = ("A6000 terms fitted jointly to MCSD Tables 2-4 over both target sizes (calibrate.paper_fit): "
           + ", ".join(f"{k} {v:.4g}" for k, v in terms.items()))
    loads = workloads()
    out = []
    for arch_name, label in TARGETS.items():
        target_arch = arch_dict(arch_name)
        two_gpus = arch_name.endswith("33b")
        target = model_latency(target_arch, "A6000", terms, arch_name, how)
        models, latency, drafters, acceptance = {arch_name: target_arch}, {arch_name: target}, {}, {}
        for draft in DRAFTS:
            models[draft] = arch_dict(draft)
            latency[draft] = model_latency(models[draft], "A6000", terms, draft, how)
            drafters[draft] = {"kind": "draft_model", "model": draft}
        if not two_gpus:
            for draft, (_, base) in FINETUNED.items():
                drafters[draft] = {"kind": "draft_model", "model": base}
        names = {d: lab for d, (lab, _) in DRAFTS.items()}
        if not two_gpus:
            names.update({d: lab for d, (lab, _) in FINETUNED.items()})
        for draft, draft_label in names.items():
            for temp in (0, 1):
                for dataset in ("Alpaca", "WMT"):
                    key = f"{draft_label} / {label} / T={temp}"
                    entry = {"drafter": draft, "temperature": float(temp), "dataset": dataset.lower()}
                    if key in t7:
                        a1, a4 = t7[key][f"{dataset} alpha@1"], t7[key][f"{dataset} alpha@4"]
                        entry.update(alpha=a1, alpha_at_k={"1": a1, "4": a4},
                                     source=f"MCSD Table 7, row {key}, columns {dataset} alpha@1 / alpha@4")
                    else:
                        a1 = t1[key][dataset]
                        twin = t7[key.replace("33B", "13B")]
                        a4 = min(1.0, a1 + twin[f"{dataset} alpha@4"] - twin[f"{dataset} alpha@1"])
                        entry.update(alpha=a1, alpha_at_k={"1": a1, "4": a4},
                                     source=f"MCSD Table 1, row {key}, column {dataset}; alpha@4 ASSUMED = alpha@1 + "
                                            f"the 13B twin's Table 7 gain")
                    entry["persistence"] = values["persistence"]
                    entry["alpha_at_k_fit"] = {
                        "family": AlphaCurve.FAMILY, "k": [1, 4],
                        "leave_one_k_out": "none: two points pin the curve's two numbers; its reach past k = 4 "
                                           "is judged on Tables 2-3's tau (provenance.latency_fit.heldout_by)"}
                    acceptance[f"{draft}/{dataset.lower()}/T{temp}"] = entry
        out.append(make_profile(
            f"mcsd-{arch_name}-a6000", "A6000", arch_name, models, latency, drafters, acceptance,
            sources=["MCSD Tables 1 and 7 (alpha, alpha@k)",
                     "MCSD Tables 2, 3 and 4 (speedups with tau: latency fit; Tables 2-3 tau: persistence)",
                     *papers.workload_sources(("alpaca", "wmt"))],
            assumptions=[
                "alpha@k is published for k = 1 and 4 only (Fig. 3 curves have no numbers): alpha_at reads it on "
                "profiles.acceptance.AlphaCurve (logit(alpha) linear in log k), beyond k = 4 on the slope of the two "
                "points",
                "33B targets: MCSD gives no alpha@k; alpha@4 = alpha@1 + the 13B twin's gain (same draft, "
                "dataset, temperature)",
                "persistence (how a position's miss shrinks at depth) is one number for every entry, fitted to the "
                "tau of Tables 2-3",
                "33B targets run on two A6000 in the paper (pipeline): one GPU's bandwidth at a time, no extra "
                "overhead; memory is twice one A6000",
                "one A6000 latency model prices both targets and both draft models from their architectures "
                "(calibrate.papers.base.model_latency); MCSD publishes no absolute latency, so only ratios are fitted",
                "Table 4's 13B rows: the paper's configurations are in its Appendix E tables, which the source copy "
                "lost; priced as the configuration the Profile finds best in the paper's space (budget 32, monotone)",
                "Table 4 'no tree attention' replicates the cache per candidate, a step no method module prices: "
                "left out of the fit",
            ],
            engine={"pooled": {"overhead_s": values["step_overhead_s"], "speculation_s": values["speculation_s"],
                                "overhead_per_token_s": values["per_token_s"]}}, workloads=loads))
    return out


def _twin_config(target_label: str) -> str:
    twin = target_label.replace("13B", "33B")
    rec = papers.records("mcsd", "2", row=f"LLaMA-68M / {twin} / Alpaca / T=1 / Ours", column="tau")[0]
    return papers.k_config(rec)


def _size(target_label: str) -> str:
    return target_label.rsplit("-", 1)[1]


@functools.lru_cache(maxsize=1)
def paper_space() -> tuple[str, ...]:
    """MCSD's own search space (Sec. 4.3): k_i in {1, 2, 4, 8, 16, 32}, prod(k) <= 32, kept to its
    monotonic rule (k_1 >= k_2 >= ...)."""
    from methods.mcsd import K_CHOICES, MAX_DEPTH, k_configurations

    budget = int(papers.value("mcsd", "text", "search space", "max budget K"))
    return tuple(f"mcsd k{'x'.join(map(str, k))}" for k in k_configurations(budget, K_CHOICES, MAX_DEPTH)
                 if all(a >= b for a, b in zip(k, k[1:])))


def _picked_cell(row: str, target: str, repl: bool, speed: float, tau: float, profile: str, ctx: float) -> Cell:
    """A Table 4 13B speedup: its k configuration is the paper's best for the setting, printed in the
    Appendix E tables the source copy lost; priced as the configuration the Profile finds best in the
    paper's space for LLaMA-68M, Alpaca, T=1 (with replacement: one configuration per target, as the
    paper ran one), with the published tau."""
    def predict_one(profiles):
        config, _, _ = model_pick(profiles[profile], "mcsd", paper_space(), drafter="llama-68m",
                                  acceptance="llama-68m/alpaca/T1", ctx=ctx, new_tokens=NEW_TOKENS)
        ratio = step_ratio(profiles[profile], "mcsd", f"{config} {'repl' if repl else 'norepl'}",
                           drafter="llama-68m", ctx=ctx)
        return tau / ratio
    return Cell("mcsd", "4", row, f"{target} speedup", speed, predict_one, "speedup",
                "k = the Profile's best in the paper's space (the 13B configurations are lost)", _size(target))


def cells() -> list[Cell]:
    loads = workloads()
    out = []
    profile_of = {label: f"mcsd-{arch}-a6000" for arch, label in TARGETS.items()}
    for table, draft, rec, config, target, dataset, temp in papers.mcsd_tau_rows():
        published = papers.value("mcsd", table, rec.row, "speedup")
        out.append(speedup_cell("mcsd", table, rec.row, "speedup", published, rec.value, profile_of[target],
                                "mcsd", f"mcsd k{config}", drafter=draft.lower(),
                                ctx=workload_ctx(loads[dataset.lower()]), note=f"k={config}", size=_size(target)))
        out.append(tau_cell("mcsd", table, rec.row, "tau", rec.value, profile_of[target], "mcsd", f"mcsd k{config}",
                            acceptance=f"{draft.lower()}/{dataset.lower()}/T{temp[2:]}", drafter=draft.lower(),
                            new_tokens=NEW_TOKENS, note=f"k={config}", size=_size(target)))
    t2 = papers.table("mcsd", "2")
    t4 = papers.table("mcsd", "4")
    ctx = workload_ctx(loads["alpaca"])
    for row, repl in TABLE_4_ROWS.items():
        for target in TARGETS.values():
            speed, tau = t4[row][f"{target} speedup"], t4[row][f"{target} tau"]
            if target.endswith("13B"):
                out.append(_picked_cell(row, target, repl, speed, tau, profile_of[target], ctx))
                continue
            config = _twin_config(target)
            same = t2.get(f"LLaMA-68M / {target} / Alpaca / T=1 / Ours", {})
            if (same.get("speedup"), same.get("tau")) == (speed, tau):
                continue                      # the same measurement as a Table 2 cell
            out.append(speedup_cell("mcsd", "4", row, f"{target} speedup", speed, tau, profile_of[target], "mcsd",
                                    f"mcsd k{config} {'repl' if repl else 'norepl'}", drafter="llama-68m",
                                    ctx=ctx, note=f"k={config} (Table 2's row of the setting)", size=_size(target)))
    return out


MODEL = PaperModel("mcsd", PARAMS, build, cells)
