"""How well the prediction intervals cover the bundled fidelity runs, priced again by each run's Profile as it is now.

    python -m experiments.bench.intervals [--runs examples] [--respread data/traces/smollm2-cpu] [--out FILE.csv]

Every fidelity run under --runs (a folder holding run.json, fidelity.csv and runs.csv) whose Profile (the run's
--profile) is in this checkout: each measured speculative configuration's 90% interval priced again from that
Profile for the prompts the run measured (`fidelity.run.predictions_with_intervals`, as `experiments.fidelity`
prices it before measuring), whether the measured speedup lies inside, and its half-width (the prediction over the
interval's low end, less one). The runs' own predictions are kept: only the intervals are priced again, so a
change to how a Profile states its spread is judged on every run at once; `--respread DIR` first derives again the
spread of every Profile built from DIR's StepTraces (`calibrate.spread.with_spreads`, as the command would write
it), so a run's own scratch or example Profile is judged with today's spread. Printed: per run, and over all runs,
how many lie inside and the median half-width (the aim: at least 90% inside, no wider than needed). Runs
whose Profile is not in the checkout (a scratch Profile of the session that measured) are named and left out.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from calibrate.spread import with_spreads
from common import atomic
from common.cli import CliParser, cli_entry
from common.errors import InputError
from common.rundir import claim_file
from fidelity.run import predictions_with_intervals, prompt_counts
from methods import BASELINE
from profiles.profile import Profile


def run_folders(root: Path) -> list[Path]:
    """Every folder under `root` a fidelity run left whole (run.json, fidelity.csv, runs.csv), in order."""
    return sorted(p.parent for p in root.rglob("fidelity.csv")
                  if (p.parent / "run.json").is_file() and (p.parent / "runs.csv").is_file())


def profile_of(folder: Path) -> Path | None:
    """The --profile the run in `folder` was measured with (None where run.json did not record one)."""
    argv = json.loads((folder / "run.json").read_text()).get("argv") or []
    return Path(argv[argv.index("--profile") + 1]) if "--profile" in argv else None


def respread(profile: Profile, traces: list[Path]) -> Profile:
    """`profile` with its prompt spreads derived again from `traces` where it was built from their folder
    (its provenance's sources); any other Profile (another engine's recording) as it is."""
    sources = {Path(s).parent for s in profile.provenance.details.get("sources", ())}
    return with_spreads(profile, traces)[0] if traces and traces[0].parent in sources else profile


def covered(folder: Path, profile: Profile) -> pd.DataFrame:
    """Per measured speculative configuration of the run in `folder`: its interval priced by `profile`,
    whether the measured speedup lies inside, the half-width."""
    fid = pd.read_csv(folder / "fidelity.csv")
    fid = fid[fid["method"] != BASELINE]
    runs = pd.read_csv(folder / "runs.csv", usecols=lambda c: c in ("dataset", "prompt_id", "prompts"))
    unpriced = fid.drop(columns=["predicted_lo", "predicted_hi", "n_prompts"], errors="ignore")
    priced = predictions_with_intervals(unpriced, profile, prompt_counts(runs))
    inside = priced["measured_speedup"].between(priced["predicted_lo"], priced["predicted_hi"])
    return pd.DataFrame({"run": str(folder), "dataset": priced["dataset"], "candidate": priced["candidate"],
                         "batch": priced["batch"] if "batch" in priced else 1, "n_prompts": priced["n_prompts"],
                         "predicted_speedup": priced["predicted_speedup"],
                         "measured_speedup": priced["measured_speedup"],
                         "lo": priced["predicted_lo"], "hi": priced["predicted_hi"], "inside": inside,
                         "half_width": priced["predicted_speedup"] / priced["predicted_lo"] - 1.0})


def summary(rows: pd.DataFrame) -> str:
    """'k/n inside (p%), median half-width h%'."""
    return (f"{int(rows['inside'].sum())}/{len(rows)} inside ({rows['inside'].mean():.1%}), "
            f"median half-width {rows['half_width'].median():.1%}")


@cli_entry
def main(argv: list[str] | None = None) -> int:
    parser = CliParser(prog="python -m experiments.bench.intervals", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=Path, default=Path("examples"), help="folder searched for fidelity runs "
                        "(default %(default)s)")
    parser.add_argument("--respread", type=Path, help="folder of StepTraces (steps_best-*.parquet) to derive the "
                        "spread of the Profiles built from it again (default: each Profile's spread as written)")
    parser.add_argument("--out", type=Path, help="write every priced interval here as CSV (atomically; default: none)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    args = parser.parse_args(argv)
    if not args.runs.is_dir():
        raise InputError(f"--runs {args.runs} is not a folder")
    traces = sorted(args.respread.glob("steps_best-*.parquet")) if args.respread is not None else []
    if args.respread is not None and not traces:
        raise InputError(f"--respread {args.respread} holds no steps_best-*.parquet StepTrace")
    if args.out is not None:
        claim_file(args.out, args.overwrite)
    profiles: dict[Path, Profile] = {}
    frames, missing = [], []
    for folder in run_folders(args.runs):
        path = profile_of(folder)
        if path is None or not path.is_file():
            missing.append(f"{folder} ({path})")
            continue
        if path not in profiles:
            profiles[path] = respread(Profile.load(path), traces)
        frames.append(covered(folder, profiles[path]))
    if not frames:
        raise InputError(f"--runs {args.runs} holds no fidelity run whose Profile is in this checkout")
    rows = pd.concat(frames, ignore_index=True)
    for run, part in rows.groupby("run", sort=False):
        print(f"{run}: {summary(part)}")
    for name, part in (("batch 1", rows[rows["batch"] == 1]), ("batch > 1", rows[rows["batch"] > 1]), ("all", rows)):
        if len(part):
            print(f"{name}: {summary(part)} over {part['run'].nunique()} runs")
    if missing:
        print(f"left out, their Profile not in this checkout: {len(missing)} run(s), e.g. {missing[0]}")
    if args.out is not None:
        atomic.write_csv(args.out, rows.assign(half_width=np.round(rows["half_width"], 6)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
