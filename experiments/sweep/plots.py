"""The sweep's figures: one per method, drawn from what the method module states (`spec.plot`).

A method's `PlotSpec` names the column `x` the speedup is drawn against, optionally the column
`hue` giving one line per value, and optionally `y`, which turns the figure into a heatmap of the
best speedup over (x, y). Every other hyperparameter is maximised out, so each point is the best
configuration with those values. A line plot without `hue` draws one line per setup (profile /
drafter); with a hue, and for heatmaps, only the setup whose best configuration is fastest is shown.
Columns that take a single value are dropped first (`figure_axes`): nothing is drawn that compares
nothing, and the report says why. The best configuration drawn is marked and named on the figure.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from common import atomic
from methods.spec import MethodSpec


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    import seaborn as sns

    sns.set_theme(style="whitegrid", context="paper")
    return plt, sns


def _save(fig, path: Path) -> Path:
    plt, _ = _plt()
    atomic.save_figure(path, fig)
    plt.close(fig)
    return path


def _setup_of(frame: pd.DataFrame) -> pd.Series:
    """'profile / drafter' of every row (the profile alone where no drafter is used)."""
    drafter = frame["drafter"].astype(str) if "drafter" in frame else pd.Series("-", index=frame.index)
    return frame["profile"].astype(str).where(drafter == "-", frame["profile"].astype(str) + " / " + drafter)


def _one_setup(frame: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The rows of the (profile, drafter) whose best configuration is fastest."""
    setup = _setup_of(frame)
    best = frame.groupby(setup).speedup.max().idxmax()
    return frame[setup == best], best


def _varying(frame: pd.DataFrame, column: str | None) -> str | None:
    """`column` if it takes more than one value in `frame`, else None (nothing to compare along it)."""
    return column if column is not None and column in frame and frame[column].nunique(dropna=False) > 1 else None


def figure_axes(spec: MethodSpec, frame: pd.DataFrame) -> tuple[str | None, str | None, str | None]:
    """(x, hue, y) the method's figure is drawn over: its PlotSpec with every column that takes one
    value dropped (a one-cell heatmap, a one-point line and a one-line legend compare nothing).
    A heatmap losing a side becomes a line plot; a line plot losing x is drawn against its hue.
    x is None when nothing varies: no figure (`no_figure_note` says why)."""
    plot = spec.plot
    if plot is None or frame.empty:
        return None, None, None
    shown = _one_setup(frame)[0] if plot.hue or plot.y else frame     # the rows a hue or heatmap draws
    x, hue, y = _varying(shown, plot.x), _varying(shown, plot.hue), _varying(shown, plot.y)
    if plot.y is not None and (x is None or y is None):
        x, hue, y = x or y, None, None
    if x is None:
        x, hue = hue, None
    if x is not None and hue is None and y is None and _varying(frame, x) is None:
        x = None
    return x, hue, y


def no_figure_note(spec: MethodSpec, frame: pd.DataFrame) -> str:
    """Why `plot_method` drew nothing, for the report."""
    if spec.plot is None:
        return "the method states no figure"
    if frame.empty:
        return "no configuration was scored"
    columns = [c for c in (spec.plot.x, spec.plot.hue, spec.plot.y) if c is not None]
    return (f"every configuration scored has the same {', '.join(columns)}: nothing to compare "
            "(the table below lists them)")


def _mark_best(ax, data: pd.DataFrame, x: str, y: str | None = None, cells=None) -> None:
    """A star on the best configuration drawn (a heatmap: an outlined cell), labelled with it."""
    best = data.loc[data["speedup"].idxmax()]
    label = f"best: {best['config']} ({best['speedup']:.2f}x)" if "config" in data else f"best {best['speedup']:.2f}x"
    if cells is not None:
        from matplotlib.patches import Rectangle

        row, col = list(cells.index).index(best[y]), list(cells.columns).index(best[x])
        ax.add_patch(Rectangle((col, row), 1, 1, fill=False, edgecolor="cyan", lw=2.0))
        ax.text(col + 0.5, row - 0.1, label, color="black", fontsize=6, ha="center", va="bottom")
        return
    ax.scatter([best[x]], [best["speedup"]], marker="*", s=140, color="crimson", zorder=5, label=label)


def plot_method(spec: MethodSpec, frame: pd.DataFrame, path: Path) -> Path | None:
    """The figure of one method's scored table (all profiles); None when there is nothing to
    compare (`no_figure_note`). The best configuration drawn is always marked; legends sit
    outside the axes so they cover no data."""
    x, hue, y = figure_axes(spec, frame)
    if x is None:
        return None
    plt, sns = _plt()
    if y is not None:
        sub, setup = _one_setup(frame)
        best = sub.loc[sub.groupby([y, x]).speedup.idxmax()]
        grid = best.pivot(index=y, columns=x, values="speedup")
        fig, ax = plt.subplots(figsize=(max(5.0, 0.45 * grid.shape[1] + 2), max(3.0, 0.3 * grid.shape[0] + 1.2)))
        sns.heatmap(grid, annot=grid.size <= 200, fmt=".2f", cmap="magma", ax=ax, annot_kws={"size": 6},
                    cbar_kws={"label": "best predicted speedup"})
        _mark_best(ax, best, x, y, cells=grid)
        ax.set(xlabel=x, ylabel=y, title=f"{spec.name}: best speedup over ({x}, {y}) ({setup})")
        return _save(fig, path)
    if hue is None:
        shown = frame.assign(setup=_setup_of(frame))
        hue, title = "setup", f"{spec.name}: best speedup against {x}"
    else:
        shown, setup = _one_setup(frame)
        title = f"{spec.name}: best speedup against {x} ({setup})"
    best = shown.loc[shown.groupby([hue, x]).speedup.idxmax()]
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    numeric = pd.api.types.is_numeric_dtype(best[hue]) and best[hue].nunique() > 8
    sns.lineplot(data=best, x=x, y="speedup", hue=hue, marker="o", markersize=3 if numeric else 5, ax=ax,
                 palette="viridis" if numeric else None, legend="brief")
    _mark_best(ax, best, x)
    ax.set(xlabel=x, ylabel="best predicted speedup", title=title)
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.legend(fontsize=6, title=hue, title_fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return _save(fig, path)


def plot_deployments(answers, path: Path) -> Path | None:
    """The best served throughput over plain decoding against batch size, one line per deployment
    (`experiments.sweep.deployments.best_per_batch`); None with fewer than two batch sizes."""
    if answers.empty or answers["batch"].nunique() < 2:
        return None
    plt, sns = _plt()
    data = answers.assign(deployment=answers["profile"].astype(str) + " / " + answers["dataset"].astype(str)
                          + " / T=" + answers["temperature"].map("{:g}".format))
    fig, ax = plt.subplots(figsize=(7.0, 4.0))
    sns.lineplot(data=data, x="batch", y="throughput_ratio", hue="deployment", marker="o", ax=ax)
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set(xscale="log", xlabel="batch size (sequences decoding together)",
           ylabel="best throughput / plain decoding", title="speculation against batch size (simulated serving)")
    ax.legend(fontsize=6, title="deployment", title_fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0),
              frameon=False)
    return _save(fig, path)
