"""The papers' published numbers as data: every value tagged with paper, table, row and column.

    >>> import papers
    >>> papers.value("glide", "1", "Vicuna-7B / GLIDE", "GSM8K espd")
    1.97
    >>> papers.table("lookahead", "4")["7B"]["W"]
    15.0

Tables are keyed by the paper's own numbering ("1", "2", ...); numbers quoted in the running text
live in table "text" (and Lookahead's Fig. 4(b) setting in "fig4b"). Values are floats; a cell the
paper leaves empty or marks OOM is NaN with a note saying so. Each paper's module registers its records
(`register`); `to_rows` gives plain dicts for a DataFrame.

The record type, and the parser for the compact table texts:

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


PAPERS: dict[str, tuple[Record, ...]] = {}       # paper -> its records, as each paper's module registers them


def register(paper: str, found) -> None:
    """Make `paper`'s records findable (each paper's module calls it once)."""
    PAPERS[paper] = tuple(found)


def records(paper: str | None = None, table: str | None = None, row: str | None = None,
            column: str | None = None) -> list[Record]:
    """All records matching the given tags (None matches anything)."""
    if paper is not None and paper not in PAPERS:
        raise ValueError(f"unknown paper '{paper}' (known: {', '.join(PAPERS)})")
    chosen = [PAPERS[paper]] if paper is not None else list(PAPERS.values())
    return [
        r for recs in chosen for r in recs
        if (table is None or r.table == str(table)) and (row is None or r.row == row)
        and (column is None or r.column == column)
    ]


def value(paper: str, table: str, row: str, column: str) -> float:
    """The one published number at (paper, table, row, column); ValueError if absent."""
    found = records(paper, table, row, column)
    if len(found) != 1:
        raise ValueError(f"no single value at {paper} table {table} row '{row}' column '{column}' (found {len(found)})")
    return found[0].value


def table(paper: str, table: str, skip_missing: bool = True) -> dict[str, dict[str, float]]:
    """One table as {row: {column: value}} in the paper's row order (NaN cells dropped by default)."""
    found = records(paper, table)
    if not found:
        raise ValueError(f"{paper} has no table '{table}' (has: {', '.join(tables(paper))})")
    out: dict[str, dict[str, float]] = {}
    for r in found:
        if skip_missing and math.isnan(r.value):
            continue
        out.setdefault(r.row, {})[r.column] = r.value
    return out


def tables(paper: str) -> list[str]:
    """The table keys stored for one paper, in order of appearance."""
    seen: dict[str, None] = {}
    for r in records(paper):
        seen.setdefault(r.table, None)
    return list(seen)


def to_rows(found: list[Record] | None = None) -> list[dict]:
    """Records as plain dicts (paper, table, row, column, value, unit, note), e.g. for pandas."""
    return [r.__dict__.copy() for r in (records() if found is None else found)]
