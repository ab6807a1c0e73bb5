"""Bad input is one error type, `InputError`: library code raises it with a message that names the
offending value, and every command line (`common.cli.cli_entry`) turns it into one line on stderr
and exit code 2, never a traceback. `duration` is how such a line states an estimated run time.
"""
from __future__ import annotations


class InputError(ValueError):
    """User-supplied input (argument, file, vector, profile) is invalid."""


def duration(seconds: float) -> str:
    """A run time as a one-line message states it: "42 s", "3.5 min", "7.2 h", "666.5 days", "4.0 years"."""
    for unit, size in (("years", 365 * 86400), ("days", 86400), ("h", 3600), ("min", 60)):
        if seconds >= 2 * size:
            return f"{seconds / size:,.1f} {unit}"
    return f"{seconds:.3g} s"
