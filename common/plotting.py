"""What every figure of the project shares: matplotlib without a display, one theme, tick labels
a person reads (1, 2, 4, 8 or 0.1, 1, 10, never 2 x 10^1), reference lines named where they are
drawn, and one colour per series across every panel of a figure."""
from __future__ import annotations

import numpy as np

MOST_TICKS = 8        # labelled ticks on an axis at most: each one is drawn as several artists
LABEL_BOX = dict(facecolor="white", edgecolor="none", alpha=0.8, pad=0.5)   # a label stays readable over lines


THEME = {            # a white grid behind the data, paper-sized type, light axes and ticks
    "axes.facecolor": "white", "axes.edgecolor": ".8", "axes.grid": True, "axes.axisbelow": True,
    "axes.labelcolor": ".15", "axes.linewidth": 1.0, "axes.labelsize": 9.6, "axes.titlesize": 9.6,
    "font.size": 9.6, "grid.color": ".8", "legend.fontsize": 8.8, "legend.title_fontsize": 9.6,
    "lines.linewidth": 1.2, "lines.markersize": 4.8, "lines.solid_capstyle": "round",
    "patch.edgecolor": "w", "patch.force_edgecolor": True, "patch.linewidth": 0.8, "text.color": ".15",
    "xtick.bottom": False, "ytick.left": False, "xtick.color": ".15", "ytick.color": ".15",
    "xtick.labelsize": 8.8, "ytick.labelsize": 8.8,
    # titles sit at the top of their axes: placing them "automatically" measures every tick label
    # of every panel once more before drawing (nearly half of a many-panel figure's drawing time)
    "axes.titley": 1.0,
}


def pyplot():
    """matplotlib.pyplot on the Agg backend with the project's theme (THEME). matplotlib alone: a
    plotting library built on scipy.stats was a second of every sweep's start."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    matplotlib.rcParams.update(THEME)
    return plt


def colours(name: str, n: int) -> list[tuple[float, float, float]]:
    """`n` colours of matplotlib colormap `name`: a qualitative one's in order (repeated past its
    last), a continuous one's evenly spaced inside its ends (light and dark, not white and black)."""
    import matplotlib

    cmap = matplotlib.colormaps[name]
    if getattr(cmap, "N", 256) < 256:           # qualitative (tab10: 10 colours)
        return [tuple(cmap(i % cmap.N)[:3]) for i in range(n)]
    return [tuple(cmap(x)[:3]) for x in np.linspace(0.0, 1.0, n + 2)[1:-1]]


def readable_ticks(axis, values=None, base: float = 10) -> None:
    """Plain-number tick labels on `axis` (ax.xaxis / ax.yaxis). Given `values` (what is drawn along
    it): a tick at each when they are few (every other past MOST_TICKS), on a log2 scale when they
    double (1, 2, 4, ...)."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, MaxNLocator, NullLocator

    label = FuncFormatter(lambda t, _: f"{t:,.0f}" if abs(t) >= 1000 else f"{t:g}")
    scale = axis.get_scale()
    if values is not None:
        v = np.unique(np.asarray(values, dtype=float))
        v = v[np.isfinite(v)]
        if doubling(v):
            axis.axes.set_xscale("log", base=2) if axis is axis.axes.xaxis else axis.axes.set_yscale("log", base=2)
            axis.set_major_locator(FixedLocator(_spaced(v)) if len(v) <= 12 else LogLocator(base=2, numticks=12))
            axis.set_minor_locator(NullLocator())
        elif len(v) <= 12 and np.allclose(v, np.round(v)) and scale == "linear":
            axis.set_major_locator(FixedLocator(v[::-(-len(v) // MOST_TICKS)]))     # every value, or every other
        elif scale == "linear":
            axis.set_major_locator(MaxNLocator(nbins=8))
    elif scale == "log":
        axis.set_major_locator(LogLocator(base=base, subs=(1.0, 2.0, 5.0), numticks=12))
        axis.set_minor_locator(NullLocator())
    axis.set_major_formatter(label)


def _spaced(values: np.ndarray, apart: float = 0.6) -> list[float]:
    """Tick values on a log2 axis at least `apart` doublings apart (the largest kept), so that
    their labels do not run into each other (384 beside 512)."""
    kept: list[float] = []
    for v in sorted(values, reverse=True):
        if not kept or np.log2(kept[-1]) - np.log2(v) >= apart:
            kept.append(float(v))
    return sorted(kept)


def doubling(values) -> bool:
    """Whether positive values grow by doubling (1, 2, 4, 8... or batch sizes 1, 4, 16, ... 384, 512):
    powers of two spanning 8x, or any values spanning 16x. Such an axis is drawn in log2."""
    v = np.unique(np.asarray(values, dtype=float))
    if len(v) < 3 or np.any(v <= 0) or v.max() / v.min() < 8:
        return False
    return bool(np.allclose(np.log2(v), np.round(np.log2(v)))) or v.max() / v.min() >= 16


def reference_line(ax, y: float, text: str, color: str = "dimgrey", keep_in_view: bool = True) -> None:
    """A dashed horizontal line at `y` named at its right end; the y range holds it."""
    if keep_in_view:
        low, high = ax.get_ylim()
        if ax.get_yscale() == "log":
            ax.set_ylim(min(low, y / 1.3), max(high, y * 1.3))
        else:
            pad = 0.05 * max(high - low, abs(y) * 0.1)
            ax.set_ylim(min(low, y - pad), max(high, y + pad))
    ax.axhline(y, color=color, lw=0.9, ls="--", zorder=1)
    ax.text(0.99, y, text, transform=ax.get_yaxis_transform(), ha="right", va="bottom", fontsize=7,
            color=color, bbox=LABEL_BOX, zorder=8)


def palette(labels, name: str = "tab10") -> dict:
    """One colour per label, the same in every panel of a figure."""
    labels = list(dict.fromkeys(labels))
    return dict(zip(labels, colours(name, len(labels))))


def error_band(ax, x, y, error: float, colour, along: str = "y") -> bool:
    """Shade [y / (1 + error), y / (1 - error)] around a line: the measurements a Profile's held-out
    relative error (prediction / measurement - 1) allows, the convention of the reports' verdicts and
    of `costmodel.uncertainty.interval`; `along="x"` shades x instead, at each y (a throughput at each
    latency); False when none is known (or it bounds nothing above)."""
    if not (error is not None and 0 < error < 1):
        return False
    if along == "x":
        x = np.asarray(x, dtype=float)
        ax.fill_betweenx(y, x / (1 + error), x / (1 - error), color=colour, alpha=0.15, lw=0)
        return True
    y = np.asarray(y, dtype=float)
    ax.fill_between(x, y / (1 + error), y / (1 - error), color=colour, alpha=0.15, lw=0)
    return True


def heatmap(ax, grid, centre: float, spread: float, label: str, annotate: bool, cmap: str = "RdYlGn") -> None:
    """`grid` (a DataFrame: rows drawn top to bottom, columns left to right) as coloured cells around
    `centre` (+- `spread`), a colour bar named `label`, each cell's value written in it when
    `annotate`; cell (row i, column j) spans [j, j + 1] x [i, i + 1] in data coordinates."""
    values = np.ma.masked_invalid(grid.to_numpy(dtype=float))
    mesh = ax.pcolormesh(values, cmap=cmap, vmin=centre - spread, vmax=centre + spread)
    ax.set_xlim(0, values.shape[1])
    ax.set_ylim(values.shape[0], 0)
    ax.set_xticks(np.arange(values.shape[1]) + 0.5, [_tick_text(v) for v in grid.columns])
    ax.set_yticks(np.arange(values.shape[0]) + 0.5, [_tick_text(v) for v in grid.index])
    ax.grid(False)
    for side in ax.spines.values():
        side.set_visible(False)
    ax.figure.colorbar(mesh, ax=ax, label=label).outline.set_visible(False)
    if not annotate:
        return
    rgba = mesh.cmap(mesh.norm(values))
    light = (0.2126 * rgba[..., 0] + 0.7152 * rgba[..., 1] + 0.0722 * rgba[..., 2]) > 0.408
    for (i, j), value in np.ndenumerate(values.filled(np.nan)):
        if np.isfinite(value):
            ax.text(j + 0.5, i + 0.5, f"{value:.2f}", ha="center", va="center", fontsize=6,
                    color=".15" if light[i, j] else "white")


def _tick_text(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)
