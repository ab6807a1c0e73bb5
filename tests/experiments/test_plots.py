"""The sweep's figures compare something or are not drawn (with a note), one panel per deployment,
each naming its best configuration and the 1.0 line, legends that list what is drawn, log axes where
values double, nothing that does not fit; the report's "Not scored" list is one line per reason."""
import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import PolyCollection

from sweep import plots, ranking
from sweep.markdown import not_scored
from methods.spec import PlotSpec


class Spec:
    name = "toy"

    def __init__(self, plot):
        self.plot = plot


def _frame(**columns) -> pd.DataFrame:
    n = max(len(v) for v in columns.values() if isinstance(v, list))
    frame = pd.DataFrame({k: v if isinstance(v, list) else [v] * n for k, v in columns.items()})
    frame["config"] = [f"toy {i}" for i in range(n)]
    return frame.assign(drafter="-")


def test_columns_that_take_one_value_are_dropped():
    one_eta = _frame(profile="p", eta=0.0, gamma=[1, 2, 3], speedup=[1.1, 1.4, 1.2])
    assert plots.figure_axes(Spec(PlotSpec(x="eta", hue="gamma")), one_eta) == ("gamma", None, None)
    one_router = _frame(profile="p", router="none", gamma=[1, 2], speedup=[1.1, 1.3])
    assert plots.figure_axes(Spec(PlotSpec(x="gamma", hue="router")), one_router) == ("gamma", None, None)
    one_row = _frame(profile="p", W=[5, 5], G=[3, 3], speedup=[1.0, 1.2])
    assert plots.figure_axes(Spec(PlotSpec(x="W", y="G")), one_row) == (None, None, None)
    assert "W, G" in plots.no_figure_note(Spec(PlotSpec(x="W", y="G")), one_row)
    flat_g = _frame(profile="p", W=[4, 5, 6], G=[3, 3, 3], speedup=[1.0, 1.2, 1.1])
    assert plots.figure_axes(Spec(PlotSpec(x="W", y="G")), flat_g) == ("W", None, None)


def _drawn(spec, frame, tmp_path, monkeypatch):
    drawn = {}
    monkeypatch.setattr(plots, "_save", lambda fig, path, **_: drawn.setdefault("fig", fig) and path)
    assert plots.plot_method(spec, frame, tmp_path / "toy.png") is not None
    return drawn["fig"]


@pytest.mark.parametrize("plot", [PlotSpec(x="gamma"), PlotSpec(x="gamma", hue="k"), PlotSpec(x="gamma", y="k")])
def test_one_panel_per_deployment_each_naming_its_best(plot, tmp_path, monkeypatch):
    """Each deployment (profile, dataset, temperature) gets its own panel named in its title; each
    panel labels its best configuration and, for lines, the 1.0 line; a legend sits right of the
    panels and lists the lines drawn."""
    frame = _frame(profile=["p"] * 6 + ["q"] * 6, gamma=[1, 2, 3] * 4, k=([1] * 3 + [2] * 3) * 2,
                   speedup=[1.0, 1.5, 1.2, 1.1, 3.3, 1.4, 0.9, 1.0, 1.1, 1.2, 1.3, 1.4])
    fig = _drawn(Spec(plot), frame, tmp_path, monkeypatch)
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title().split("\n")[0] for ax in panels] == ["p", "q"]
    named = [ax.get_title() + " ".join(t.get_text() for t in ax.texts) for ax in panels]
    assert "best: toy 4 (3.30x)" in named[0] and "toy 11 (1.40x)" in named[1], named
    if plot.y is None:
        assert all(plots.PLAIN in [t.get_text() for t in ax.texts] for ax in panels)
    for legend in fig.legends:
        assert legend.get_bbox_to_anchor().x0 >= max(ax.get_window_extent().x1 for ax in panels) - 1
        assert len(legend.get_texts()) == len({line.get_color() for ax in panels for line in ax.lines
                                               if line.get_linestyle() == "-"})


def test_budgets_that_double_get_a_log_axis_and_many_values_few_lines(tmp_path, monkeypatch):
    budget = [1, 2, 4, 8, 16, 32, 64] * 12
    depth = [d for d in range(1, 13) for _ in range(7)]
    frame = _frame(profile="p", budget=budget, depth=depth, speedup=[1 + 0.01 * b + 0.02 * d for b, d in
                                                                    zip(budget, depth)])
    fig = _drawn(Spec(PlotSpec(x="budget", hue="depth")), frame, tmp_path, monkeypatch)
    assert fig.axes[0].get_xscale() == "log"
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["1-2", "3-4", "5-6", "7-8", "9-10", "11-12"]


def test_configurations_that_do_not_fit_are_not_drawn():
    frame = _frame(profile=["p"] * 3 + ["q"] * 3, gamma=[1, 2, 3] * 2, speedup=[1.0, 1.5, 1.2, 2.0, 2.5, 2.2])
    frame["fits"] = [True] * 3 + [False] * 3
    frame["dataset"], frame["temperature"] = "d", 0.0
    assert plots.not_drawn(frame) == ["q (d, T=0)"]
    assert plots.figure_axes(Spec(PlotSpec(x="gamma")), frame.assign(fits=False)) == (None, None, None)
    assert plots.no_figure_note(Spec(PlotSpec(x="gamma")), frame.assign(fits=False)) == \
        "no configuration scored fits in memory"


def test_not_scored_is_one_line_per_reason():
    skipped = [f"profile '{p}' has no glide drafter with acceptance model at temperature 0 for method glide"
               for p in ("a", "b", "c")] + ["profile 'a' has no kangaroo drafter for method kangaroo"]
    assert not_scored(skipped) == [
        "has no glide drafter with acceptance model at temperature 0 for method glide: 3 profile(s) (a, b, c)",
        "has no kangaroo drafter for method kangaroo: 1 profile(s) (a)"]


def test_a_panels_best_read_from_the_tables_rank_is_the_rankings_best():
    """The figures take each point's best from the table's `rank` (sorting 10^6 rows once, not per
    panel): the same rows `ranking.best_of` picks, ties on speedup broken alike."""
    rng = np.random.default_rng(0)
    n = 400
    frame = pd.DataFrame({"profile": "p", "gamma": rng.integers(1, 6, n), "budget": rng.choice([1, 2, 4, 8], n),
                          "speedup": rng.choice([1.0, 1.2, 1.25, 1.5], n), "verified_per_step": rng.integers(1, 4, n),
                          "draft_cost": rng.choice([0.1, 0.2], n), "drafter": rng.choice(["a", "b"], n),
                          "config": [f"toy {i:03d}" for i in rng.permutation(n)]})
    table = ranking.ranked(frame, "speedup", ["profile"])
    table = table.assign(rank=np.arange(1, n + 1)).sample(frac=1.0, random_state=1)    # any row order
    for by in (["gamma"], ["budget", "gamma"], ["drafter"]):
        want = ranking.best_of(table, by).set_index(by).sort_index()
        got = plots._best_of(table, by).set_index(by).sort_index()
        pd.testing.assert_frame_equal(got, want)
    assert plots._best(table).name == ranking.ranked(table).index[0]


def test_lines_carry_the_profiles_heldout_error_as_a_band_where_it_is_known(tmp_path, monkeypatch):
    """A Profile with a held-out error gets [speedup / (1 + error), speedup / (1 - error)] shaded around
    each line (the measurements that error allows, as the intervals read it) and the heading says so;
    one without (NaN) gets no band."""
    known = _frame(profile="p", gamma=[1, 2, 3], speedup=[1.0, 1.5, 1.2], heldout_error=0.1)
    fig = _drawn(Spec(PlotSpec(x="gamma")), known, tmp_path, monkeypatch)
    bands = [c for c in fig.axes[0].collections if isinstance(c, PolyCollection)]
    assert len(bands) == 1 and "held-out error" in fig._suptitle.get_text()
    low, high = bands[0].get_paths()[0].vertices[:, 1].min(), bands[0].get_paths()[0].vertices[:, 1].max()
    assert low == pytest.approx(1.0 / 1.1) and high == pytest.approx(1.5 / 0.9)
    unknown = _frame(profile="p", gamma=[1, 2, 3], speedup=[1.0, 1.5, 1.2], heldout_error=float("nan"))
    fig = _drawn(Spec(PlotSpec(x="gamma")), unknown, tmp_path, monkeypatch)
    assert "held-out error" not in fig._suptitle.get_text()
    assert not [c for c in fig.axes[0].collections if isinstance(c, PolyCollection)]
