"""Seeds derived per task: a stable hash of what the task is.

A shared counter (`seed + i` over a list of tasks) makes a task's random draws depend on what
else is in the list and in which order: sweeping a profile alone or beside others would give it
other numbers. `derive_seed(seed, *parts)` depends on the run's seed and the task's own parts
(profile, configuration, load...) only, and is the same in every process and Python version.
"""
from __future__ import annotations

import hashlib
import json


def derive_seed(seed: int, *parts: object) -> int:
    """A 32-bit seed from the run's `seed` and the task's `parts` (written with str())."""
    text = json.dumps([int(seed), *(str(p) for p in parts)])
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=4).digest(), "little")
