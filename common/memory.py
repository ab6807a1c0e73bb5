"""Memory before work: what the system can still give, and the one-line refusal of work estimated past it.

Whatever grows with its input (a reader of a file, a simulated load) estimates its peak bytes before
it allocates them (bytes per input byte, per row or per request, each measured once and stated where
it is used) and calls `check_fits`, which refuses in one line, with the estimate, what exceeds the
memory available or a stated limit. Readers of files hold to `READ_LIMIT` (2 GiB, raised by an
option where a command offers one), so a reader handed a file of any size stays under it or refuses
before it reads.
"""
from __future__ import annotations

import psutil

from common.errors import InputError

GIB = 2 ** 30
READ_LIMIT = 2 * GIB       # a reader's peak, unless the command raises it


def available() -> int:
    """Bytes the system can still give this process (free and reclaimable page cache)."""
    return int(psutil.virtual_memory().available)


def gb(n: float) -> str:
    """Bytes as a one-line message states them: "12 kB", "640 MB", "2.15 GB", "1.2e+04 GB"."""
    if n < 1e6:
        return f"{n / 1e3:.0f} kB"
    if n < 1e8:
        return f"{n / 1e6:.0f} MB"
    return f"{n / 1e9:.2f} GB" if n < 1e13 else f"{n / 1e9:.2g} GB"


def check_fits(estimate: float, what: str, limit: float | None = None, lower: str = "") -> None:
    """InputError "<what> would need ~X of memory, more than Y; <lower>" when `estimate` bytes
    exceed the memory available, or `limit` where that is smaller."""
    free = available()
    cap = free if limit is None else min(float(limit), free)
    if estimate > cap:
        which = f"the memory available ({gb(free)})" if limit is None or free <= limit else f"the limit of {gb(limit)}"
        raise InputError(f"{what} would need ~{gb(estimate)} of memory, more than {which}"
                         + (f"; {lower}" if lower else ""))
