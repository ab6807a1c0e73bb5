"""The bundled default Profiles (data/profiles/*.json), built from the papers' published numbers.

`python -m calibrate.paper_profiles [--out data/profiles]` rebuilds them. Every number comes from
`costmodel.papers` (tagged by paper, table, row, column) or from `costmodel.params` /
`costmodel.hardware`; nothing is typed twice. Where a paper does not publish what a Profile field
needs, the assumption that fills the gap is written into the Profile's provenance.

Latency: a roofline on the datasheet of the paper's GPU. Its bandwidth efficiency and a per-layer
overhead are fitted (least squares) to the absolute target latencies the papers give on that GPU
(GLIDE Table 4 on H800, CORAL Table 1 on A6000, Kangaroo's Vicuna-33B quote on V100); a
drafter's fixed overhead is then set so that the drafter/target latency ratio equals the one the
paper measured (GLIDE Table 1's cost c; MCSD's tau/speedup of its SD rows; CORAL Table 1's L_d;
Kangaroo's CR/speedup); the compute efficiency on A100 reproduces Lookahead Table 3's S/speedup.
"""
from __future__ import annotations

import argparse
import math
import subprocess
from pathlib import Path
from typing import Any, Callable

import numpy as np

from calibrate.latency import RooflineLatency
from calibrate.profile import Profile
from costmodel import papers
from costmodel.cape import N_BINS
from costmodel.hardware import get_hardware
from costmodel.latency import ForwardShape, roofline_seconds
from costmodel.leviathan import alpha_from_expected_tokens
from costmodel.params import arch_dict, drafter_arch, get_arch
from costmodel.trees import parse_k_config
from common.errors import cli_entry

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "data" / "profiles"
DTYPE = "fp16"
CTX_REF = 256          # context at which drafter/target latency ratios are matched
DEFAULT_FLOPS_EFF = 0.5


# ---- latency helpers ---------------------------------------------------------------------------------
def fit_target_overheads(points: list[tuple[str, float]], hardware: str) -> tuple[float, float, float]:
    """Bounded least squares (relative error) over (architecture, measured seconds of a 1-token
    forward): seconds ~ weight_bytes / (bandwidth * bw_eff) + fixed_s + n_layers * per_layer_s with
    bw_eff in (0, 1] and both overheads >= 0. Returns (bw_eff, fixed_s, per_layer_s)."""
    from scipy.optimize import lsq_linear

    hw = get_hardware(hardware)
    memory = np.array([ForwardShape.of(a, DTYPE).weight_bytes / hw.bandwidth for a, _ in points])
    layers = np.array([get_arch(a).n_layers for a, _ in points], float)
    seconds = np.array([s for _, s in points])
    design = np.column_stack([memory, np.ones_like(memory), layers]) / seconds[:, None]
    solution = lsq_linear(design, np.ones_like(seconds), bounds=([1.0, 0.0, 0.0], [np.inf, np.inf, np.inf]))
    inv_eff, fixed, per_layer = solution.x
    return 1.0 / inv_eff, float(fixed), float(per_layer)


def describe_fit(fit: tuple[float, float, float], what: str) -> str:
    bw_eff, fixed, per_layer = fit
    return (f"bw_eff {bw_eff:.3f}, overhead {fixed * 1e3:.3f} ms + {per_layer * 1e3:.3f} ms per layer, fitted to "
            f"{what}; flops_eff {DEFAULT_FLOPS_EFF} assumed (no paper number pins it)")


def target_latency(arch: dict[str, Any], hardware: str, fit: tuple[float, float, float], how: str,
                   name: str = "target") -> RooflineLatency:
    bw_eff, fixed, per_layer = fit
    return RooflineLatency(arch=arch, hardware=get_hardware(hardware).name, dtype=DTYPE, bw_eff=bw_eff,
                           flops_eff=DEFAULT_FLOPS_EFF, overhead_s=fixed + per_layer * arch["n_layers"],
                           fit={"method": "paper", "how": how}, name=name)


def drafter_latency(arch: dict[str, Any], target: RooflineLatency, draft_seconds: float, how: str,
                    name: str) -> RooflineLatency:
    """The target's efficiencies, with the fixed overhead that makes one draft forward take draft_seconds."""
    bare = RooflineLatency(arch=arch, hardware=target.hardware, dtype=DTYPE, bw_eff=target.bw_eff,
                           flops_eff=target.flops_eff, name=name)
    overhead = draft_seconds - float(bare.predict(1, CTX_REF))
    if overhead < 0:
        how += f"; the roofline alone exceeds the measured {draft_seconds * 1e3:.2f} ms, overhead set to 0"
    return RooflineLatency(arch=arch, hardware=target.hardware, dtype=DTYPE, bw_eff=target.bw_eff,
                           flops_eff=target.flops_eff, overhead_s=max(overhead, 0.0),
                           fit={"method": "paper", "how": how}, name=name)


def seconds_at_ctx(model: RooflineLatency) -> float:
    return float(model.predict(1, CTX_REF))


def _profile(name, hardware, target, models, latency, drafters, acceptance, sources, assumptions) -> Profile:
    return Profile(name=name, hardware=get_hardware(hardware).name, dtype=DTYPE, target=target, models=models,
                   latency={k: v.to_dict() for k, v in latency.items()}, drafters=drafters, acceptance=acceptance,
                   provenance={"built_by": "python -m calibrate.paper_profiles", "commit": git_commit(),
                               "sources": sources, "assumptions": assumptions, "traces": []})


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).resolve().parent, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _slug(text: str) -> str:
    return text.lower().replace(" ", "-").replace(".", "").replace("/", "-")


# ---- GLIDE (H800) --------------------------------------------------------------------------------------
GLIDE_TARGETS = {"vicuna-7b": "Vicuna-7B", "vicuna-13b": "Vicuna-13B", "vicuna-33b": "Vicuna-33B"}
GLIDE_DRAFTS = {"llama-68m": "LLAMA-68m", "llama-160m": "LLAMA-160m", "glide": "GLIDE"}
GLIDE_DATASETS = {"GSM8K": "gsm8k", "Fin.-Alp.": "finance-alpaca", "Spider": "spider", "Code.": "code-python"}


def assumed_conf_bins(alpha: float, rank_ratio: float, concentration: float = 1.5, ks=(1, 2, 4, 8)) -> dict:
    """CAPE's bin table from a calibrated-drafter assumption, for papers that only plot it.

    Top-1 confidence ~ Beta(concentration * alpha, concentration * (1 - alpha)) (mean alpha),
    binned by costmodel.cape's bins (bin 10 holds conf == 1 alone); P(top-1 hit | bin) = bin centre (calibration); the target token's
    rank beyond 1 is geometric with ratio `rank_ratio`, so P(top-K hit | bin) = c + (1 - c)(1 - r^(K-1)).
    """
    from scipy.stats import beta as beta_dist

    edges = np.linspace(0.0, 1.0, N_BINS)
    dist = beta_dist(concentration * alpha, concentration * (1.0 - alpha))
    freq = np.append(np.diff(dist.cdf(edges)), 0.0)         # bin 10 holds conf == 1 exactly: none
    centre = np.append((edges[:-1] + edges[1:]) / 2, 1.0)
    hits = {str(k): (centre + (1.0 - centre) * (1.0 - rank_ratio ** (k - 1))).tolist() for k in ks}
    return {"freq": (freq / freq.sum()).tolist(), "topk_hit": hits}


def mcsd_rank_ratio() -> float:
    """Geometric rank-tail ratio r with alpha@4 = alpha@1 + (1 - alpha@1)(1 - r^3), MCSD Table 7,
    LLaMA-68M / Vicuna-13B, T=0, Alpaca (the only greedy alpha@k published for a Vicuna target)."""
    row = papers.table("mcsd", "7")["LLaMA-68M / Vicuna-13B / T=0"]
    a1, a4 = row["Alpaca alpha@1"], row["Alpaca alpha@4"]
    return ((1.0 - a4) / (1.0 - a1)) ** (1.0 / 3.0)


def glide_profiles() -> list[Profile]:
    t1, t4 = papers.table("glide", "1"), papers.table("glide", "4")
    points = [(arch, 1.0 / t4["1"][f"{label} Only"]) for arch, label in GLIDE_TARGETS.items()]
    fit = fit_target_overheads(points, "H800")
    how_t = describe_fit(fit, "GLIDE Table 4 batch-1 'Only' tokens/s of Vicuna-7B/13B/33B on one H800")
    ratio = mcsd_rank_ratio()
    out = []
    for arch_name, label in GLIDE_TARGETS.items():
        target_arch = arch_dict(arch_name)
        target = target_latency(target_arch, "H800", fit, how_t, name=arch_name)
        t_ref = seconds_at_ctx(target)
        models, latency, drafters, acceptance = {arch_name: target_arch}, {arch_name: target}, {}, {}
        for draft, draft_label in GLIDE_DRAFTS.items():
            row = t1[f"{label} / {draft_label}"]
            d_arch = drafter_arch("glide", target_arch) if draft == "glide" else arch_dict(draft)
            d_model = f"glide-{arch_name}" if draft == "glide" else draft
            models[d_model] = d_arch
            latency[d_model] = drafter_latency(d_arch, target, row["cost"] / 100 * t_ref,
                                               f"overhead set so that draft/target latency = GLIDE Table 1 cost "
                                               f"c = {row['cost']}% ({label} / {draft_label}) at ctx {CTX_REF}",
                                               d_model)
            drafters[draft] = {"kind": "glide" if draft == "glide" else "draft_model", "model": d_model}
            for column, dataset in GLIDE_DATASETS.items():
                alpha = row[f"{column} acc"] / 100
                entry = {"drafter": draft, "temperature": 1.0, "dataset": dataset, "alpha": alpha,
                         "source": f"GLIDE Table 1, row {label} / {draft_label}, column {column} acc "
                                   f"(speculative sampling, gamma 5)"}
                if draft == "glide":
                    entry["conf_bins"] = assumed_conf_bins(alpha, ratio)
                acceptance[f"{draft}/{dataset}"] = entry
        out.append(_profile(
            f"glide-{arch_name}-h800", "H800", arch_name, models, latency, drafters, acceptance,
            sources=["GLIDE Table 1 (alpha, cost c)", "GLIDE Table 4 (batch-1 target tokens/s)",
                     "MCSD Table 7 (rank tail of the assumed CAPE table)"],
            assumptions=[
                "temperature 1.0 stands for GLIDE's speculative sampling; alpha is Leviathan's per-token alpha",
                "conf_bins: GLIDE publishes Fig. 1(b) only; filled by calibrate.paper_profiles.assumed_conf_bins "
                f"(calibrated drafter, Beta(1.5 alpha, 1.5 (1 - alpha)) confidences, geometric rank tail r = "
                f"{ratio:.3f} from MCSD Table 7 LLaMA-68M/Vicuna-13B T=0 Alpaca alpha@1 -> alpha@4)",
                "GLIDE drafter architecture: 1 Vicuna layer + cross-attention on the target's last-layer KV "
                "cache, target LM head (costmodel.params.drafter_arch('glide'))",
                "Vicuna-33B's LLaMA-68m/160m drafter overheads differ from the 7B profile's: each profile "
                "matches its own Table 1 cost c",
            ]))
    return out


# ---- MCSD (A6000) --------------------------------------------------------------------------------------
MCSD_TARGETS = {"llama-13b": "LLaMA-13B", "vicuna-13b": "Vicuna-13B", "llama-33b": "LLaMA-33B",
                "vicuna-33b": "Vicuna-33B"}
MCSD_DRAFTS = {"llama-68m": ("LLaMA-68M", "2"), "llama-160m": ("LLaMA-160M", "3")}
MCSD_FINETUNED = {"vicuna-68m": ("Vicuna-68M", "llama-68m"), "vicuna-160m": ("Vicuna-160M", "llama-160m")}


def a6000_target_fit() -> tuple[float, float, float]:
    """bw_eff and per-layer overhead on A6000 from CORAL Table 1's one-token target latencies L_t."""
    t1 = papers.table("coral", "1")
    names = {"Llama2-7B": "llama-2-7b", "Llama3-8B": "llama-3-8b", "Qwen2.5-7B": "qwen2.5-7b"}
    return fit_target_overheads([(names[row], t1[row]["L_t"] / 1e3) for row in names], "A6000")


A6000_FIT_SOURCE = "CORAL Table 1 L_t (Llama2-7B, Llama3-8B, Qwen2.5-7B; one A6000, one token)"


def mcsd_draft_cost(table: str) -> float:
    """Median draft/target latency ratio c over the SD rows of MCSD Table 2 or 3 (33B targets, A6000):
    speedup = tau / (1 + gamma c) with the verification forward taken equal to a one-token one."""
    costs = []
    for rec in papers.records("mcsd", table, column="tau"):
        if "SD (" not in rec.row:
            continue
        config = papers.k_config(rec)
        if config is None:
            continue
        gamma = len(parse_k_config(config))
        speedup = papers.value("mcsd", table, rec.row, "speedup")
        costs.append((rec.value / speedup - 1.0) / gamma)
    return float(np.median(costs))


def mcsd_profiles() -> list[Profile]:
    fit = a6000_target_fit()
    how_t = describe_fit(fit, A6000_FIT_SOURCE)
    t1, t7 = papers.table("mcsd", "1"), papers.table("mcsd", "7")
    vicuna33 = target_latency(arch_dict("vicuna-33b"), "A6000", fit, how_t)
    draft_seconds = {d: mcsd_draft_cost(tab) * seconds_at_ctx(vicuna33) for d, (_, tab) in MCSD_DRAFTS.items()}
    out = []
    for arch_name, label in MCSD_TARGETS.items():
        target_arch = arch_dict(arch_name)
        target = target_latency(target_arch, "A6000", fit, how_t, name=arch_name)
        models, latency, drafters, acceptance = {arch_name: target_arch}, {arch_name: target}, {}, {}
        for draft, (draft_label, tab) in MCSD_DRAFTS.items():
            models[draft] = arch_dict(draft)
            latency[draft] = drafter_latency(
                models[draft], target, draft_seconds[draft],
                f"draft forward = c x Vicuna-33B forward, c = {mcsd_draft_cost(tab):.4f} the median "
                f"(tau / speedup - 1) / gamma over MCSD Table {tab}'s SD rows (A6000)", draft)
            drafters[draft] = {"kind": "draft_model", "model": draft}
        if arch_name.endswith("13b"):
            for draft, (draft_label, base) in MCSD_FINETUNED.items():
                drafters[draft] = {"kind": "draft_model", "model": base}
        all_drafts = {**{d: lab for d, (lab, _) in MCSD_DRAFTS.items()},
                      **({d: lab for d, (lab, _) in MCSD_FINETUNED.items()} if arch_name.endswith("13b") else {})}
        for draft, draft_label in all_drafts.items():
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
                    acceptance[f"{draft}/{dataset.lower()}/T{temp}"] = entry
        out.append(_profile(
            f"mcsd-{arch_name}-a6000", "A6000", arch_name, models, latency, drafters, acceptance,
            sources=["MCSD Tables 1 and 7 (alpha, alpha@k)", "MCSD Tables 2 and 3 (draft cost from SD rows)",
                     "CORAL Table 1 (A6000 target latencies)"],
            assumptions=[
                "alpha@k is published for k = 1 and 4 only (Fig. 3 curves have no numbers): alpha_at interpolates "
                "in log2 k between them and holds alpha@4 beyond k = 4, which understates wide trees",
                "33B targets: MCSD gives no alpha@k; alpha@4 = alpha@1 + the 13B twin's gain (same draft, "
                "dataset, temperature)",
                "33B targets run on two A6000 in the paper (pipeline): one GPU's bandwidth at a time, so the "
                "single-A6000 roofline applies; memory is twice one A6000",
                "A6000 efficiency comes from CORAL's EAGLE code base, not MCSD's; MCSD publishes no absolute "
                "latency",
            ]))
    return out


# ---- Lookahead (A100-80G) -------------------------------------------------------------------------------
def lookahead_profiles() -> list[Profile]:
    from costmodel.lookahead import input_tokens_per_step

    t3 = papers.table("lookahead", "3")
    rows = [r for r in t3 if "+ref" not in r and not math.isnan(t3[r].get("N", math.nan))]
    n, w, g = (np.array([t3[r][c] for r in rows], int) for c in ("N", "W", "G"))
    s_measured = np.array([t3[r]["S"] for r in rows])
    step_ratio = s_measured / np.array([t3[r]["speedup"] for r in rows])      # L(tokens) / L(1)
    tokens = input_tokens_per_step(n, w, g) + 1
    arch = arch_dict("llama-2-7b")
    bw_eff = 0.8
    shape, hw = ForwardShape.of(arch, DTYPE), get_hardware("A100-80G")

    def ratio_error(log_eff: float) -> float:
        t = roofline_seconds(shape, hw, DTYPE, np.append(tokens, 1), CTX_REF, 1, bw_eff, math.exp(log_eff))
        return float(np.sum((t[:-1] / t[-1] - step_ratio) ** 2))

    grid = np.linspace(math.log(0.05), math.log(1.0), 400)
    flops_eff = float(math.exp(grid[int(np.argmin([ratio_error(x) for x in grid]))]))
    how = (f"bw_eff {bw_eff} assumed, no overhead; flops_eff {flops_eff:.3f} fitted so that L(tokens)/L(1) "
           f"matches S/speedup of Lookahead Table 3 rows {', '.join(rows)}")
    target = RooflineLatency(arch=arch, hardware="A100-80G", dtype=DTYPE, bw_eff=bw_eff, flops_eff=flops_eff,
                             fit={"method": "paper", "how": how}, name="llama-2-7b")
    fig = {c: papers.value("lookahead", "fig4b", "setting", c) for c in ("alpha", "f")}
    acceptance = {
        "lookahead/mt-bench": {"drafter": "lookahead", "temperature": 0.0, "dataset": "mt-bench",
                               "alpha": fig["alpha"], "lookahead": fig,
                               "source": "Lookahead Fig. 4(b) setting alpha = 0.425, f = 3.106"},
    }
    return [_profile("lookahead-llama-2-7b-a100", "A100-80G", "llama-2-7b", {"llama-2-7b": arch},
                     {"llama-2-7b": target}, {"lookahead": {"kind": "lookahead"}}, acceptance,
                     sources=["Lookahead Fig. 4(b) (alpha, f)", "Lookahead Table 3 (S, speedup)"],
                     assumptions=["LLaMA-2-7B-Chat has LLaMA-2-7B's architecture",
                                  "bandwidth efficiency 0.8 and zero fixed overhead: the paper gives no absolute "
                                  "latency; only ratios pin the compute efficiency",
                                  "prompt-as-reference rows (+ref) are left out of the alpha/f fit"])]


# ---- Kangaroo (V100) ------------------------------------------------------------------------------------
def kangaroo_profiles() -> list[Profile]:
    t1 = papers.table("kangaroo", "1")
    gamma = int(papers.value("kangaroo", "text", "setting", "gamma"))
    eta = papers.value("kangaroo", "text", "setting", "eta")
    # "Vicuna-33B on four V100 yields seven tokens per second" (Sec. 1); pipeline: one GPU's bandwidth at a time
    bw_eff = ForwardShape.of("vicuna-33b", DTYPE).weight_bytes / get_hardware("V100").bandwidth / (1.0 / 7.0)
    out = []
    for arch_name, label in (("vicuna-7b", "7B"), ("vicuna-13b", "13B")):
        row = t1[f"{label} / Kangaroo"]
        exit_layer = int(papers.value("kangaroo", "text", f"Vicuna-{label}", "exit layer"))
        tasks = sorted({c.rsplit(" ", 1)[0] for c in row if c.endswith(" CR")})
        target_arch = arch_dict(arch_name)
        target = target_latency(target_arch, "V100", (bw_eff, 0.0, 0.0),
                                describe_fit((bw_eff, 0.0, 0.0), "Kangaroo Sec. 1: Vicuna-33B on four V100 "
                                             "(pipeline, one GPU's bandwidth at a time) at 7 tokens/s; no overhead "
                                             "term (one number)"), name=arch_name)
        costs = [(row[f"{t} CR"] / row[f"{t} speedup"] - 1.0) / min(row[f"{t} CR"], gamma)
                 for t in tasks if f"{t} speedup" in row]
        cost = float(np.median(costs))
        d_arch = drafter_arch("kangaroo", target_arch, exit_layer=exit_layer)
        d_name = f"kangaroo-{arch_name}"
        drafter = drafter_latency(d_arch, target, cost * seconds_at_ctx(target),
                                  f"draft/target latency c = {cost:.3f}: median over Kangaroo Table 1 tasks of "
                                  f"(CR / speedup - 1) / min(CR, gamma), taking drafted steps ~ CR", d_name)
        acceptance = {}
        for task in tasks:
            cr = row[f"{task} CR"]
            alpha = float(alpha_from_expected_tokens(cr, gamma))
            acceptance[f"kangaroo/{_slug(task)}"] = {
                "drafter": "kangaroo", "temperature": 0.0, "dataset": f"spec-bench-{_slug(task)}", "alpha": alpha,
                "compression_rate": cr, "eta": eta,
                "source": f"Kangaroo Table 1, row {label} / Kangaroo, column {task} CR = {cr}; alpha = chain "
                          f"inverse (1 - a^(g+1)) / (1 - a) = CR at gamma {gamma}"}
        out.append(_profile(
            f"kangaroo-{arch_name}-v100", "V100", arch_name, {arch_name: target_arch, d_name: d_arch},
            {arch_name: target, d_name: drafter},
            {"kangaroo": {"kind": "kangaroo", "exit_layer": exit_layer, "adapter_model": d_name, "model": d_name}},
            acceptance, sources=["Kangaroo Table 1 (CR, speedup)", "Kangaroo Sec. 4.2 (exit layer, gamma, eta)"],
            assumptions=[f"per-token alpha inverted from CR with the chain formula at gamma {gamma}, ignoring the "
                         f"eta = {eta} early exit (which lowers CR for a given alpha): a lower bound on alpha",
                         "drafted steps per cycle taken as min(CR, gamma) to turn CR/speedup into a cost ratio"]))
    return out


# ---- CORAL / EAGLE (A6000) --------------------------------------------------------------------------------
CORAL_TARGETS = {"llama-3-8b": ("L3-8B", "Llama3-8B"), "qwen2.5-7b": ("Q2.5-7B", "Qwen2.5-7B")}
CORAL_DRAFTERS = {"EAGLE-2": "eagle", "HASS": "hass", "CORAL": "coral", "CORAL w/ r.": "coral-router"}


def coral_profiles() -> list[Profile]:
    fit = a6000_target_fit()
    t1, t2 = papers.table("coral", "1"), papers.table("coral", "2")
    depth = int(papers.value("coral", "text", "inference", "tree depth"))
    top_n = int(papers.value("coral", "text", "router", "top-n"))
    groups = int(papers.value("coral", "text", "router", "N"))
    how_t = describe_fit(fit, A6000_FIT_SOURCE)
    out = []
    for arch_name, (short, t1_row) in CORAL_TARGETS.items():
        target_arch = arch_dict(arch_name)
        target = target_latency(target_arch, "A6000", fit, how_t, name=arch_name)
        head = drafter_arch("eagle", target_arch)
        router = drafter_arch("eagle", target_arch, top_n=top_n, groups=groups)
        l_d = t1[t1_row]["L_d"] / 1e3
        head_latency = drafter_latency(head, target, l_d, f"overhead set so that one head forward = CORAL Table 1 "
                                                          f"L_d = {l_d * 1e3} ms ({t1_row})", f"eagle-{arch_name}")
        router_latency = RooflineLatency(arch=router, hardware="A6000", dtype=DTYPE, bw_eff=fit[0],
                                         flops_eff=DEFAULT_FLOPS_EFF, overhead_s=head_latency.overhead_s,
                                         fit={"method": "paper", "how": "the head's efficiencies and overhead; the "
                                              f"router reads top-{top_n}/{groups} of the LM head"},
                                         name=f"coral-router-{arch_name}")
        models = {arch_name: target_arch, f"eagle-{arch_name}": head, f"coral-router-{arch_name}": router}
        latency = {arch_name: target, f"eagle-{arch_name}": head_latency, f"coral-router-{arch_name}": router_latency}
        drafters = {d: {"kind": "coral", "model": f"{'coral-router' if d == 'coral-router' else 'eagle'}-{arch_name}",
                        **({"router": {"groups": groups, "top_n": top_n}} if d == "coral-router" else {})}
                    for d in CORAL_DRAFTERS.values()}
        acceptance = {}
        for row_name, drafter in CORAL_DRAFTERS.items():
            cells = t2.get(f"{short} / {row_name}", {})
            for column in ("MT-bench", "HumanEval", "GSM8K"):
                for temp in (0, 1):
                    tau = cells.get(f"{column} T={temp} tau")
                    if tau is None:
                        continue
                    acceptance[f"{drafter}/{column.lower()}/T{temp}"] = {
                        "drafter": drafter, "temperature": float(temp), "dataset": column.lower(),
                        "alpha": float(alpha_from_expected_tokens(min(tau, depth + 1.0), depth)), "tau": tau,
                        "tree": {"depth": depth, "candidates": int(papers.value("coral", "text", "inference",
                                                                                "candidates"))},
                        "source": f"CORAL Table 2, row {short} / {row_name}, column {column} T={temp} tau = {tau}; "
                                  f"alpha = chain-equivalent inverse at gamma {depth}"}
        out.append(_profile(
            f"coral-{arch_name}-a6000", "A6000", arch_name, models, latency, drafters, acceptance,
            sources=["CORAL Table 1 (L_t, L_d)", "CORAL Table 2 (tau)", "CORAL Sec. 4.1-4.2 (tree, router)"],
            assumptions=[f"alpha is the chain alpha giving the tree's tau at depth {depth}: a tree of 60 candidates "
                         "reaches tau with a lower per-token alpha, so this alpha overstates a chain drafter's",
                         "EAGLE head: fc 2h -> h + one target-shaped decoder layer + the target's LM head",
                         "A6000 fixed overheads: per-layer term from the targets, the head's from its own L_d"]))
    return out


BUILDERS: dict[str, Callable[[], list[Profile]]] = {
    "glide": glide_profiles, "mcsd": mcsd_profiles, "lookahead": lookahead_profiles,
    "kangaroo": kangaroo_profiles, "coral": coral_profiles,
}


def build_all(out_dir: Path = DEFAULT_OUT, only: list[str] | None = None) -> list[Path]:
    written = []
    for key, build in BUILDERS.items():
        if only and key not in only:
            continue
        for profile in build():
            written.append(profile.save(Path(out_dir) / f"{profile.name}.json"))
    return written


@cli_entry
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the bundled default Profiles from the papers' numbers.")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="directory for the Profile JSON files")
    parser.add_argument("--only", nargs="*", choices=list(BUILDERS), help="build only these papers' profiles")
    args = parser.parse_args(argv)
    for path in build_all(args.out, args.only):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
