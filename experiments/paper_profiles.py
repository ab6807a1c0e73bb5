"""`python -m experiments.paper_profiles [--out DIR] [--only PAPER ...] [--overwrite]`: the papers'
Profiles built from their published numbers (`papers.build`; the bundled ones are these, in data/profiles)."""
from __future__ import annotations

import sys
from pathlib import Path

from common.cli import CliParser, cli_entry
from common.progress import add_progress_option, progress_enabled
from papers import MODELS
from papers.build import CLI_OUT, build_all


@cli_entry
def main(argv: list[str] | None = None) -> int:
    parser = CliParser(prog="python -m experiments.paper_profiles",
                       description="Build the papers' Profiles from their published numbers (the bundled ones are "
                                   "these, in data/profiles).")
    parser.add_argument("--out", type=Path, default=Path(CLI_OUT),
                        help=f"directory for the Profile JSON files (default {CLI_OUT}; --out data/profiles "
                             "refreshes the bundled ones)")
    parser.add_argument("--only", nargs="*", choices=list(MODELS), help="build only these papers' profiles (default: all)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace Profile files already in --out (refreshing the bundled ones needs it)")
    add_progress_option(parser)
    args = parser.parse_args(argv)
    for path in build_all(args.out, args.only, progress_enabled(args.progress), args.overwrite):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
