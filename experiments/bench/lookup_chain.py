"""Prompt lookup's chain model against its exact replay, over every configuration of the sweep.

    python -m experiments.bench.lookup_chain [--traces data/traces/smollm2-cpu] [--datasets mt-bench,...]

Why it matters: the chain (`methods.prompt_lookup`) is fitted on seven calibration configurations;
the sweep ranks 210. Under greedy decoding every configuration's steps follow exactly from the
calibration outputs (`traces.lookup_replay`), so the chain's error off its grid is measurable for
free. Per dataset: the chain's tokens per step against the replay's (median, p90 and worst
|chain / replay - 1|, and the worst configuration); the Profile's closed form prices at the replay
itself where its entry holds one.
"""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np

import methods
from common.cli import CliParser, cli_entry
from common.errors import InputError
from campaigns.smollm2 import DATASETS
from campaigns.smollm2_profile import replayed_from_outputs
from methods.match_chain import chain_at


def chain_errors(traces: Path, dataset: str):
    """(labels, chain tokens per step, replayed tokens per step) of every sweep configuration."""
    spec = methods.replaying_specs()[0]       # the method the chain models
    frame, _, source = replayed_from_outputs(SimpleNamespace(out=traces), spec, dataset, sweep=True)
    entry = spec.fit_replayed(frame, dataset=dataset, temperature=0.0, source=source)
    part = spec.acceptance_part({k: v for k, v in entry[spec.name].items() if k != "replayed"}, source)
    new_tokens = entry[spec.name]["replayed_new_tokens"]
    labels = sorted(entry[spec.name]["replayed"])
    configs = [spec.parse(label) for label in labels]
    chain, _ = chain_at(part, [c.n_min for c in configs], [c.n_max for c in configs], [c.gamma for c in configs],
                        new_tokens)
    replayed = np.array([entry[spec.name]["replayed"][label][0] for label in labels])
    return labels, chain, replayed


@cli_entry
def main(argv=None) -> int:
    p = CliParser(prog="python -m experiments.bench.lookup_chain", description=__doc__.splitlines()[0])
    p.add_argument("--traces", type=Path, default=Path("data/traces/smollm2-cpu"),
                   help="the SmolLM2 campaign's trace folder (its TokenTraces' greedy outputs are replayed)")
    p.add_argument("--datasets", default="mt-bench,humaneval,code-edit,lib-edit", help="comma-separated Profile datasets")
    args = p.parse_args(argv)

    datasets = [d for d in args.datasets.split(",") if d]
    unknown = [d for d in datasets if d not in DATASETS]
    if unknown or not datasets:
        raise InputError(f"--datasets: '{(unknown or [''])[0]}' is not one of {', '.join(DATASETS)}")
    print(f"{'dataset':<10} {'configs':>7} {'median':>7} {'p90':>7} {'worst':>7}  worst configuration")
    for dataset in datasets:
        labels, chain, replayed = chain_errors(args.traces, dataset)
        error = np.abs(chain / replayed - 1.0)
        worst = int(np.argmax(error))
        print(f"{dataset:<10} {len(labels):>7} {np.median(error):>7.1%} {np.quantile(error, 0.9):>7.1%} "
              f"{error[worst]:>7.1%}  {labels[worst]} (chain {chain[worst]:.2f}, replay {replayed[worst]:.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
