"""Tick labels a person reads: every value drawn when they are few, every other one past MOST_TICKS
(each tick is several artists, most of a many-panel figure's drawing), powers of two on a log2 axis."""
from __future__ import annotations

import numpy as np
import pytest

from common.plotting import MOST_TICKS, pyplot, readable_ticks


@pytest.mark.parametrize("n", [3, MOST_TICKS, MOST_TICKS + 1, 12])
def test_integer_values_get_a_tick_each_or_every_other(n):
    plt, _ = pyplot()
    fig, ax = plt.subplots()
    values = np.arange(1, n + 1)
    ax.plot(values, values)
    readable_ticks(ax.xaxis, values)
    ticks = list(ax.xaxis.get_major_locator()())
    plt.close(fig)
    assert ticks == (list(values) if n <= MOST_TICKS else list(values[::2]))
    assert len(ticks) <= MOST_TICKS


def test_doubling_values_get_a_log2_axis():
    plt, _ = pyplot()
    fig, ax = plt.subplots()
    values = [1, 2, 4, 8, 16, 32]
    ax.plot(values, values)
    readable_ticks(ax.xaxis, values)
    scale = ax.get_xscale()
    plt.close(fig)
    assert scale == "log"
