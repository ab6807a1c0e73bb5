"""The sweep's figures: one per method, drawn from what the method module states (`spec.plot`).

A method's `PlotSpec` names the column `x` the speedup is drawn against, optionally the column
`hue` giving one line per value, and optionally `y`, which turns the figure into a heatmap of the
best speedup over (x, y). Every other hyperparameter is maximised out, so each point is the best
configuration with those values. A line plot without `hue` draws one line per setup (profile /
drafter); with a hue, and for heatmaps, only the setup whose best configuration is fastest is shown.
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


def plot_method(spec: MethodSpec, frame: pd.DataFrame, path: Path) -> Path | None:
    """The figure of one method's scored table (all profiles); None when there is nothing to draw."""
    plot = spec.plot
    if plot is None or frame.empty or plot.x not in frame:
        return None
    plt, sns = _plt()
    if plot.y is not None:
        sub, setup = _one_setup(frame)
        grid = sub.groupby([plot.y, plot.x]).speedup.max().unstack(plot.x)
        fig, ax = plt.subplots(figsize=(max(5.0, 0.45 * grid.shape[1] + 2), max(3.0, 0.3 * grid.shape[0] + 1.2)))
        sns.heatmap(grid, annot=grid.size <= 200, fmt=".2f", cmap="magma", ax=ax, annot_kws={"size": 6},
                    cbar_kws={"label": "best predicted speedup"})
        ax.set(xlabel=plot.x, ylabel=plot.y, title=f"{spec.name}: best speedup over ({plot.x}, {plot.y}) ({setup})")
        return _save(fig, path)
    if plot.hue is None:
        data = frame.assign(setup=_setup_of(frame)).groupby(["setup", plot.x], as_index=False).speedup.max()
        hue, title = "setup", f"{spec.name}: best speedup against {plot.x}"
    else:
        sub, setup = _one_setup(frame)
        data = sub.groupby([plot.hue, plot.x], as_index=False).speedup.max()
        hue, title = plot.hue, f"{spec.name}: best speedup against {plot.x} ({setup})"
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    numeric = pd.api.types.is_numeric_dtype(data[hue]) and data[hue].nunique() > 8
    sns.lineplot(data=data, x=plot.x, y="speedup", hue=hue, marker=None if numeric else "o", ax=ax,
                 palette="viridis" if numeric else None, legend="brief")
    ax.set(xlabel=plot.x, ylabel="best predicted speedup", title=title)
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.legend(fontsize=6, loc="best", title=hue, title_fontsize=7)
    return _save(fig, path)


def plot_deployments(answers, path: Path) -> Path | None:
    """The best served throughput over plain decoding against batch size, one line per deployment
    (`experiments.deployments.best_per_batch`); None with fewer than two batch sizes."""
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
    ax.legend(fontsize=6, loc="best", title="deployment", title_fontsize=7)
    return _save(fig, path)
