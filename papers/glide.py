"""GLIDE with a CAPE (Du et al., ICML 2024): Tables 1-4 and the settings quoted in the text.

Table 1 rows are "<target> / <draft>"; acceptance is Leviathan's per-token alpha (speculative
sampling), cost is the cost coefficient c (draft / target walltime per forward), gamma = 5.
Table 4 values are tokens/s per sequence (the paper writes "B * v" for batch B).

How the project prices it (`MODEL`):

GLIDE with a CAPE (Du et al., ICML 2024) on H800: Vicuna 7B/13B/33B targets; LLaMA-68m, LLaMA-160m
and GLIDE drafters.

Constraining numbers: Table 4's target-only tokens/s at batch 1-16 (absolute target latency),
Table 1's cost coefficient c (draft / target forward) of every target/draft pair, Table 3's GLIDE
speculation walltime per step. One H800 latency model prices every model from its architecture
(`calibrate.terms.model_latency`: bandwidth and compute efficiencies, the host's launch time
per forward and per layer, per-forward work): the targets, the two draft models and the GLIDE
drafter are none a free number.
"""
from __future__ import annotations

import copy
import functools
import numpy as np
from papers.calibration import Cell, PaperModel, seconds_cell
from calibrate.terms import hardware_terms, model_latency
from papers.base import CTX_REF, hardware_params, make_profile
from costmodel.cape import N_BINS
from costmodel.params import arch_dict, drafter_arch
from papers.published import grid, scalar
from papers import published


PAPER = "glide"

TABLE_1 = """
row | cost | GSM8K acc | GSM8K espd | Fin.-Alp. acc | Fin.-Alp. espd | Spider acc | Spider espd | Code. acc | Code. espd
Vicuna-7B / LLAMA-68m | 7.7 | 51.6 | 1.46 | 49.7 | 1.41 | 19.2 | 0.89 | 34.8 | 1.11
Vicuna-7B / LLAMA-160m | 49.0 | 58.0 | 0.66 | 57.1 | 0.65 | 25.1 | 0.38 | 40.0 | 0.48
Vicuna-7B / GLIDE | 6.7 | 64.8 | 1.97 | 63.2 | 1.90 | 55.7 | 1.64 | 67.0 | 2.06
Vicuna-13B / LLAMA-68m | 6.2 | 50.2 | 1.51 | 49.3 | 1.48 | 19.0 | 0.94 | 32.7 | 1.13
Vicuna-13B / LLAMA-160m | 39.3 | 56.8 | 0.75 | 56.8 | 0.75 | 25.4 | 0.45 | 38.3 | 0.54
Vicuna-13B / GLIDE | 5.5 | 67.1 | 2.16 | 65.0 | 2.07 | 57.1 | 1.77 | 68.6 | 2.24
Vicuna-33B / LLAMA-68m | 4.6 | 49.1 | 1.57 | 46.5 | 1.50 | 30.0 | 1.16 | 31.5 | 1.19
Vicuna-33B / LLAMA-160m | 29.5 | 56.1 | 0.89 | 53.1 | 0.84 | 31.4 | 0.59 | 36.7 | 0.64
Vicuna-33B / GLIDE | 6.8 | 69.3 | 2.16 | 64.3 | 1.94 | 62.7 | 1.87 | 68.9 | 2.14
Mistral-7B-Ins. / LLAMA-45m | 4.9 | 36.7 | 1.27 | 40.2 | 1.34 | 41.9 | 1.38 | 44.5 | 1.44
Mistral-7B-Ins. / GLIDE | 6.6 | 60.1 | 1.80 | 56.4 | 1.67 | 59.8 | 1.79 | 62.6 | 1.89
"""

TABLE_2 = """
row | GSM8K | Fin.-Alp. | Spider | Code-Py.
w/o Dist. | 64.8 | 63.2 | 55.7 | 67.0
w Dist. | 65.0 | 63.9 | 56.0 | 67.5
"""

TABLE_3 = """
row | GLIDE | Beam 4 | Beam 8 | +CAPE
Vicuna-7B | 5.3 | 10.9 | 14.8 | 5.5
Vicuna-13B | 5.3 | 10.9 | 14.9 | 5.5
Vicuna-33B | 9.1 | 17.1 | 24.6 | 8.9
"""

TABLE_4 = """
row | Vicuna-7B +GLIDE | Vicuna-7B Only | Vicuna-13B +GLIDE | Vicuna-13B Only | Vicuna-33B +GLIDE | Vicuna-33B Only
1 | 106.8 | 54.6 | 100.8 | 46.2 | 60.9 | 28.3
2 | 108.2 | 55.6 | 99.5 | 44.5 | 59.8 | 27.9
4 | 116.5 | 55.9 | 100.8 | 42.9 | OOM | OOM
8 | 108.5 | 55.1 | 98.5 | 43.2 | OOM | OOM
16 | 106.2 | 55.4 | OOM | 43.2 | OOM | OOM
32 | OOM | OOM | OOM | OOM | OOM | OOM
"""

_T1_UNITS = {"cost": "%", "acc": "%", "espd": "x"}
_T1_UNITS.update({f"{d} {m}": u for d in ("GSM8K", "Fin.-Alp.", "Spider", "Code.") for m, u in (("acc", "%"), ("espd", "x"))})

RECORDS = (
    grid(PAPER, "1", TABLE_1, _T1_UNITS, note="gamma=5, speculative sampling; espd = Leviathan E(Spd)")
    + grid(PAPER, "2", TABLE_2, "%", note="GLIDE acceptance rate with/without seq-level distillation")
    + grid(PAPER, "3", TABLE_3, "ms", note="draft speculation walltime per step, H800 fp16")
    + grid(PAPER, "4", TABLE_4, "tokens/s per sequence", note="H800 80GB fp16; batch B runs B copies of the input")
    + [
        scalar(PAPER, "text", "experiment design", "gamma", 5, "tokens", "proposal length of Table 1"),
        scalar(PAPER, "text", "CAPE S(p)", "(0,0.3]", 7, "extra tokens", "Sec. 4.2 expansion set size K_i"),
        scalar(PAPER, "text", "CAPE S(p)", "(0.3,0.6]", 5, "extra tokens", "Sec. 4.2"),
        scalar(PAPER, "text", "CAPE S(p)", "(0.6,0.8]", 3, "extra tokens", "Sec. 4.2"),
        scalar(PAPER, "text", "CAPE S(p)", "(0.8,1]", 1, "extra tokens", "Sec. 4.2"),
        scalar(PAPER, "text", "CAPE", "max verification tokens", 32, "tokens", "Sec. 5.3 (Medusa: 64)"),
        scalar(PAPER, "text", "CAPE", "speculation step ms", 5.5, "ms", "Sec. 5.4 GLIDE speculation step"),
        scalar(PAPER, "text", "CAPE", "added ms per step", 0.2, "ms", "Sec. 5.4; beam search adds 5.4 ms"),
        scalar(PAPER, "text", "CAPE vs fixed 4", "CAPE tokens/s", 70.6, "tokens/s", "Sec. 5.4 MT-Bench"),
        scalar(PAPER, "text", "CAPE vs fixed 4", "fixed-4 tokens/s", 68.4, "tokens/s", "Sec. 5.4 MT-Bench"),
    ]
)
published.register(PAPER, RECORDS)

# Algorithm 1's confidence bin array S[floor(10 * max p)] as printed (12 entries; index 10 = p == 1).
CAPE_ALGORITHM_BIN_ARRAY = (8, 8, 8, 8, 6, 6, 6, 6, 4, 4, 2, 2)


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
    row = published.table("mcsd", "7")["LLaMA-68M / Vicuna-13B / T=0"]
    a1, a4 = row["Alpaca alpha@1"], row["Alpaca alpha@4"]
    return ((1.0 - a4) / (1.0 - a1)) ** (1.0 / 3.0)


H800_PRIOR = {"bw_eff": 0.6, "flops_eff": 0.5, "launch_s": 5e-3, "launch_per_layer_s": 4e-4, "overhead_s": 0.0}
PARAMS = hardware_params("H800", H800_PRIOR, fixed=("overhead_s",))
FIXED = {"overhead_s": (0.0, "fitted, it fell to the floor of its range: the host's launch time accounts for "
                              "every forward")}
SPECULATION_STEPS = 5        # Table 3 is per speculation step: gamma = 5 draft forwards (Table 1's gamma)


def build(values: dict[str, float]) -> list:
    t1 = published.table("glide", "1")
    terms = hardware_terms(values)
    how = ("H800 terms fitted to GLIDE Tables 1, 3 and 4 over the three targets (papers.calibration): "
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
                "conf_bins: GLIDE publishes Fig. 1(b) only; filled by papers.glide.assumed_conf_bins "
                f"(calibrated drafter, Beta(1.5 alpha, 1.5 (1 - alpha)) confidences, geometric rank tail r = "
                f"{ratio:.3f} from MCSD Table 7 LLaMA-68M/Vicuna-13B T=0 Alpaca alpha@1 -> alpha@4)",
                "GLIDE drafter architecture: 1 Vicuna layer + cross-attention on the target's KV cache of one "
                "layer, target LM head (costmodel.params.drafter_arch('glide'))",
                "one H800 latency model prices every model from its architecture (calibrate.terms."
                "model_latency): a draft model costs the same whatever the target, and Table 1's costs c are "
                "fitted through it, not matched one by one",
                f"Table 3's speculation step = {SPECULATION_STEPS} drafter forwards (Table 1's gamma)",
                "GLIDE gives no prompt lengths: latency priced at the sweep's default context",
            ]))
    return out


def cells() -> list[Cell]:
    t1, t3, t4 = published.table("glide", "1"), published.table("glide", "3"), published.table("glide", "4")
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
