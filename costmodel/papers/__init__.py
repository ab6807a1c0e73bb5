"""The papers' published numbers as data: every value tagged with paper, table, row and column.

    >>> from costmodel import papers
    >>> papers.value("glide", "1", "Vicuna-7B / GLIDE", "GSM8K espd")
    1.97
    >>> papers.table("lookahead", "4")["7B"]["W"]
    15.0

Tables are keyed by the paper's own numbering ("1", "2", ...); numbers quoted in the running text
live in table "text" (and Lookahead's Fig. 4(b) setting in "fig4b"). Each dataset's prompt and output
lengths, with their sources, are `workload(dataset)` (costmodel.papers.workloads). Values are floats; a cell the
paper leaves empty or marks OOM is NaN with a note saying so. Pure python, no pandas; `to_rows`
gives plain dicts for a DataFrame.
"""
from __future__ import annotations

import math

from costmodel.papers import coral, glide, kangaroo, lookahead, mcsd, mistral
from costmodel.papers._records import Record
from costmodel.papers.workloads import workload, workload_sources, workloads

__all__ = ["Record", "PAPERS", "records", "value", "table", "tables", "to_rows", "k_config", "mcsd_tau_rows",
           "workload", "workloads", "workload_sources"]

PAPERS = {
    "glide": glide.RECORDS,
    "lookahead": lookahead.RECORDS,
    "kangaroo": kangaroo.RECORDS,
    "mcsd": mcsd.RECORDS,
    "coral": coral.RECORDS,
    "mistral": mistral.RECORDS,
}
k_config = mcsd.k_config
mcsd_tau_rows = mcsd.tau_rows


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
