"""Benchmark: configurations scored per second by the sweep's scorer (sweep.scoring.score), and the
costs the sweep's estimate multiplies its rows by (`--costs`).

    python -m experiments.bench.sweep [--profile P.json] [--repeats 5]
    python -m experiments.bench.sweep --costs sweep/costs.json --overwrite

For each swept method (the registry, `methods`) on the first setup the profile gives it, the
method's whole space is scored in this process (no executor, so the figure is the scorer's own
speed) after one warm-up, `--repeats` times; the median wall time gives configurations per second.
Printed as a table, also written as JSON with `--out`. `--costs FILE` instead measures each method's
cost per row, per scoring call and per token once (`sweep.estimate.measure`, on the first bundled
Profile that has it) and writes the table the estimate reads, with the machine it was measured on.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

import methods
from costmodel.params import total_params
from profiles.profile import Profile
from common import atomic
from common.errors import InputError
from common.cli import CliParser, cli_entry
from common.rundir import claim_file
from profiles.machine import this_machine
from sweep import estimate, scoring
from sweep.run import BUNDLED_PROFILES, SweepOptions, bundled_profile_paths, setting_of, space_of



def default_profiles() -> list[str]:
    """One bundled paper profile per paper (file names '<paper>-...'), the one with the largest target."""
    by_paper: dict[str, list[tuple[float, str]]] = {}
    for path in sorted(BUNDLED_PROFILES.glob("*.json")):
        profile = Profile.load(path)
        if profile.provenance.built_by == "python -m experiments.paper_profiles":
            size = total_params(profile.arch())
            by_paper.setdefault(path.name.split("-", 1)[0], []).append((size, str(path)))
    return [max(found)[1] for found in by_paper.values()]


def bench(profiles: list[Profile], repeats: int) -> pd.DataFrame:
    rows = []
    setting = scoring.Setting()
    for profile in profiles:
        for method in methods.names(sweep_only=True):
            try:
                setup = scoring.setups(profile, method, setting)[0]
            except InputError:
                continue
            space = space_of(methods.get(method), setup, SweepOptions())
            scoring.score(setup, method, space, setting)          # warm-up (imports, caches)
            times = []
            for _ in range(repeats):
                t = time.perf_counter()
                scoring.score(setup, method, space, setting)
                times.append(time.perf_counter() - t)
            median = float(np.median(times))
            rows.append({"profile": profile.name, "method": method, "configurations": len(space),
                         "median_s": median, "configs_per_s": len(space) / median})
    return pd.DataFrame(rows)


def costs(profiles: list[Profile]) -> dict:
    """Each swept method's `sweep.estimate.Cost`, measured once on the first Profile that has it."""
    out, opts = {}, SweepOptions()
    for profile in profiles:
        setting = setting_of(profile, opts)
        for method in methods.names(sweep_only=True):
            if method in out:
                continue
            try:
                setup = scoring.setups(profile, method, setting)[0]
            except InputError:
                continue
            spec = methods.get(method)
            cost = estimate.measure(profile, spec, setup, space_of(spec, setup, opts), setting)
            out[method] = {k: float(f"{v:.4g}") for k, v in vars(cost).items()}
            print(f"{method}: {out[method]}", file=sys.stderr)
    return {"measured": {"command": "python -m experiments.bench.sweep --costs sweep/costs.json --overwrite",
                         "machine": this_machine().describe()},
            "methods": out}


@cli_entry
def main(argv: list[str] | None = None) -> int:
    p = CliParser(prog="python -m experiments.bench.sweep", description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", action="append", help="profile JSON (repeatable); default: one bundled per method")
    p.add_argument("--repeats", type=int, default=5, help="timed repeats after one warm-up (default 5)")
    p.add_argument("--out", default=None, help="also write the figures as JSON to this file (default: stdout only)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out or --costs file instead of refusing")
    p.add_argument("--costs", default=None, help="measure the estimate's cost table into this JSON file instead "
                                                 "(sweep/costs.json is the bundled one; default: no)")
    args = p.parse_args(argv)
    if args.repeats < 1:
        raise InputError(f"--repeats must be at least 1, got {args.repeats}")
    if args.costs:
        claim_file(args.costs, args.overwrite)
        table = costs([Profile.load(path) for path in args.profile or bundled_profile_paths()])
        atomic.write_json(Path(args.costs), table)
        print(f"wrote {args.costs}: {len(table['methods'])} methods")
        return 0
    if args.out:
        claim_file(args.out, args.overwrite)
    paths = args.profile or default_profiles()
    table = bench([Profile.load(path) for path in paths], args.repeats)
    total = table.configurations.sum() / table.median_s.sum()
    print(table.to_string(index=False, float_format=lambda v: f"{v:,.4g}"))
    print(f"\nall methods: {table.configurations.sum():,} configurations in {table.median_s.sum():.3f} s "
          f"= {total:,.0f} configurations/s (median of {args.repeats}, one process)")
    if args.out:
        atomic.write_json(Path(args.out), {"rows": table.to_dict("records"), "configs_per_s": total})
    return 0


if __name__ == "__main__":
    sys.exit(main())
