"""Bad input is one error type, `InputError`: library code raises it with a message that names the
offending value, and every command line (`common.cli.cli_entry`) turns it into one line on stderr
and exit code 2, never a traceback.
"""
from __future__ import annotations


class InputError(ValueError):
    """User-supplied input (argument, file, vector, profile) is invalid."""
