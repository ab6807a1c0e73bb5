"""The bundled default Profiles (data/profiles/*.json), built from the papers' published numbers.

`python -m experiments.paper_profiles --out data/profiles --overwrite [--only PAPER ...]` rebuilds them in
place (the command's default folder is out/profiles, so a plain run never overwrites the bundled files). Every
number comes from `papers` (tagged by paper, table, row, column) or from
`costmodel.params` / `costmodel.hardware`; nothing is typed twice. Where a paper does not publish
what a Profile field needs, the assumption that fills the gap is written into the Profile's
provenance.

Latency: one module per paper (`papers`) states the parameters of its Profiles (one
latency model of the paper's GPU and engine that prices every model from its architecture,
`calibrate.terms.model_latency`; per-step overheads of the paper's engine; an acceptance
term where tau pins one) and every published number they decide (speedups with their tokens per
step, tokens per step, forward latencies, draft/target ratios). `papers.calibration.fit` fits the
parameters to all of a paper's cells at once, within what the hardware physically allows; each
Profile records the fitted values, the tables they were fitted on, the fit's error, the errors of
leaving each table and each target model size out, and a warning line for every term on a bound
or held-out error above target (`provenance.latency_fit.warnings`, `papers.calibration.profile_warnings`).
The leave-one-table-out speedup error is `engine.fit.heldout`, which the sweep reports beside its
predictions.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from papers import calibration as paper_fit
from papers import MODELS
from profiles.profile import Profile
from profiles.record import Record
from common.progress import progress_bar
from common.rundir import claim_file

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "data" / "profiles"     # the bundled Profiles
CLI_OUT = "out/profiles"


def fitted_profiles(paper: str) -> list[Profile]:
    """The paper's Profiles at its fitted parameters, with the fit in their provenance: the values,
    the terms held fixed, the error on the cells fitted, the errors of leaving each table and each
    target model size out (`paper_fit.leave_one_out`), and a warning line per finding
    (`paper_fit.warnings`: a term on a bound of its physical range, a held-out error above target)."""
    model = MODELS[paper]
    cells = model.cells()
    fit = paper_fit.fit(model, cells)
    profiles = model.build(fit.values)
    predicted = paper_fit.predict(cells, paper_fit.by_name(profiles))
    err = np.abs(predicted / np.array([c.published for c in cells]) - 1.0)
    held = {by: paper_fit.leave_one_out(model, by) for by in ("table", "size")}
    heldout = paper_fit.heldout_summary(held["table"])
    summaries = {f"{label} {kind}": summary for by, label in (("table", "leave one table out"),
                                                                ("size", "leave one model size out"))
                 for kind in ("speedup", "tau", "latency")
                 if any(c.kind == kind or (kind == "latency" and c.kind in ("seconds", "ratio")) for c in cells)
                 and (summary := paper_fit.heldout_summary(held[by], kind, by))}
    speedups = err[[c.kind == "speedup" for c in cells]]
    record = {"method": "papers.calibration: bounded least squares of log(predicted / published) over every "
                        "cell at once",
              "parameters": {k: float(v) for k, v in fit.values.items()},
              "described": fit.describe(model.params), "at_bound": list(fit.at_bound),
              "unpinned": list(fit.unpinned),
              "bounds": {p.name: [p.low, p.high, p.why] for p in model.params},
              "fixed": {k: {"value": v, "why": why} for k, (v, why) in model.fixed.items()},
              "tables": [f"{paper} {t}" for t in fit.tables], "cells": fit.n_cells,
              "error_median": float(np.median(err)), "error_max": float(err.max()),
              "speedup_error_median": float(np.median(speedups)) if speedups.size else None,
              "speedup_error_max": float(speedups.max()) if speedups.size else None,
              "heldout": heldout, "heldout_by": summaries,
              "warnings": paper_fit.warnings(paper, fit, model.params, summaries)}
    return [replace(p, provenance=replace(p.provenance, latency_fit=Record(record)),
                    engine=replace(p.engine, fit=Record({"heldout": heldout}))) for p in profiles]


def build_all(out_dir: Path = DEFAULT_OUT, only: list[str] | None = None, progress: bool = False,
              overwrite: bool = True) -> list[Path]:
    """Fit every paper's latency parameters (tens of seconds each) and write its Profiles to `out_dir`;
    without `overwrite`, a Profile file already there is refused (InputError naming it) before any
    is written."""
    profiles = []
    papers = [paper for paper in MODELS if not only or paper in only]
    with progress_bar(len(papers), "fitting the papers' profiles", progress, unit="paper") as bar:
        for paper in papers:
            bar.set_postfix_str(paper)
            profiles += fitted_profiles(paper)
            bar.update()
    paths = [claim_file(Path(out_dir) / f"{profile.name}.json", overwrite) for profile in profiles]
    return [profile.save(path) for profile, path in zip(profiles, paths)]
