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
from papers import heldout
from papers.reproduce import LOMSO, LOTO, MAIN, leave_one_table_out, markdown_report, run_all, summarise


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
    profiles = heldout.bundled_profiles()
    comparisons = run_all(profiles, progress_enabled(args.progress))
    summary = summarise(comparisons)
    loto = leave_one_table_out(comparisons)
    extras = {"targets": heldout.targets(comparisons), "warnings": heldout.warning_lines(profiles),
              "choices": heldout.sweep_vs_paper(profiles), "families": heldout.acceptance_family_rows()}
    seconds = time.perf_counter() - start
    atomic.write_csv(out / "comparisons.csv", comparisons)
    atomic.write_csv(out / "summary.csv", summary)
    atomic.write_csv(out / "leave_one_table_out.csv", loto)
    atomic.write_csv(out / "targets.csv", extras["targets"])
    atomic.write_csv(out / "sweep_vs_paper.csv", extras["choices"])
    atomic.write_csv(out / "acceptance_families.csv", extras["families"])
    atomic.write_text(out / "report.md", markdown_report(comparisons, summary, loto, seconds, extras))
    with pd.option_context("display.width", 200, "display.max_colwidth", 60):
        print(summary.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
        print()
        print(extras["targets"].to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    main_rows = comparisons[comparisons["variant"] == MAIN]
    worst = main_rows.loc[main_rows["rel_error"].abs().idxmax()]
    print(f"\nworst (paper inputs): {worst['section']} | {worst['row']} | {worst['column']}: "
          f"published {worst['published']:g}, predicted {worst['predicted']:.4g} ({worst['rel_error']:+.1%})")
    for variant in (LOTO, LOMSO):
        for kind in ("speedup", "tau"):
            held = comparisons[(comparisons["variant"] == variant) & (comparisons["kind"] == kind)]["rel_error"].abs()
            if len(held):
                print(f"{variant}: {kind} cells median |error| {held.median():.1%}, worst {held.max():.1%} "
                      f"({len(held)} cells)")
    choices = extras["choices"]
    within = (choices["pick_vs_published"].abs() <= 0.02).sum()
    print(f"sweep's MCSD pick within 2% of the published best: {within} of {len(choices)} settings; same "
          f"configuration as the paper's in {(choices['sweep_pick'] == choices['paper_best']).sum()}")
    for line in extras["warnings"]:
        print(line)
    print(f"wrote {out / 'report.md'} and its tables (summary, leave_one_table_out, targets, sweep_vs_paper, "
          f"acceptance_families, comparisons .csv) in {seconds:.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
