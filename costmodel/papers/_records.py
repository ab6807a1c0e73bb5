"""The record type behind the papers' numbers, and the parser for the compact table texts.

Each paper module writes its tables as short pipe-separated texts copied from the paper (header
line first, then one line per row); `grid` turns one such text into tagged records. Keeping the
numbers as text close to the paper's own layout makes them easy to check against the source.
"""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Record:
    """One published number: where it is (paper, table, row, column), its value and unit."""

    paper: str
    table: str
    row: str
    column: str
    value: float
    unit: str
    note: str = ""


MISSING_MARKS = {"OOM": "out of memory (OOM) in the paper", "-": "no entry in the paper"}


def _number(cell: str) -> float:
    cell = cell.strip().rstrip("x×").replace("%", "").strip()
    return float(cell)


def grid(
    paper: str,
    table: str,
    text: str,
    unit: str | dict[str, str],
    note: str = "",
    pair: tuple[str, str] | None = None,
) -> list[Record]:
    """Parse `header | col | col` / `row | v | v` lines into records.

    `unit` is one unit for all columns or a {column: unit} mapping. With `pair=(a, b)` every cell
    holds "x/y" and yields two records, columns "<col> <a>" and "<col> <b>". Cells "OOM" and "-"
    give a NaN record whose note says why (so a missing value is data, not silence).
    """
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    columns = [c.strip() for c in lines[0].split("|")[1:]]
    records: list[Record] = []
    for line in lines[1:]:
        cells = [c.strip() for c in line.split("|")]
        row, values = cells[0], cells[1:]
        if len(values) != len(columns):
            raise ValueError(f"{paper} table {table} row '{row}': {len(values)} cells for {len(columns)} columns")
        for column, cell in zip(columns, values):
            names = [f"{column} {pair[0]}", f"{column} {pair[1]}"] if pair else [column]
            parts = cell.split("/") if pair and cell not in MISSING_MARKS else [cell] * len(names)
            for name, part in zip(names, parts):
                col_unit = unit.get(name.split(" ")[-1] if pair else column, "") if isinstance(unit, dict) else unit
                if part in MISSING_MARKS:
                    records.append(Record(paper, table, row, name, math.nan, col_unit, MISSING_MARKS[part]))
                else:
                    records.append(Record(paper, table, row, name, _number(part), col_unit, note))
    return records


def scalar(paper: str, table: str, row: str, column: str, value: float, unit: str, note: str = "") -> Record:
    """One number quoted in the text (table 'text' or a section) rather than in a table."""
    return Record(paper, table, row, column, float(value), unit, note)
