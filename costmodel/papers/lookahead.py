"""Lookahead decoding (Fu et al., 2024): Tables 2-4 and the Fig. 4(b) setting alpha=0.425, f=3.106.

Table 3 rows are "(tag) N,W,G" with prompt-as-reference on (+ref) or off; LLaMA-2-7B-Chat on
MT-Bench, A100, FlashAttention. S is the step compression ratio (Eq. 6).
"""
from costmodel.papers._records import grid, scalar

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
