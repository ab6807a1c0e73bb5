"""Recompute every published number the closed forms can predict from the paper's own inputs.

    python -m experiments.reproduce --out out/reproduce

Each comparison row: paper, table, row, column, published, predicted, relative error and the
variant it belongs to. Variant "paper inputs" uses only what the paper gives; where a prediction
needs an input the paper does not give, the main variant names the assumption that fills the gap
and the other variants ("sensitivity: ...") show how the error moves when it changes. Writes
report.md and comparisons.csv atomically and prints the per-table summary. Large errors are
reported and explained in the report, not tuned away.
"""
from __future__ import annotations

import time
from pathlib import Path

import pandas as pd

from common import atomic
from common.cli import CliParser, cli_entry
from common.progress import add_progress_option, progress_enabled
from common.rundir import add_overwrite_option, start_run
from experiments.papers.reproduce import LOTO, MAIN, leave_one_table_out, markdown_report, run_all, summarise


@cli_entry
def main(argv: list[str] | None = None) -> int:
    parser = CliParser(prog="python -m experiments.reproduce", description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="out/reproduce",
                        help="directory for report.md and comparisons.csv (created if missing); one holding another run's files is refused unless --overwrite")
    add_overwrite_option(parser)
    add_progress_option(parser)
    args = parser.parse_args(argv)
    out = Path(args.out)
    start_run(out, "experiments.reproduce", argv, args.overwrite)
    start = time.perf_counter()
    comparisons = run_all(progress_enabled(args.progress))
    summary = summarise(comparisons)
    loto = leave_one_table_out(comparisons)
    seconds = time.perf_counter() - start
    atomic.write_csv(out / "comparisons.csv", comparisons)
    atomic.write_csv(out / "summary.csv", summary)
    atomic.write_csv(out / "leave_one_table_out.csv", loto)
    atomic.write_text(out / "report.md", markdown_report(comparisons, summary, loto, seconds))
    with pd.option_context("display.width", 200, "display.max_colwidth", 60):
        print(summary.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    main_rows = comparisons[comparisons["variant"] == MAIN]
    worst = main_rows.loc[main_rows["rel_error"].abs().idxmax()]
    print(f"\nworst (paper inputs): {worst['section']} | {worst['row']} | {worst['column']}: "
          f"published {worst['published']:g}, predicted {worst['predicted']:.4g} ({worst['rel_error']:+.1%})")
    held = comparisons[(comparisons["variant"] == LOTO) & comparisons["section"].str.contains("speedups")]
    worst = loto.loc[loto["worst_abs_err"].idxmax()]
    print(f"leave one table out: speedup cells median |error| {held['rel_error'].abs().median():.1%}, worst "
          f"{held['rel_error'].abs().max():.1%}; worst table {worst['paper']} {worst['table']} "
          f"(median {worst['median_abs_err']:.1%}, worst {worst['worst_abs_err']:.1%})")
    print(f"wrote {out / 'report.md'}, {out / 'summary.csv'}, {out / 'leave_one_table_out.csv'} and "
          f"{out / 'comparisons.csv'} in {seconds:.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
