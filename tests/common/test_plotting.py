"""Tick labels a person reads: every value drawn when they are few, every other one past MOST_TICKS
(each tick is several artists, most of a many-panel figure's drawing), powers of two on a log2 axis."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from common.plotting import MOST_TICKS, colours, heatmap, pyplot, readable_ticks


@pytest.mark.parametrize("n", [3, MOST_TICKS, MOST_TICKS + 1, 12])
def test_integer_values_get_a_tick_each_or_every_other(n):
    plt = pyplot()
    fig, ax = plt.subplots()
    values = np.arange(1, n + 1)
    ax.plot(values, values)
    readable_ticks(ax.xaxis, values)
    ticks = list(ax.xaxis.get_major_locator()())
    plt.close(fig)
    assert ticks == (list(values) if n <= MOST_TICKS else list(values[::2]))
    assert len(ticks) <= MOST_TICKS


def test_doubling_values_get_a_log2_axis():
    plt = pyplot()
    fig, ax = plt.subplots()
    values = [1, 2, 4, 8, 16, 32]
    ax.plot(values, values)
    readable_ticks(ax.xaxis, values)
    scale = ax.get_xscale()
    plt.close(fig)
    assert scale == "log"


def test_heatmap_draws_rows_top_down_and_writes_each_known_cell():
    plt = pyplot()
    fig, ax = plt.subplots()
    grid = pd.DataFrame([[1.2, np.nan, 0.8], [1.0, 1.5, 0.5]], index=[1, 2], columns=[2, 4, 8])
    heatmap(ax, grid, 1.0, 0.5, "speedup", annotate=True)
    texts = {(t.get_position(), t.get_text()) for t in ax.texts}
    ylim, labels = ax.get_ylim(), [t.get_text() for t in ax.get_xticklabels()]
    plt.close(fig)
    assert texts == {((0.5, 0.5), "1.20"), ((2.5, 0.5), "0.80"), ((0.5, 1.5), "1.00"), ((1.5, 1.5), "1.50"),
                     ((2.5, 1.5), "0.50")}
    assert ylim == (2.0, 0.0)                       # the first row at the top
    assert labels == ["2", "4", "8"]


def test_colours_repeat_a_qualitative_map_and_space_a_continuous_one():
    tab = colours("tab10", 12)
    assert len(set(tab[:10])) == 10 and tab[10:] == tab[:2]
    ramp = colours("viridis", 3)
    assert len(set(ramp)) == 3 and ramp[0] != colours("viridis", 1)[0]
