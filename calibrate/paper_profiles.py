"""The bundled default Profiles (data/profiles/*.json), built from the papers' published numbers.

`python -m calibrate.paper_profiles [--out data/profiles] [--only PAPER ...]` rebuilds them. Every
number comes from `costmodel.papers` (tagged by paper, table, row, column) or from
`costmodel.params` / `costmodel.hardware`; nothing is typed twice. Where a paper does not publish
what a Profile field needs, the assumption that fills the gap is written into the Profile's
provenance.

Latency: one module per paper (`calibrate.papers`) states the few latency parameters of its
Profiles (roofline efficiencies on the paper's GPU, draft forward seconds, per-step overheads of
the paper's engine) and every published number a latency decides (speedups with their tokens per
step, forward latencies, draft/target ratios). `calibrate.paper_fit.fit` fits the parameters to
all of a paper's cells at once; each Profile records the fitted values, the tables they were
fitted on, the fit's error and the leave-one-table-out error (`engine.fit.heldout`, which the
sweep reports beside its predictions).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from calibrate import paper_fit
from calibrate.papers import MODELS
from calibrate.papers.base import CTX_REF, git_commit  # noqa: F401  (re-exported: calibrate.fit, ingest)
from calibrate.profile import Profile
from common.cli import CliParser, cli_entry
from common.rundir import claim_file

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "data" / "profiles"


def fitted_profiles(paper: str) -> list[Profile]:
    """The paper's Profiles at its fitted latency parameters, with the fit in their provenance."""
    model = MODELS[paper]
    cells = model.cells()
    fit = paper_fit.fit(model, cells)
    profiles = model.build(fit.values)
    predicted = paper_fit.predict(cells, paper_fit.by_name(profiles))
    err = np.abs(predicted / np.array([c.published for c in cells]) - 1.0)
    heldout = paper_fit.heldout_summary(paper_fit.leave_one_table_out(model))
    record = {"method": "calibrate.paper_fit: bounded least squares of log(predicted / published) over every "
                        "cell at once",
              "parameters": {k: float(v) for k, v in fit.values.items()},
              "described": fit.describe(model.params), "at_bound": list(fit.at_bound),
              "tables": [f"{paper} {t}" for t in fit.tables], "cells": fit.n_cells,
              "error_median": float(np.median(err)), "error_max": float(err.max()), "heldout": heldout}
    for profile in profiles:
        profile.provenance["latency_fit"] = record
        profile.engine = {**profile.engine, "fit": {"heldout": heldout}}
    return profiles


def build_all(out_dir: Path = DEFAULT_OUT, only: list[str] | None = None, overwrite: bool = True) -> list[Path]:
    """Build the papers' Profiles and write them to `out_dir`; without `overwrite`, a Profile file
    already there is refused (InputError naming it) before any is written."""
    profiles = [profile for paper in MODELS if not only or paper in only for profile in fitted_profiles(paper)]
    paths = [claim_file(Path(out_dir) / f"{profile.name}.json", overwrite) for profile in profiles]
    return [profile.save(path) for profile, path in zip(profiles, paths)]


@cli_entry
def main(argv: list[str] | None = None) -> int:
    parser = CliParser(prog="python -m calibrate.paper_profiles",
                       description="Build the bundled default Profiles from the papers' numbers.")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="directory for the Profile JSON files")
    parser.add_argument("--only", nargs="*", choices=list(MODELS), help="build only these papers' profiles (default: all)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace Profile files already in --out (rebuilding the bundled ones needs it)")
    args = parser.parse_args(argv)
    for path in build_all(args.out, args.only, args.overwrite):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
