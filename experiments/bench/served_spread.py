"""How much the bundled served loads can resolve: each measured quantile's spread over its requests, beside the error.

    python -m experiments.bench.served_spread [--runs examples] [--out FILE.csv]

Every served run under --runs (a folder `experiments.serve_load` left whole: manifest.json, served.csv and the
requests.csv of the run that served it; a `--repredict` run reads its source run's requests): each (rate,
configuration)'s TPOT p50 and p90 and TTFT p90, their |error| and the measured quantile's spread over the load's
requests (`fidelity.served.request_spread`, seeded by the run's --seed), computed from the files, nothing served
or priced again. Printed: per run and over the runs predicted first (a re-prediction came after its measurement),
how many lie within the target and within twice the spread, the median error and spread, and the requests a load
needs for twice its median spread to fit inside the target (`fidelity.served.requests_to_resolve`).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from common import atomic
from common.cli import CliParser, cli_entry
from common.errors import InputError
from common.rundir import claim_file, read_manifest
from experiments import serve_load
from fidelity.served import request_spread, requests_to_resolve
from fidelity.served_report import TARGETS

LATENCY_TARGETS = {metric: limit for metric, limit in TARGETS.items() if metric != "throughput_tok_s"}


def served_runs(root: Path) -> list[Path]:
    """Every folder under `root` holding a finished `experiments.serve_load` run, in order."""
    return sorted(p.parent for p in root.rglob("served.csv")
                  if (read_manifest(p.parent) or {}).get("cli") == "experiments.serve_load")


def options_of(run: Path) -> argparse.Namespace:
    """The options `run` was started with, read by the command's own parser (its defaults included)."""
    return serve_load.build_parser().parse_args(read_manifest(run)["argv"])


def judged(run: Path) -> pd.DataFrame:
    """Per (rate, configuration, latency metric) of `run`: |error|, the spread, and both verdicts. A
    `--repredict` run came after its measurement, and its requests are those of the run it names."""
    repredict = options_of(run).repredict
    source, first = (run, True) if repredict is None else (repredict, False)
    if not (source / "requests.csv").is_file():
        raise InputError(f"{run}: the run that served it ({source}) has no requests.csv here")
    requests = pd.read_csv(source / "requests.csv")
    table = pd.read_csv(run / "served.csv")
    table = table.drop(columns=[c for c in table if c.endswith(("_spread", "_within_2x_spread"))])   # computed again
    table = table.merge(request_spread(requests, options_of(source).seed), on=["load", "candidate"])
    size = int(requests.groupby(["load", "candidate"]).size().median())
    rows = []
    for metric, limit in LATENCY_TARGETS.items():
        error, spread = table[f"{metric}_rel_error"].abs(), table[f"{metric}_spread"]
        rows.append(pd.DataFrame({"run": str(run), "predicted_first": first, "requests": size, "metric": metric,
                                  "load": table["load"], "candidate": table["candidate"], "abs_error": error,
                                  "spread": spread, "in_target": error <= limit, "in_2x_spread": error <= 2 * spread}))
    return pd.concat(rows, ignore_index=True)


def summary_lines(points: pd.DataFrame) -> list[str]:
    """Per metric over `points`: within the target, within twice the spread, median error and spread, and
    the requests a load needs for twice that spread to fit inside the target."""
    lines = []
    for metric, group in points.groupby("metric", sort=False):
        spread, limit = float(group["spread"].median()), LATENCY_TARGETS[metric]
        need = requests_to_resolve(spread, int(group["requests"].median()), limit)
        lines.append(f"  {metric}: within {100 * limit:.0f}% at {int(group['in_target'].sum())}/{len(group)}, within 2x "
                     f"the spread at {int(group['in_2x_spread'].sum())}/{len(group)}; median |error| "
                     f"{100 * group['abs_error'].median():.1f}%, median spread {100 * spread:.1f}% "
                     f"(about {need:.0f} requests a load resolve {100 * limit:.0f}%)")
    return lines


@cli_entry
def main(argv: list[str] | None = None) -> int:
    parser = CliParser(prog="python -m experiments.bench.served_spread", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=Path, default=Path("examples"),
                        help="folder searched for served runs (default %(default)s)")
    parser.add_argument("--out", type=Path, help="write every judged point here as CSV (atomically; default: none)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    args = parser.parse_args(argv)
    if not args.runs.is_dir():
        raise InputError(f"--runs {args.runs} is not a folder")
    runs = served_runs(args.runs)
    if not runs:
        raise InputError(f"--runs {args.runs} holds no finished run of experiments.serve_load")
    if args.out is not None:
        claim_file(args.out, args.overwrite)
    points = pd.concat([judged(run) for run in runs], ignore_index=True)
    for run, group in points.groupby("run", sort=False):
        kind = "predicted first" if group["predicted_first"].iloc[0] else "priced after"
        print(f"{run} ({kind}, {int(group['requests'].iloc[0])} requests a load)")
        print("\n".join(summary_lines(group)))
    first = points[points["predicted_first"]]
    print(f"\nover the {first['run'].nunique()} runs predicted first:")
    print("\n".join(summary_lines(first)))
    if args.out is not None:
        atomic.write_csv(args.out, points)
    return 0


if __name__ == "__main__":
    sys.exit(main())
