"""The sweep's figures: one per method, drawn from what the method module states (`spec.plot`).

One panel per deployment (profile, dataset, temperature), named in its title, drawing only the
configurations that fit in memory (`not_drawn` names the deployments left out). A method's
`PlotSpec` names the column `x` the speedup is drawn against, optionally `hue` (one line per
value; a numeric hue with more than MAX_LINES values is cut into MAX_LINES ranges, each line the
best configuration in its range) or `y` (a heatmap of the best speedup over (x, y)); without a hue,
one line per drafter. Every other hyperparameter is maximised out: each point is the best
configuration with those values, in the sweep's one order (`sweep.ranking`), so the
best a panel labels is the one the tables name. Each panel labels its best configuration and the
1.0 line (plain decoding) where they are drawn; an x whose values double (1, 2, 4, ...) gets a log2
axis. Axis names come from the config's Params (`methods.config`) and the PlotSpec's `labels`.
Columns that take a single value are dropped first (`figure_axes`): nothing is drawn that compares
nothing, and the report says why.
"""
from __future__ import annotations

import dataclasses
import math
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.patches import Rectangle
from matplotlib.ticker import MaxNLocator

from common import atomic
from common.plotting import LABEL_BOX, error_band, heatmap, palette, pyplot, readable_ticks, reference_line
from sweep import ranking
from methods.spec import MethodSpec

MAX_LINES = 6                 # lines per panel; a numeric hue with more values is cut into ranges
PANEL = (4.4, 3.2)            # inches per panel
COLUMNS = 3                   # panels per row
PLAIN = "plain decoding = 1.0x"
MARGINS = (0.75, 0.2, 0.6, 1.0)    # inches left, right, bottom, top (the heading and two-line titles)
GAP = (0.8, 1.05)                   # inches between panels: across (a y label), down (an x label and a title)
LEGEND = 2.0                        # inches right of the panels for a figure's legend
HEAT_GAP = 1.6                      # across heatmaps: their colour bar and its label too


def _save(fig, path: Path, tight: bool = False) -> Path:
    """Save and close; a figure `_grid` laid out has nothing past its edges (not `tight`)."""
    plt = pyplot()
    atomic.save_figure(path, fig, tight=tight)
    plt.close(fig)
    return path


def _fitting(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows that fit in memory; the frame itself when all do (no copy of 10^6 rows)."""
    if "fits" not in frame:
        return frame
    fits = frame["fits"].to_numpy(dtype=bool)
    return frame if fits.all() else frame[fits]


def _read(spec: MethodSpec, frame: pd.DataFrame) -> pd.DataFrame:
    """The columns a method's figure reads (its axes, the panels, what ranks and names a point):
    a scored table holds some forty, and taking rows of all of them was most of a large table's
    drawing time."""
    plot = spec.plot
    axes = (plot.x, plot.hue, plot.y) if plot is not None else ()
    wanted = [*_panel_keys(frame), *axes, "drafter", "config", "speedup", "rank", "fits", "heldout_error",
              *(column for column, _ in ranking.TIE_BREAK)]
    return frame[[c for c in dict.fromkeys(wanted) if c is not None and c in frame]]


def _panel_keys(frame: pd.DataFrame) -> list[str]:
    return [c for c in ("profile", "dataset", "temperature") if c in frame]


def _panel_title(key: dict) -> str:
    extra = [str(key["dataset"])] if "dataset" in key else []
    extra += [f"T={float(key['temperature']):g}"] if "temperature" in key else []
    return f"{key['profile']}" + (f" ({', '.join(extra)})" if extra else "")


def _panels(frame: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    keys = _panel_keys(frame)
    return [(_panel_title(dict(zip(keys, key if isinstance(key, tuple) else (key,)))), group)
            for key, group in frame.groupby(keys, sort=True)]


def not_drawn(frame: pd.DataFrame) -> list[str]:
    """The deployments of a method's table left out of its figure: none of their configurations fits."""
    keys = frame[_panel_keys(frame) + (["fits"] if "fits" in frame else [])]
    drawn = {title for title, _ in _panels(_fitting(keys))}
    return [title for title, _ in _panels(keys) if title not in drawn]


def _varying(frame: pd.DataFrame, column: str | None) -> str | None:
    """`column` if it takes more than one value in `frame`, else None (nothing to compare along it)."""
    return column if column is not None and column in frame and frame[column].nunique(dropna=False) > 1 else None


def figure_axes(spec: MethodSpec, frame: pd.DataFrame) -> tuple[str | None, str | None, str | None]:
    """(x, hue, y) the method's figure is drawn over: its PlotSpec with every column that takes one
    value among the configurations drawn dropped (a one-cell heatmap, a one-point line and a one-line
    legend compare nothing). A heatmap losing a side becomes a line plot; a line plot losing x is
    drawn against its hue. x is None when nothing varies: no figure (`no_figure_note` says why)."""
    return _axes(spec.plot, _shown(spec, frame))


def _shown(spec: MethodSpec, frame: pd.DataFrame) -> pd.DataFrame:
    """What a method's figure draws: the columns it reads, of the configurations that fit."""
    return _fitting(_read(spec, frame))


def _axes(plot, shown: pd.DataFrame) -> tuple[str | None, str | None, str | None]:
    """`figure_axes` of the rows a figure draws (`_shown`)."""
    if plot is None or shown.empty:
        return None, None, None
    x, hue, y = _varying(shown, plot.x), _varying(shown, plot.hue), _varying(shown, plot.y)
    if plot.y is not None and (x is None or y is None):
        x, hue, y = x or y, None, None
    if x is None:
        x, hue = hue, None
    return x, hue, y


def no_figure_note(spec: MethodSpec, frame: pd.DataFrame) -> str:
    """Why `plot_method` drew nothing, for the report."""
    if spec.plot is None:
        return "the method states no figure"
    if frame.empty:
        return "no configuration was scored"
    if "fits" in frame and not frame["fits"].any():
        return "no configuration scored fits in memory"
    columns = [c for c in (spec.plot.x, spec.plot.hue, spec.plot.y) if c is not None]
    return (f"every configuration scored has the same {', '.join(columns)}: nothing to compare "
            "(the table below lists them)")


def axis_label(spec: MethodSpec, column: str) -> str:
    """What a column means, for an axis or a legend: the PlotSpec's label, else the config Param's
    doc, with the column's name."""
    labels = getattr(spec.plot, "labels", None) or {}
    if column in labels:
        return f"{labels[column]} ({column})"
    config = getattr(spec, "config", None)
    if config is not None and dataclasses.is_dataclass(config):
        for f in dataclasses.fields(config):
            doc = getattr(f.metadata.get("param"), "doc", "").split(" (")[0]     # its first clause
            if f.name == column and doc:
                return f"{doc} ({column})"
    return column


def _lines_of(frame: pd.DataFrame, hue: str) -> tuple[pd.Series, list]:
    """Per row the line it belongs to, and the lines in order: the hue's values, or, for a numeric
    hue with more than MAX_LINES values, MAX_LINES ranges of consecutive values ('3-4', '2.5-3.2')."""
    values = frame[hue]
    levels = sorted(values.dropna().unique(), key=lambda v: (isinstance(v, str), v))
    if len(levels) <= MAX_LINES or not pd.api.types.is_numeric_dtype(values):
        return values, levels
    groups = np.array_split(np.asarray(levels, dtype=float), MAX_LINES)
    names = [f"{g[0]:.3g}" if g[0] == g[-1] else f"{g[0]:.3g}-{g[-1]:.3g}" for g in groups]
    starts = np.asarray([g[0] for g in groups])
    index = np.searchsorted(starts, values.to_numpy(float), side="right") - 1
    return pd.Series(np.asarray(names, dtype=object)[index], index=frame.index), names


def _x_axis(ax, values) -> None:
    readable_ticks(ax.xaxis, values)


def _best_text(best: pd.Series, drafters: int) -> str:
    """'best: <config> (<speedup>x)', with its drafter where the panel draws several."""
    drafter = f"{best['drafter']}, " if drafters > 1 and "drafter" in best else ""
    return f"best: {best['config']} ({drafter}{best['speedup']:.2f}x)"


def _label_best(ax, best: pd.Series, x: str, drafters: int = 1) -> None:
    """A star on the best configuration drawn, its label and speedup written beside it."""
    ax.scatter([best[x]], [best["speedup"]], marker="*", s=150, color="black", zorder=6)
    left, right = ax.get_xlim()
    at = best[x]
    if ax.get_xscale() == "log":
        frac = (math.log(at) - math.log(left)) / (math.log(right) - math.log(left))
    else:
        frac = (at - left) / (right - left) if right > left else 0.5
    ax.annotate(_best_text(best, drafters), (at, best["speedup"]),
                xytext=(0, 9), textcoords="offset points", fontsize=7, fontweight="bold", bbox=LABEL_BOX,
                ha="right" if frac > 0.6 else ("left" if frac < 0.25 else "center"), va="bottom", zorder=7)


def _plain_line(ax) -> None:
    """The 1.0 line, named where it is drawn; the y range holds it and, above the data, the best's label."""
    reference_line(ax, 1.0, PLAIN)
    low, high = ax.get_ylim()
    ax.set_ylim(low, high + 0.1 * (high - low))


def _grid(n: int, width: float = PANEL[0], height: float = PANEL[1], gap: float = GAP[0], legend: bool = False):
    """A figure of `n` panels of `width` x `height` inches, COLUMNS to a row (LEGEND inches more on
    the right for a `legend`), laid out by fixed margins (MARGINS, `gap` inches between columns):
    a layout engine, or a tight bounding box when saving, measures every label by drawing the
    figure once more each, which was most of the time the sweep spent writing."""
    plt = pyplot()
    cols = min(COLUMNS, n)
    rows = math.ceil(n / cols)
    fig_w, fig_h = width * cols + (LEGEND if legend else 0.0), height * rows + 0.9
    fig, axes = plt.subplots(rows, cols, figsize=(fig_w, fig_h), squeeze=False)
    left, right, bottom, top = MARGINS
    right += LEGEND if legend else 0.0
    ax_w = (fig_w - left - right - gap * (cols - 1)) / cols
    ax_h = (fig_h - bottom - top - GAP[1] * (rows - 1)) / rows
    fig.subplots_adjust(left=left / fig_w, right=1 - right / fig_w, bottom=bottom / fig_h, top=1 - top / fig_h,
                        wspace=gap / ax_w, hspace=GAP[1] / ax_h)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:n])


def _best_of(panel: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """The best configuration per value of `by` in the panel (one profile's deployment)."""
    return ranking.best_of_table(panel, by) if "rank" in panel else ranking.best_of(panel, by)


def _best(panel: pd.DataFrame) -> pd.Series:
    """The panel's best configuration in the sweep's order (the one the tables name)."""
    return panel.loc[panel["rank"].idxmin()] if "rank" in panel else ranking.ranked(panel).iloc[0]


def plot_method(spec: MethodSpec, frame: pd.DataFrame, path: Path) -> Path | None:
    """The figure of one method's scored table, one panel per deployment; None when there is
    nothing to compare (`no_figure_note`)."""
    shown = _shown(spec, frame)
    x, hue, y = _axes(spec.plot, shown)
    if x is None:
        return None
    panels = _panels(shown)
    if y is not None:
        return _heatmaps(spec, panels, x, y, path)
    line = hue or ("drafter" if _varying(shown, "drafter") else None)
    plt = pyplot()
    lines, levels = _lines_of(shown, line) if line else (pd.Series("all", index=shown.index), ["all"])
    ordered = bool(line) and pd.api.types.is_numeric_dtype(shown[line])     # a scale: light to dark
    colour_of = palette(levels, "viridis" if ordered else "tab10")
    fig, axes = _grid(len(panels), legend=bool(line))
    drawn: set = set()
    banded = False
    for ax, (title, sub) in zip(axes, panels):
        along = x
        if _varying(sub, x) is None and line and _varying(sub, line):      # this deployment has one x:
            along, title = line, f"{title}\n{x} = {sub[x].iloc[0]:g} only"     # drawn against the hue
            points = _best_of(sub, [along]).sort_values(along)
            ax.plot(points[along], points["speedup"], marker="o", ms=3.5, lw=1.4, color="dimgrey")
            banded |= error_band(ax, points[along], points["speedup"], _error(sub), "dimgrey")
        else:
            points = _best_of(sub.assign(__line=lines.loc[sub.index]), ["__line", x])
            for level in levels:
                one = points[points["__line"] == level].sort_values(x)
                if len(one):
                    ax.plot(one[x], one["speedup"], marker="o", ms=3.5, lw=1.4, color=colour_of[level])
                    banded |= error_band(ax, one[x], one["speedup"], _error(sub), colour_of[level])
                    drawn.add(level)
        _x_axis(ax, sub[along])
        ax.yaxis.set_major_locator(MaxNLocator(nbins=5, steps=[1, 2, 2.5, 5, 10]))
        _plain_line(ax)
        _label_best(ax, _best(sub), along, sub["drafter"].nunique() if "drafter" in sub else 1)
        ax.set_title(title, fontsize=8)
        ax.set_xlabel(axis_label(spec, along), fontsize=8)
        ax.set_ylabel("best predicted speedup (x)", fontsize=8)
        ax.tick_params(labelsize=7)
    if drawn and line:
        handles = [plt.Line2D([], [], color=colour_of[v], marker="o", ms=4, lw=1.4) for v in levels if v in drawn]
        names = [str(v) for v in levels if v in drawn]
        title = axis_label(spec, line) + (" (ranges)" if len(levels) != shown[line].nunique() else "")
        fig.legend(handles, names, title=textwrap.fill(title, 28), loc="upper left",
                   bbox_to_anchor=(1 - (LEGEND - 0.1) / fig.get_figwidth(), 0.9),
                   fontsize=7, title_fontsize=8, frameon=False)
    heading = (f"{spec.name}: best predicted speedup against {axis_label(spec, x)}"
               + (f", one line per {axis_label(spec, line)}" if line else "")
               + ("; shaded: within the Profile's held-out error" if banded else ""))
    fig.suptitle(textwrap.fill(heading, int(12 * fig.get_figwidth())), fontsize=10)
    return _save(fig, path)


def _error(panel: pd.DataFrame) -> float:
    """The held-out relative error of the panel's Profile (NaN when its fit states none)."""
    return float(panel["heldout_error"].iloc[0]) if "heldout_error" in panel else float("nan")


def _heatmaps(spec: MethodSpec, panels, x: str, y: str, path: Path) -> Path:
    """One heatmap of the best speedup over (x, y) per deployment, coloured around 1.0 (plain
    decoding), its best cell outlined and named under the panel's title."""
    cells = [_best_of(sub, [y, x]).pivot(index=y, columns=x, values="speedup") for _, sub in panels]
    width = max(4.4, 0.32 * max(c.shape[1] for c in cells) + 2.2)
    height = max(3.2, 0.2 * max(c.shape[0] for c in cells) + 1.4)
    fig, axes = _grid(len(panels), min(width, 9.0), min(height, 8.0), gap=HEAT_GAP)
    for ax, (title, sub), grid in zip(axes, panels, cells):
        spread = max(abs(np.nanmax(grid.to_numpy()) - 1.0), abs(np.nanmin(grid.to_numpy()) - 1.0), 0.05)
        heatmap(ax, grid, 1.0, spread, "best predicted speedup (1.0 = plain decoding)", annotate=grid.size <= 120)
        best = _best(sub)
        row, col = list(grid.index).index(best[y]), list(grid.columns).index(best[x])
        ax.add_patch(Rectangle((col, row), 1, 1, fill=False, edgecolor="black", lw=2.0))
        ax.set_title(f"{title}\n{_best_text(best, sub['drafter'].nunique() if 'drafter' in sub else 1)}, outlined",
                     fontsize=8)
        ax.set_xlabel(axis_label(spec, x), fontsize=8)
        ax.set_ylabel(axis_label(spec, y), fontsize=8)
        ax.tick_params(labelsize=7)
    fig.suptitle(f"{spec.name}: best predicted speedup over ({x}, {y}), every other parameter at its best",
                 fontsize=10)
    return _save(fig, path)


def plot_deployments(answers, path: Path) -> Path | None:
    """The answer's served throughput over plain decoding against batch size, one line per
    deployment (`sweep.deployments.best_per_batch`); None with fewer than two batch
    sizes. A deployment where nothing runs is left out."""
    data = answers.dropna(subset=["throughput_ratio"]) if not answers.empty else answers
    if data.empty or data["batch"].nunique() < 2:
        return None
    plt = pyplot()
    data = data.assign(deployment=data["profile"].astype(str) + " (" + data["dataset"].astype(str)
                       + ", T=" + data["temperature"].map("{:g}".format) + ")")
    fig, ax = plt.subplots(figsize=(7.0, 4.2))
    groups = data.groupby("deployment", sort=True)
    colour_of = palette([name for name, _ in groups])
    for name, group in groups:
        group = group.sort_values("batch")
        ax.plot(group["batch"], group["throughput_ratio"], marker="o", ms=4, color=colour_of[name], label=name)
    _x_axis(ax, data["batch"])
    reference_line(ax, 1.0, "plain decoding = 1.0x (at or below: run ar)")
    ax.set(xlabel="batch size (sequences decoding together)", ylabel="answer's throughput / plain decoding",
           title="what to run against batch size (simulated serving)")
    ax.legend(fontsize=7, title="deployment", title_fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16),
              ncol=2 if data["deployment"].nunique() > 3 else 1, frameon=False)
    fig.tight_layout()
    return _save(fig, path, tight=True)
