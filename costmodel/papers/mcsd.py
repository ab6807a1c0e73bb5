"""Multi-Candidate Speculative Decoding (Yang et al., 2024): Tables 1-4 and 7.

alpha here is MCSD's acceptance rate: the probability that a step with k candidates accepts one of
them (alpha@k; alpha@1 is the ordinary per-token acceptance). Tables 2 and 3 store the k
configuration of each row in the record's note as "k=<config>" ("k=?" where the source copy lost
it); `k_config(record)` reads it back. Temp 0 uses argmax sampling (candidates are the draft's
top-k), temp 1 standard sampling.
"""
from __future__ import annotations

from costmodel.papers._records import Record, grid, scalar

PAPER = "mcsd"

TABLE_1 = """
row | Alpaca | WMT
LLaMA-68M / LLaMA-13B / T=0 | 0.76 | 0.55
LLaMA-68M / Vicuna-13B / T=0 | 0.49 | 0.36
LLaMA-68M / LLaMA-33B / T=0 | 0.75 | 0.58
LLaMA-68M / Vicuna-33B / T=0 | 0.52 | 0.22
LLaMA-68M / LLaMA-13B / T=1 | 0.51 | 0.39
LLaMA-68M / Vicuna-13B / T=1 | 0.36 | 0.25
LLaMA-68M / LLaMA-33B / T=1 | 0.51 | 0.38
LLaMA-68M / Vicuna-33B / T=1 | 0.35 | 0.24
LLaMA-160M / LLaMA-13B / T=0 | 0.80 | 0.59
LLaMA-160M / Vicuna-13B / T=0 | 0.54 | 0.39
LLaMA-160M / LLaMA-33B / T=0 | 0.78 | 0.61
LLaMA-160M / Vicuna-33B / T=0 | 0.54 | 0.25
LLaMA-160M / LLaMA-13B / T=1 | 0.57 | 0.43
LLaMA-160M / Vicuna-13B / T=1 | 0.42 | 0.29
LLaMA-160M / LLaMA-33B / T=1 | 0.57 | 0.42
LLaMA-160M / Vicuna-33B / T=1 | 0.42 | 0.25
"""

# dataset | temp | method | target | k config | speedup | tau
TABLE_2_ROWS = """
Alpaca | 0 | SD (same gamma) | LLaMA-33B | ? | 2.71 | 3.19
Alpaca | 0 | SD (best gamma) | LLaMA-33B | ? | 2.89 | 3.70
Alpaca | 0 | Ours | LLaMA-33B | ? | 3.06 | 3.93
Alpaca | 0 | SD (same gamma) | Vicuna-33B | 1x1x1x1 | 1.64 | 1.97
Alpaca | 0 | SD (best gamma) | Vicuna-33B | 1x1x1x1x1x1 | 1.70 | 2.03
Alpaca | 0 | Ours | Vicuna-33B | 8x2x1x1 | 2.06 | 2.56
Alpaca | 1 | SD (same gamma) | LLaMA-33B | 1x1x1x1 | 1.69 | 1.98
Alpaca | 1 | SD (best gamma) | LLaMA-33B | 1x1x1x1x1 | 1.73 | 2.02
Alpaca | 1 | Ours | LLaMA-33B | 8x2x1x1 | 2.17 | 2.71
Alpaca | 1 | SD (same gamma) | Vicuna-33B | 1x1x1 | 1.33 | 1.53
Alpaca | 1 | SD (best gamma) | Vicuna-33B | 1x1x1x1x1 | 1.34 | 1.58
Alpaca | 1 | Ours | Vicuna-33B | 16x1x1 | 1.73 | 2.10
WMT | 0 | SD (same gamma) | LLaMA-33B | 1x1x1x1x1 | 2.02 | 2.38
WMT | 0 | SD (best gamma) | LLaMA-33B | 1x1x1x1x1x1x1 | 2.06 | 2.52
WMT | 0 | Ours | LLaMA-33B | 4x2x2x1x1 | 2.24 | 2.87
WMT | 0 | SD (same gamma) | Vicuna-33B | 1x1 | 1.15 | 1.29
WMT | 0 | SD (best gamma) | Vicuna-33B | 1x1 | 1.15 | 1.29
WMT | 0 | Ours | Vicuna-33B | 16x2 | 1.45 | 1.73
WMT | 1 | SD (same gamma) | LLaMA-33B | 1x1x1 | 1.41 | 1.63
WMT | 1 | SD (best gamma) | LLaMA-33B | 1x1x1x1x1 | 1.43 | 1.69
WMT | 1 | Ours | LLaMA-33B | 8x2x1 | 1.72 | 2.08
WMT | 1 | SD (same gamma) | Vicuna-33B | 1x1 | 1.13 | 1.26
WMT | 1 | SD (best gamma) | Vicuna-33B | 1x1x1 | 1.14 | 1.31
WMT | 1 | Ours | Vicuna-33B | 16x2 | 1.42 | 1.70
"""

TABLE_3_ROWS = """
Alpaca | 0 | SD (same gamma) | LLaMA-33B | 1x1x1x1 | 2.10 | 3.20
Alpaca | 0 | SD (best gamma) | LLaMA-33B | 1x1x1x1x1 | 2.16 | 3.49
Alpaca | 0 | Ours | LLaMA-33B | 4x2x2x1 | 2.42 | 3.87
Alpaca | 0 | SD (same gamma) | Vicuna-33B | 1x1x1 | 1.33 | 1.97
Alpaca | 0 | SD (best gamma) | Vicuna-33B | 1x1 | 1.40 | 1.81
Alpaca | 0 | Ours | Vicuna-33B | 8x2x2 | 1.72 | 2.59
Alpaca | 1 | SD (same gamma) | LLaMA-33B | 1x1x1 | 1.43 | 2.05
Alpaca | 1 | SD (best gamma) | LLaMA-33B | 1x1 | 1.47 | 1.90
Alpaca | 1 | Ours | LLaMA-33B | 8x2x2 | 1.85 | 2.79
Alpaca | 1 | SD (same gamma) | Vicuna-33B | 1x1 | 1.24 | 1.60
Alpaca | 1 | SD (best gamma) | Vicuna-33B | 1x1 | 1.24 | 1.60
Alpaca | 1 | Ours | Vicuna-33B | 16x2 | 1.62 | 2.21
WMT | 0 | SD (same gamma) | LLaMA-33B | 1x1x1x1 | 1.54 | 2.42
WMT | 0 | SD (best gamma) | LLaMA-33B | 1x1x1 | 1.57 | 2.25
WMT | 0 | Ours | LLaMA-33B | 8x2x1x1 | 1.81 | 2.96
WMT | 0 | SD (same gamma) | Vicuna-33B | 1 | 1.06 | 1.25
WMT | 0 | SD (best gamma) | Vicuna-33B | 1 | 1.06 | 1.25
WMT | 0 | Ours | Vicuna-33B | 32 | 1.33 | 1.66
WMT | 1 | SD (same gamma) | LLaMA-33B | 1x1 | 1.22 | 1.62
WMT | 1 | SD (best gamma) | LLaMA-33B | 1x1 | 1.22 | 1.62
WMT | 1 | Ours | LLaMA-33B | 16x2 | 1.52 | 2.14
WMT | 1 | SD (same gamma) | Vicuna-33B | 1 | 1.06 | 1.25
WMT | 1 | SD (best gamma) | Vicuna-33B | 1 | 1.06 | 1.25
WMT | 1 | Ours | Vicuna-33B | 32 | 1.30 | 1.63
"""

TABLE_4 = """
row | LLaMA-13B speedup | LLaMA-13B tau | Vicuna-13B speedup | Vicuna-13B tau | LLaMA-33B speedup | LLaMA-33B tau | Vicuna-33B speedup | Vicuna-33B tau
MCSS w/o replacement | 1.91 | 2.45 | 1.64 | 2.00 | 2.17 | 2.71 | 1.73 | 2.10
MCSS w/ replacement | 1.89 | 2.39 | 1.55 | 1.95 | 2.04 | 2.55 | 1.66 | 2.01
MCNS | 1.21 | 1.52 | 1.45 | 1.78 | 1.33 | 1.65 | 1.50 | 1.80
MCSS w/o replacement, no tree attention | 1.61 | 2.47 | 1.36 | 1.99 | 1.84 | 2.68 | 1.51 | 2.09
"""

TABLE_7 = """
row | Alpaca alpha@1 | Alpaca alpha@4 | WMT alpha@1 | WMT alpha@4
LLaMA-68M / LLaMA-13B / T=0 | 0.76 | 0.88 | 0.55 | 0.68
LLaMA-68M / Vicuna-13B / T=0 | 0.49 | 0.67 | 0.36 | 0.51
LLaMA-68M / LLaMA2-13B / T=0 | 0.75 | 0.88 | 0.57 | 0.71
LLaMA-68M / LLaMA2-13B-chat / T=0 | 0.47 | 0.66 | 0.30 | 0.44
Vicuna-68M / LLaMA-13B / T=0 | 0.75 | 0.90 | 0.56 | 0.69
Vicuna-68M / Vicuna-13B / T=0 | 0.56 | 0.76 | 0.38 | 0.57
Vicuna-68M / LLaMA2-13B / T=0 | 0.74 | 0.89 | 0.56 | 0.69
Vicuna-68M / LLaMA2-13B-chat / T=0 | 0.55 | 0.75 | 0.32 | 0.53
LLaMA-160M / LLaMA-13B / T=0 | 0.80 | 0.91 | 0.59 | 0.72
LLaMA-160M / Vicuna-13B / T=0 | 0.54 | 0.73 | 0.39 | 0.54
LLaMA-160M / LLaMA2-13B / T=0 | 0.78 | 0.90 | 0.61 | 0.74
LLaMA-160M / LLaMA2-13B-chat / T=0 | 0.52 | 0.72 | 0.32 | 0.48
Vicuna-160M / LLaMA-13B / T=0 | 0.78 | 0.91 | 0.59 | 0.72
Vicuna-160M / Vicuna-13B / T=0 | 0.62 | 0.81 | 0.40 | 0.58
Vicuna-160M / LLaMA2-13B / T=0 | 0.77 | 0.90 | 0.59 | 0.72
Vicuna-160M / LLaMA2-13B-chat / T=0 | 0.61 | 0.81 | 0.33 | 0.54
OPT-125M / OPT-13B / T=0 | 0.86 | 0.95 | 0.97 | 0.99
OPT-125M / OPT-30B / T=0 | 0.83 | 0.94 | 0.80 | 0.89
OPT-125M / OPT-iml-30B / T=0 | 0.81 | 0.93 | 0.40 | 0.77
LLaMA-68M / LLaMA-13B / T=1 | 0.51 | 0.72 | 0.39 | 0.56
LLaMA-68M / Vicuna-13B / T=1 | 0.35 | 0.57 | 0.25 | 0.41
LLaMA-68M / LLaMA2-13B / T=1 | 0.51 | 0.71 | 0.38 | 0.57
LLaMA-68M / LLaMA2-13B-chat / T=1 | 0.35 | 0.57 | 0.25 | 0.39
Vicuna-68M / LLaMA-13B / T=1 | 0.48 | 0.69 | 0.38 | 0.55
Vicuna-68M / Vicuna-13B / T=1 | 0.46 | 0.68 | 0.29 | 0.45
Vicuna-68M / LLaMA2-13B / T=1 | 0.49 | 0.69 | 0.38 | 0.56
Vicuna-68M / LLaMA2-13B-chat / T=1 | 0.46 | 0.69 | 0.30 | 0.49
LLaMA-160M / LLaMA-13B / T=1 | 0.57 | 0.76 | 0.43 | 0.61
LLaMA-160M / Vicuna-13B / T=1 | 0.42 | 0.63 | 0.29 | 0.45
LLaMA-160M / LLaMA2-13B / T=1 | 0.57 | 0.75 | 0.43 | 0.61
LLaMA-160M / LLaMA2-13B-chat / T=1 | 0.41 | 0.63 | 0.29 | 0.44
Vicuna-160M / LLaMA-13B / T=1 | 0.54 | 0.73 | 0.41 | 0.58
Vicuna-160M / Vicuna-13B / T=1 | 0.53 | 0.74 | 0.31 | 0.48
Vicuna-160M / LLaMA2-13B / T=1 | 0.54 | 0.73 | 0.41 | 0.59
Vicuna-160M / LLaMA2-13B-chat / T=1 | 0.54 | 0.75 | 0.33 | 0.51
OPT-125M / OPT-13B / T=1 | 0.63 | 0.81 | 0.59 | 0.78
OPT-125M / OPT-30B / T=1 | 0.60 | 0.79 | 0.56 | 0.76
OPT-125M / OPT-iml-30B / T=1 | 0.61 | 0.78 | 0.44 | 0.68
"""


def _main_table(table: str, rows_text: str, draft: str) -> list[Record]:
    records = []
    for line in rows_text.strip().splitlines():
        dataset, temp, method, target, config, speedup, tau = (c.strip() for c in line.split("|"))
        row = f"{draft} / {target} / {dataset} / T={temp} / {method}"
        note = f"k={config}; A6000 fp16, max 128 new tokens"
        records.append(Record(PAPER, table, row, "speedup", float(speedup), "x", note))
        records.append(Record(PAPER, table, row, "tau", float(tau), "tokens/step", note))
    return records


def k_config(record: Record) -> str | None:
    """The k configuration stored in a Table 2/3 record's note, or None where the source lost it."""
    for part in record.note.split(";"):
        part = part.strip()
        if part.startswith("k="):
            return None if part[2:] == "?" else part[2:]
    return None


RECORDS = (
    grid(PAPER, "1", TABLE_1, "", note="alpha@1 (baseline acceptance), rows draft / target / temperature")
    + _main_table("2", TABLE_2_ROWS, "LLaMA-68M")
    + _main_table("3", TABLE_3_ROWS, "LLaMA-160M")
    + grid(PAPER, "4", TABLE_4, {"speedup": "x", "tau": "tokens/step"},
           note="Alpaca, LLaMA-68M draft, temp 1, best k configuration of Sec. 4.3")
    + grid(PAPER, "7", TABLE_7, "", note="alpha@k, rows draft / target / temperature")
    + [
        scalar(PAPER, "text", "search space", "max budget K", 32, "candidates", "Sec. 4.3: prod(k_i) <= 32"),
        scalar(PAPER, "text", "search space", "max new tokens", 128, "tokens", "Sec. 4.1"),
    ]
)


def tau_rows():
    """(table, draft, record, k configuration, target, dataset, temperature) of every Table 2/3 tau
    record whose k configuration the source kept ("Ours" rows: LLaMA-68M in Table 2, -160M in 3)."""
    for table, draft in (("2", "LLaMA-68M"), ("3", "LLaMA-160M")):
        for rec in (r for r in RECORDS if r.table == table and r.column == "tau"):
            config = k_config(rec)
            if config is not None:
                _, target, dataset, temp, _method = [s.strip() for s in rec.row.split(" / ")]
                yield table, draft, rec, config, target, dataset, temp
