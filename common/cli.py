"""Every command line's plumbing: one-line errors with exit code 2, defaults stated in `--help`.

Command lines build their parser with `CliParser`, so argparse's own complaints (an unknown option,
a value of the wrong type) raise `InputError` like the library's, and wrap their `main` in
`cli_entry`, which prints `error: <one line>` and returns 2 (130 on Ctrl-C) and records how the
run ended in its manifest (`common.rundir`).
"""
from __future__ import annotations

import argparse
import functools
import sys
import time
from typing import Callable

from common.errors import InputError
from common.rundir import closing_runs


class HelpFormatter(argparse.HelpFormatter):
    """Appends "(default: X)" to an option whose help does not already state its default; flags
    and options whose default is None are left as written (their help must say what None means)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text.lower() or action.default in (None, argparse.SUPPRESS) or action.nargs == 0:
            return text
        if not action.option_strings and action.nargs not in (argparse.OPTIONAL, argparse.ZERO_OR_MORE):
            return text
        return f"{text} (default: %(default)s)".strip()

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        """Paragraphs are wrapped; a paragraph of indented lines (commands) is kept as written."""
        wrap = super()._fill_text
        return "\n\n".join(block if block.startswith("  ") else wrap(block, width, indent)
                             for block in text.split("\n\n"))


class CliParser(argparse.ArgumentParser):
    """argparse with the project's one-line errors: a usage error raises InputError (exit 2 through
    `cli_entry`) instead of printing the usage block and exiting inside argparse."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def format_help(self) -> str:
        if callable(self.epilog):       # an epilog that costs work (loading data) is built only for --help
            self.epilog = self.epilog()
        return super().format_help()

    def error(self, message: str):
        raise InputError(f"{self.prog}: {message} (see --help)")


def cli_entry(main: Callable[..., int | None]) -> Callable[..., int]:
    """Wrap a CLI main so that invalid input exits with status 2 and a single line."""

    @functools.wraps(main)
    def wrapped(*args, **kwargs) -> int:
        try:
            with closing_runs():  # a run's manifest records how main ended
                code = main(*args, **kwargs)
        except (InputError, ValueError, FileNotFoundError, NotADirectoryError, IsADirectoryError) as exc:
            message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            print(f"error: {message}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print("error: interrupted", file=sys.stderr)
            return 130
        return 0 if code is None else int(code)

    return wrapped


def counts(text: str, what: str) -> tuple[int, ...]:
    """A comma-separated list of whole numbers >= 1; one line naming the bad one."""
    values = []
    for item in text.split(","):
        try:
            value = int(item)
        except ValueError:
            raise InputError(f"{what} must be whole numbers >= 1, got {item.strip()!r}") from None
        if value < 1:
            raise InputError(f"{what} must be whole numbers >= 1, got {value}")
        values.append(value)
    if not values:
        raise InputError(f"{what}: none given")
    return tuple(sorted(set(values)))


def parse_stages(text: str, known) -> list[str]:
    """A campaign's `--stages` list (comma-separated), each one of `known`; else one line naming it."""
    stages = [s.strip() for s in text.split(",") if s.strip()]
    unknown = sorted(set(stages) - set(known))
    if unknown:
        raise InputError(f"unknown stage '{unknown[0]}' (known: {', '.join(known)})")
    return stages


def log(message: str) -> None:
    """A campaign's progress line, printed at once (a long run is followed as it goes)."""
    print(message, flush=True)


def run_stages(stages: list[str], functions: dict[str, Callable], args, log: Callable[[str], None]) -> None:
    """A campaign's chosen stages, in the campaign's own order (`functions`'), each timed in one log line."""
    for stage, function in functions.items():
        if stage in stages:
            started = time.perf_counter()
            function(args, log)
            log(f"stage {stage}: {time.perf_counter() - started:.0f} s")


def require_positive(args, names) -> None:
    """Each of these integer options is >= 1, else one line naming the option."""
    for name in names:
        if getattr(args, name) < 1:
            raise InputError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
