"""Kangaroo (Liu et al., 2024): Tables 1 and 2 and the settings quoted in the text.

Table 1 (Spec-Bench, Vicuna, V100): CR is the compression rate (Eq. 1, tokens per target forward),
speedup the walltime ratio. The source copy of Table 1 is partly garbled: cells that cannot be
read unambiguously are stored as NaN with the note "no entry in the paper" (marked "-"), and the
7B Lookahead and 7B Medusa rows are left out entirely for that reason.
"""
from costmodel.papers._records import grid, scalar

PAPER = "kangaroo"

_COLS = "row | Translation CR | Translation speedup | QA CR | QA speedup | Summarization CR | Summarization speedup | Math CR | Math speedup | RAG CR | RAG speedup | MT Bench CR | MT Bench speedup | Avg speedup"

TABLE_1 = _COLS + """
7B / REST | 1.54 | 1.26 | 1.91 | - | 1.64 | - | 1.53 | 1.23 | 1.92 | - | 2.00 | - | 1.43
7B / Kangaroo | 1.41 | 1.24 | 1.87 | 1.43 | 1.87 | 1.50 | 2.14 | 1.61 | 2.05 | 1.52 | 2.22 | 1.68 | 1.50
13B / REST | 1.53 | 1.07 | 1.92 | 1.41 | 1.66 | - | 1.55 | 1.06 | 1.87 | - | 1.98 | - | 1.23
13B / Medusa | 1.61 | 1.33 | 1.49 | 1.25 | 1.53 | 1.25 | 1.80 | 1.48 | 1.53 | 1.23 | 1.82 | 1.48 | 1.34
13B / Kangaroo | 1.45 | 1.18 | 1.79 | 1.34 | 2.00 | 1.41 | 2.42 | 1.63 | 2.16 | 1.40 | 2.44 | 1.66 | 1.44
"""

TABLE_2 = """
row | params | speedup
Medusa | 591 | 1.41
Kangaroo | 67 | 1.50
Kangaroo + Head | 198 | 1.44
1-Layer Transformer | 202 | 1.37
MLP Only | 165 | 1.22
"""

_UNITS = {c.strip(): ("tokens/forward" if c.strip().endswith("CR") else "x") for c in _COLS.split("|")[1:]}

RECORDS = (
    grid(PAPER, "1", TABLE_1, _UNITS, note="Spec-Bench, Vicuna, NVIDIA V100, gamma=6, eta=0.6")
    + grid(PAPER, "2", TABLE_2, {"params": "M params", "speedup": "x"},
           note="adapter architectures for Vicuna-7B; average Spec-Bench speedup")
    + [
        scalar(PAPER, "text", "Vicuna-7B", "exit layer", 2, "layers", "Sec. 4.2"),
        scalar(PAPER, "text", "Vicuna-13B", "exit layer", 3, "layers", "Sec. 4.2"),
        scalar(PAPER, "text", "setting", "gamma", 6, "tokens", "Sec. 4.2 maximum draft steps"),
        scalar(PAPER, "text", "setting", "eta", 0.6, "", "Sec. 4.2 early-exit confidence threshold"),
    ]
)
