"""GLIDE with a CAPE (Du et al., ICML 2024) on H800: Vicuna 7B/13B/33B targets; LLaMA-68m, LLaMA-160m
and GLIDE drafters.

Constraining numbers: Table 4's target-only tokens/s at batch 1-16 (absolute target latency),
Table 1's cost coefficient c (draft / target forward) of every target/draft pair, Table 3's GLIDE
speculation walltime per step. One H800 latency model prices every model from its architecture
(`calibrate.papers.base.model_latency`: bandwidth and compute efficiencies, the host's launch time
per forward and per layer, per-forward work): the targets, the two draft models and the GLIDE
drafter are none a free number.
"""
from __future__ import annotations

import copy
import functools

import numpy as np

from calibrate.paper_fit import Cell, PaperModel, seconds_cell
from calibrate.papers.base import CTX_REF, hardware_params, hardware_terms, make_profile, model_latency
from costmodel import papers
from costmodel.cape import N_BINS
from costmodel.params import arch_dict, drafter_arch

TARGETS = {"vicuna-7b": "Vicuna-7B", "vicuna-13b": "Vicuna-13B", "vicuna-33b": "Vicuna-33B"}
DRAFTS = {"llama-68m": "LLAMA-68m", "llama-160m": "LLAMA-160m", "glide": "GLIDE"}
DATASETS = {"GSM8K": "gsm8k", "Fin.-Alp.": "finance-alpaca", "Spider": "spider", "Code.": "code-python"}


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


_conf_bins = functools.lru_cache(maxsize=None)(assumed_conf_bins)     # fits rebuild the Profiles often


def mcsd_rank_ratio() -> float:
    """Geometric rank-tail ratio r with alpha@4 = alpha@1 + (1 - alpha@1)(1 - r^3), MCSD Table 7,
    LLaMA-68M / Vicuna-13B, T=0, Alpaca (the only greedy alpha@k published for a Vicuna target)."""
    row = papers.table("mcsd", "7")["LLaMA-68M / Vicuna-13B / T=0"]
    a1, a4 = row["Alpaca alpha@1"], row["Alpaca alpha@4"]
    return ((1.0 - a4) / (1.0 - a1)) ** (1.0 / 3.0)


H800_PRIOR = {"bw_eff": 0.6, "flops_eff": 0.5, "launch_s": 5e-3, "launch_per_layer_s": 4e-4, "overhead_s": 0.0}
PARAMS = hardware_params("H800", H800_PRIOR, fixed=("overhead_s",))
FIXED = {"overhead_s": (0.0, "fitted, it fell to the floor of its range: the host's launch time accounts for "
                              "every forward")}
SPECULATION_STEPS = 5        # Table 3 is per speculation step: gamma = 5 draft forwards (Table 1's gamma)


def build(values: dict[str, float]) -> list:
    t1 = papers.table("glide", "1")
    terms = hardware_terms(values)
    how = ("H800 terms fitted to GLIDE Tables 1, 3 and 4 over the three targets (calibrate.paper_fit): "
           + ", ".join(f"{k} {v:.4g}" for k, v in terms.items()))
    ratio = mcsd_rank_ratio()
    out = []
    for arch_name, label in TARGETS.items():
        target_arch = arch_dict(arch_name)
        target = model_latency(target_arch, "H800", terms, arch_name, how)
        models, latency, drafters, acceptance = {arch_name: target_arch}, {arch_name: target}, {}, {}
        for draft, draft_label in DRAFTS.items():
            row = t1[f"{label} / {draft_label}"]
            if draft == "glide":
                d_arch, d_model = drafter_arch("glide", target_arch), f"glide-{arch_name}"
            else:
                d_arch, d_model = arch_dict(draft), draft
            latency[d_model] = model_latency(d_arch, "H800", terms, d_model, how)
            models[d_model] = d_arch
            drafters[draft] = {"kind": "glide" if draft == "glide" else "draft_model", "model": d_model}
            for column, dataset in DATASETS.items():
                alpha = row[f"{column} acc"] / 100
                entry = {"drafter": draft, "temperature": 1.0, "dataset": dataset, "alpha": alpha,
                         "source": f"GLIDE Table 1, row {label} / {draft_label}, column {column} acc "
                                   f"(speculative sampling, gamma 5)"}
                if draft == "glide":
                    entry["conf_bins"] = copy.deepcopy(_conf_bins(alpha, ratio))
                acceptance[f"{draft}/{dataset}"] = entry
        out.append(make_profile(
            f"glide-{arch_name}-h800", "H800", arch_name, models, latency, drafters, acceptance,
            sources=["GLIDE Table 1 (alpha; cost c: latency fit)", "GLIDE Table 3 (speculation ms: latency fit)",
                     "GLIDE Table 4 (target tokens/s at batch 1-16: latency fit)",
                     "MCSD Table 7 (rank tail of the assumed CAPE table)"],
            assumptions=[
                "temperature 1.0 stands for GLIDE's speculative sampling; alpha is Leviathan's per-token alpha",
                "conf_bins: GLIDE publishes Fig. 1(b) only; filled by calibrate.papers.glide.assumed_conf_bins "
                f"(calibrated drafter, Beta(1.5 alpha, 1.5 (1 - alpha)) confidences, geometric rank tail r = "
                f"{ratio:.3f} from MCSD Table 7 LLaMA-68M/Vicuna-13B T=0 Alpaca alpha@1 -> alpha@4)",
                "GLIDE drafter architecture: 1 Vicuna layer + cross-attention on the target's KV cache of one "
                "layer, target LM head (costmodel.params.drafter_arch('glide'))",
                "one H800 latency model prices every model from its architecture (calibrate.papers.base."
                "model_latency): a draft model costs the same whatever the target, and Table 1's costs c are "
                "fitted through it, not matched one by one",
                f"Table 3's speculation step = {SPECULATION_STEPS} drafter forwards (Table 1's gamma)",
                "GLIDE gives no prompt lengths: latency priced at the sweep's default context",
            ]))
    return out


def cells() -> list[Cell]:
    t1, t3, t4 = papers.table("glide", "1"), papers.table("glide", "3"), papers.table("glide", "4")
    out = []
    for arch_name, label in TARGETS.items():
        profile = f"glide-{arch_name}-h800"
        for batch, cols in t4.items():
            if f"{label} Only" in cols:
                out.append(seconds_cell("glide", "4", batch, f"{label} Only", 1.0 / cols[f"{label} Only"], profile,
                                        arch_name, ctx=CTX_REF, batch=int(batch),
                                        note="tokens/s per sequence, as seconds per forward", size=label))
        for draft, draft_label in DRAFTS.items():
            model = f"glide-{arch_name}" if draft == "glide" else draft

            def ratio(profiles, profile=profile, model=model, target=arch_name):
                p = profiles[profile]
                return float(p.seconds(model, 1, CTX_REF) / p.seconds(target, 1, CTX_REF))
            row = f"{label} / {draft_label}"
            out.append(Cell("glide", "1", row, "cost", t1[row]["cost"] / 100, ratio, "ratio", size=label))
        out.append(Cell("glide", "3", label, "GLIDE", t3[label]["GLIDE"] / 1e3,
                        lambda profiles, profile=profile, model=f"glide-{arch_name}":
                        SPECULATION_STEPS * float(profiles[profile].seconds(model, 1, CTX_REF)), "seconds",
                        size=label))
    return out


MODEL = PaperModel("glide", PARAMS, build, cells, FIXED)
