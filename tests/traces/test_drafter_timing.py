"""traces.drafter_timing: a drafter's stalled points are timed again, as the target's are."""
from __future__ import annotations

import pytest
import torch

from traces.drafter_timing import drafter_rows


class StallingTimer:
    """Medians that grow with each call (so with context and batch, the order points are timed in),
    but for one stalled call; a point timed again comes back as that call would have without the stall."""

    def __init__(self, stalled_call: int, first_pass: int):
        self.calls, self.stalled_call, self.first_pass = 0, stalled_call, first_pass

    def median(self, run, reset):
        self.calls += 1
        if self.calls > self.first_pass:
            return 0.01 + 0.001 * self.stalled_call, 3
        return (1.0 if self.calls == self.stalled_call else 0.01 + 0.001 * self.calls), 3


def test_a_stalled_draft_forward_is_timed_again():
    ctxs, batches = (0, 8, 16, 32), (1, 2)
    first = len(drafter_rows("tiny", ctxs, StallingTimer(0, 10**6), torch.device("cpu"), torch.float32,
                             batches=batches))
    rows = drafter_rows("tiny", ctxs, StallingTimer(3, first), torch.device("cpu"), torch.float32, batches=batches)
    assert len(rows) == first and rows[2]["seconds"] == pytest.approx(0.013)     # the stalled point, timed again
    assert [r["seconds"] for r in rows if r["seconds"] == 1.0] == []
