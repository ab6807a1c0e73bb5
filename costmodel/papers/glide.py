"""GLIDE with a CAPE (Du et al., ICML 2024): Tables 1-4 and the settings quoted in the text.

Table 1 rows are "<target> / <draft>"; acceptance is Leviathan's per-token alpha (speculative
sampling), cost is the cost coefficient c (draft / target walltime per forward), gamma = 5.
Table 4 values are tokens/s per sequence (the paper writes "B * v" for batch B).
"""
from costmodel.papers._records import grid, scalar

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

# Algorithm 1's confidence bin array S[floor(10 * max p)] as printed (12 entries; index 10 = p == 1).
CAPE_ALGORITHM_BIN_ARRAY = (8, 8, 8, 8, 6, 6, 6, 6, 4, 4, 2, 2)
