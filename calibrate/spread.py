"""Record in a Profile how far one prompt's acceptance strays from its dataset's, from its StepTraces.

    python -m calibrate.spread --profile P --traces DIR [--out P2]

Every StepTrace in DIR (`steps_*.parquet`) of a dataset the Profile's workload names is read; per
dataset, `calibrate.engine.prompt_spreads` gives each method's spread (configurations run on at
least four prompts say it), written into the workload entries as `prompt_spread` and
`spread_prompts`. Nothing a prediction reads changes: intervals and the prompts a comparison needs
read it (`costmodel.uncertainty`). Traces of prompts the Profile was not calibrated on are refused
(their spread would leak held-out prompts into the intervals judged on them). --out defaults to
the Profile itself, rewritten atomically.
"""
from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pandas as pd

from calibrate.engine import prompt_spreads
from common.cli import CliParser, cli_entry
from common.errors import InputError
from profiles.parts import Workload
from profiles.profile import Profile
from profiles.record import Record
from traces.schema import read_trace


def with_spreads(profile: Profile, traces: list[Path]) -> tuple[Profile, dict[str, dict]]:
    """`profile` with each workload dataset's prompt spread from `traces`, and what was recorded
    per dataset; InputError for a trace of prompts outside the Profile's calibration."""
    calibrated = set(profile.provenance.calibration_prompts)
    by_dataset: dict[str, list[pd.DataFrame]] = {}
    for path in traces:
        frame, meta = read_trace(path, kind="step")
        outside = sorted(set(frame["prompt_id"]) - calibrated) if calibrated else []
        if outside:
            raise InputError(f"{path} holds prompts the Profile was not calibrated on ({outside[0]}, "
                             f"{len(outside)} in all): their spread would leak them into the intervals judged on them")
        if meta.dataset in profile.workload:       # a run is one file's: two files' "sd g1#0" are two runs
            by_dataset.setdefault(meta.dataset, []).append(frame.assign(run_id=f"{path.name}/" + frame["run_id"]))
    recorded = {d: prompt_spreads(pd.concat(frames, ignore_index=True)) for d, frames in sorted(by_dataset.items())}
    recorded = {d: r for d, r in recorded.items() if r}
    if not recorded:
        raise InputError("no StepTrace among those given ran a speculative configuration on >= 4 prompts of a "
                         f"dataset the Profile's workload names ({', '.join(profile.workload) or 'none'})")
    workload = {d: Workload.of({**w.to_dict(), **recorded.get(d, {})}, f"workload.{d}")
                for d, w in profile.workload.items()}
    return replace(profile, workload=Record(workload)), recorded


@cli_entry
def main(argv: list[str] | None = None) -> int:
    parser = CliParser(prog="python -m calibrate.spread", description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", required=True, type=Path, help="the Profile to record the spread in")
    parser.add_argument("--traces", required=True, type=Path, help="folder of the Profile's StepTraces (steps_*.parquet)")
    parser.add_argument("--out", type=Path, help="where the Profile is written (atomically; default --profile)")
    args = parser.parse_args(argv)
    if not args.traces.is_dir():
        raise InputError(f"--traces {args.traces} is not a folder")
    paths = sorted(args.traces.glob("steps_*.parquet"))
    if not paths:
        raise InputError(f"--traces {args.traces} holds no steps_*.parquet StepTrace")
    profile, recorded = with_spreads(Profile.load(args.profile), paths)
    profile.save(args.out or args.profile)
    for dataset, r in recorded.items():
        print(f"{dataset} ({r['spread_prompts']}+ prompts a configuration): "
              + ", ".join(f"{m} {v:.2f}" for m, v in r["prompt_spread"].items()))
    print(f"wrote {args.out or args.profile}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
