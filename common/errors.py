"""Bad input is reported as one line and exit code 2, never a traceback.

Library code raises `InputError` (a ValueError) with a message that names the offending value;
command lines wrap their `main` in `cli_entry`, which turns it into `error: <message>` on stderr.
"""
from __future__ import annotations

import functools
import sys
from typing import Callable


class InputError(ValueError):
    """User-supplied input (argument, file, vector, profile) is invalid."""


def cli_entry(main: Callable[..., int | None]) -> Callable[..., int]:
    """Wrap a CLI main so that invalid input exits with status 2 and a single line."""

    @functools.wraps(main)
    def wrapped(*args, **kwargs) -> int:
        try:
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
