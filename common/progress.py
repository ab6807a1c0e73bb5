"""Progress of a long command: on a terminal only, unless asked.

A bar drawn into a log file is a screen of carriage returns; a command that prints nothing for
minutes on a terminal looks hung. So every command that may run longer than about ten seconds
takes `--progress` / `--no-progress` (`add_progress_option`); by default its bars (tqdm, on
stderr) show only when stderr is a terminal (`progress_enabled`), and a step that ends within a
second never draws one (`progress_bar`).
"""
from __future__ import annotations

import argparse
import sys

PROGRESS_MIN_TASKS = 2           # fewer tasks than this never show a bar


def progress_enabled(asked: bool | None) -> bool:
    """Progress on stderr: as asked (--progress / --no-progress), else only on a terminal."""
    return bool(asked) if asked is not None else sys.stderr.isatty()


def progress_bar(total: int | None, desc: str, enabled: bool, unit: str = "task"):
    """A tqdm bar on stderr that appears only after a second (quick steps stay quiet)."""
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, disable=not enabled or (total is not None and total <
                                                                              PROGRESS_MIN_TASKS),
                mininterval=0.5, delay=1.0, leave=False, file=sys.stderr)


def add_progress_option(parser: argparse.ArgumentParser, what: str = "progress bars") -> None:
    """`--progress` / `--no-progress` on a command line (None: only on a terminal)."""
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help=f"{what} on stderr (default: only when stderr is a terminal, never in a log file)")
