"""`python -m experiments.examples` (`make examples`): rebuild the bundled examples, each from its
one command.

    python -m experiments.examples                      # every example below, about 2 minutes
    python -m experiments.examples batch_crossover      # one of them

EXAMPLES names each folder of `examples/` that a command rebuilds from the bundled data alone, with
that command; `tests/experiments/test_examples.py` runs their cheap parts and checks that the
committed numbers are the ones the command prints today. The other folders come from measurements
(`examples/smollm2_fidelity*`: held-out runs on this CPU; `examples/check_replay_smollm2`: real
engine runs with the trained drafter; `examples/ingest`: engines' own outputs), and their READMEs
give the command that measured them.
"""
from __future__ import annotations

import importlib
import shlex
import sys
import time

from common.cli import CliParser, cli_entry
from common.errors import InputError

# name -> (module whose main takes the arguments, the arguments); every --out is examples/<name>
EXAMPLES: dict[str, tuple[str, list[str]]] = {
    "batch_crossover": ("experiments.simulate", [
        "crossover", "--profile", "data/profiles/glide-vicuna-7b-h800.json",
        "--batches", "1,4,16,32,64,128,256,384,512", "--prompt-len", "128", "--output-len", "128",
        "--out", "examples/batch_crossover", "--overwrite"]),
    "capacity_vicuna7b_h100": ("experiments.capacity", [
        "--hardware", "H100", "--target-rate", "20", "--tp", "1,2", "--out", "examples/capacity_vicuna7b_h100",
        "--overwrite"]),
    "served_load_smollm2_b32": ("experiments.serve_load", [
        "--repredict", "examples/served_load_smollm2", "--profile", "data/profiles/batch/smollm2-135m-cpu-batch32.json",
        "--out", "examples/served_load_smollm2_b32", "--overwrite"]),
    "smollm2_cpu": ("experiments.smollm2_cpu", ["--stages", "tables", "--report", "examples/smollm2_cpu"]),
}


def command(name: str) -> str:
    """The example's command line, as a person types it."""
    module, argv = EXAMPLES[name]
    return f"python -m {module.removesuffix('.cli').removesuffix('.__main__')} {shlex.join(argv)}"


def rebuild(name: str) -> int:
    """Run one example's command in this process; its exit code."""
    module, argv = EXAMPLES[name]
    return importlib.import_module(module).main(list(argv))


@cli_entry
def main(argv: list[str] | None = None) -> int:
    parser = CliParser(prog="python -m experiments.examples", description=__doc__.split("\n\n")[0].split(": ", 1)[1])
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help=f"examples to rebuild (default: all of {', '.join(EXAMPLES)})")
    args = parser.parse_args(argv)
    for name in args.names:
        if name not in EXAMPLES:
            raise InputError(f"unknown example '{name}' (known: {', '.join(EXAMPLES)})")
    for name in args.names or list(EXAMPLES):
        started = time.perf_counter()
        print(f"{name}: {command(name)}", file=sys.stderr, flush=True)
        code = rebuild(name)
        if code:
            return code
        print(f"{name}: rebuilt in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
