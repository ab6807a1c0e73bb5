"""The sweep's figures, one per method, in the spirit of the papers' own.

Every function takes the scored table of one method (all profiles; columns from
`experiments.scoring.SCORE_COLUMNS` plus the method's hyperparameters) and a path, draws with
seaborn, saves atomically and returns the path, or None when the table holds nothing to draw.

- sd: speedup against gamma, one line per profile (Leviathan et al., MCSD Tables 2-3).
- mcsd: speedup against block efficiency for every k-configuration of a fixed depth, coloured by
  budget, monotone vs not (MCSD Fig. 4).
- cape: the best bin arrays as a heatmap, bins (confidence) across, candidates in the cells.
- lookahead: the best speedup over G for every (W, N) (Lookahead Fig. 5 / Table 4).
- kangaroo: speedup over (gamma, eta).
- coral: router groups N x top-n grid of the best speedup (CORAL Table 4).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from common import atomic


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


def _one_profile(frame: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """Heatmaps show one setup: the (profile, drafter) whose best configuration is fastest."""
    keys = [c for c in ("profile", "drafter") if c in frame]
    best = frame.groupby(keys).speedup.max().idxmax()
    best = best if isinstance(best, tuple) else (best,)
    mask = np.logical_and.reduce([frame[k] == v for k, v in zip(keys, best)])
    return frame[mask], " / ".join(map(str, best))


def plot_sd(frame: pd.DataFrame, path: Path) -> Path | None:
    if frame.empty:
        return None
    plt, sns = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.6))
    frame = frame.assign(setup=frame.profile + " / " + frame.drafter.astype(str)) if "drafter" in frame else \
        frame.assign(setup=frame.profile)
    sns.lineplot(data=frame, x="gamma", y="speedup", hue="setup", marker="o", ax=ax)
    ax.set(xlabel="draft length gamma", ylabel="predicted speedup", title="Chain SD: speedup against gamma")
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.legend(fontsize=6, loc="best")
    return _save(fig, path)


def plot_mcsd(frame: pd.DataFrame, path: Path, depth: int = 2) -> Path | None:
    """MCSD Fig. 4: every k-configuration of depth `depth` (the paper fixes gamma = 2)."""
    sub = frame[(frame.gamma == depth) & frame.replacement.astype(bool)] if "replacement" in frame else frame
    if sub.empty:
        return None
    sub, profile = _one_profile(sub)
    plt, sns = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    sub = sub.assign(budget_label=sub.budget.astype(int).astype(str),
                     order=np.where(sub.monotone, "non-increasing", "increasing somewhere"))
    order = [str(b) for b in sorted(sub.budget.astype(int).unique())]
    sns.scatterplot(data=sub, x="tokens_per_step", y="speedup", hue="budget_label", hue_order=order, style="order",
                    ax=axes[0], s=40)
    axes[0].set(xlabel="block efficiency tau (tokens per step)", ylabel="predicted speedup",
                title=f"k-configurations, gamma={depth}")
    axes[0].legend(fontsize=6, title="budget", title_fontsize=7)
    top = sub.sort_values("speedup", ascending=False).head(16)
    sns.barplot(data=top, y="config", x="speedup", hue="budget_label", hue_order=order, dodge=False, ax=axes[1])
    axes[1].set(xlabel="predicted speedup", ylabel="", title="best k-configurations",
                xlim=(0.97 * top.speedup.min(), 1.01 * top.speedup.max()))
    axes[1].tick_params(axis="y", labelsize=6)
    axes[1].legend(fontsize=6, title="budget", title_fontsize=7)
    fig.suptitle(profile, fontsize=8)
    return _save(fig, path)


def plot_cape(frame: pd.DataFrame, path: Path, top: int = 20) -> Path | None:
    if frame.empty:
        return None
    sub, profile = _one_profile(frame)
    best = sub.sort_values("speedup", ascending=False).head(top)
    grid = np.asarray([list(b) for b in best.bins])
    plt, sns = _plt()
    fig, ax = plt.subplots(figsize=(7, 0.28 * len(best) + 1.2))
    labels = [f"gamma={g}  {s:.2f}x" for g, s in zip(best.gamma, best.speedup)]
    sns.heatmap(pd.DataFrame(grid, index=labels, columns=[f"{i/10:.1f}" for i in range(grid.shape[1])]),
                annot=True, fmt="d", cbar_kws={"label": "candidates kept"}, cmap="viridis", ax=ax)
    ax.set(xlabel="drafter confidence bin floor(10*conf)/10", ylabel="", title=f"CAPE: best bin arrays ({profile})")
    ax.tick_params(axis="y", labelsize=6)
    return _save(fig, path)


def plot_lookahead(frame: pd.DataFrame, path: Path) -> Path | None:
    if frame.empty:
        return None
    sub, profile = _one_profile(frame)
    grid = sub.groupby(["N", "W"]).speedup.max().unstack("W")
    plt, sns = _plt()
    fig, ax = plt.subplots(figsize=(9, 3.4))
    sns.heatmap(grid, annot=True, fmt=".2f", cmap="magma", ax=ax, annot_kws={"size": 6},
                cbar_kws={"label": "best speedup over G"})
    ax.set(xlabel="window size W", ylabel="n-gram size N", title=f"Lookahead: speedup over (W, N) ({profile})")
    return _save(fig, path)


def plot_kangaroo(frame: pd.DataFrame, path: Path) -> Path | None:
    if frame.empty:
        return None
    sub, profile = _one_profile(frame)
    grid = sub.groupby(["gamma", "eta"]).speedup.max().unstack("eta")
    plt, sns = _plt()
    fig, ax = plt.subplots(figsize=(9, 3.4))
    sns.heatmap(grid, annot=False, cmap="magma", ax=ax, cbar_kws={"label": "best speedup over exit layer"})
    ax.set(xlabel="early-stop threshold eta", ylabel="max draft steps gamma", title=f"Kangaroo ({profile})")
    return _save(fig, path)


def plot_coral(frame: pd.DataFrame, path: Path) -> Path | None:
    if frame.empty:
        return None
    sub, profile = _one_profile(frame)
    grid = sub.groupby(["groups", "top_n"]).speedup.max().unstack("top_n")
    grid.index = ["no router" if n == 0 else str(n) for n in grid.index]
    grid.columns = [("-" if t == 0 else f"top-{t}") for t in grid.columns]
    plt, sns = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.4))
    sns.heatmap(grid, annot=True, fmt=".2f", cmap="magma", ax=ax, cbar_kws={"label": "best speedup over gamma"})
    ax.set(xlabel="activated groups", ylabel="router groups N", title=f"CORAL LM-head router ({profile})")
    return _save(fig, path)


PLOTTERS = {
    "sd": plot_sd,
    "mcsd": plot_mcsd,
    "cape": plot_cape,
    "lookahead": plot_lookahead,
    "kangaroo": plot_kangaroo,
    "coral": plot_coral,
}
