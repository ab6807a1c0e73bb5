"""The sweep's figures compare something or are not drawn (with a note), always mark the best
configuration, and keep the legend off the data; the report's "Not scored" list is one line per reason."""
import pandas as pd
import pytest

from experiments.sweep import plots
from experiments.sweep.report import not_scored
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


@pytest.mark.parametrize("plot", [PlotSpec(x="gamma"), PlotSpec(x="gamma", hue="k"), PlotSpec(x="gamma", y="k")])
def test_the_best_configuration_is_marked_and_the_legend_sits_outside(plot, tmp_path, monkeypatch):
    frame = _frame(profile=["p"] * 6 + ["q"] * 6, gamma=[1, 2, 3] * 4, k=([1] * 3 + [2] * 3) * 2,
                   speedup=[1.0, 1.5, 1.2, 1.1, 3.3, 1.4, 0.9, 1.0, 1.1, 1.2, 1.3, 1.4])
    drawn = {}
    monkeypatch.setattr(plots, "_save", lambda fig, path: drawn.setdefault("fig", fig) and path)
    assert plots.plot_method(Spec(plot), frame, tmp_path / "toy.png") is not None
    ax = drawn["fig"].axes[0]
    texts = [t.get_text() for t in ax.texts] + [t.get_text() for t in (ax.get_legend().get_texts()
                                                                       if ax.get_legend() else [])]
    assert any(t.startswith("best: toy 4 (3.30x)") for t in texts), texts
    if ax.get_legend() is not None:
        assert ax.get_legend().get_bbox_to_anchor().x0 >= ax.get_window_extent().x1 - 1   # right of the axes


def test_not_scored_is_one_line_per_reason():
    skipped = [f"profile '{p}' has no glide drafter with acceptance model at temperature 0 for method glide"
               for p in ("a", "b", "c")] + ["profile 'a' has no kangaroo drafter for method kangaroo"]
    assert not_scored(skipped) == [
        "has no glide drafter with acceptance model at temperature 0 for method glide: 3 profile(s) (a, b, c)",
        "has no kangaroo drafter for method kangaroo: 1 profile(s) (a)"]
