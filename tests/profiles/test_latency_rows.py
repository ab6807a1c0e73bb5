"""Latency models over ragged rows: a roofline's and a linear fit's `predict_rows`, a table refusing them,
the roofline's new terms read back and checked."""
import numpy as np
import pytest

from common.errors import InputError
from costmodel.latency import RowSums
from profiles.latency import LinearLatency, RooflineLatency, TableLatency, latency_model


def roofline(**terms) -> RooflineLatency:
    return RooflineLatency(arch="llama-3-8b", hardware="H100", dtype="bf16", bw_eff=0.9, flops_eff=0.7, **terms)


def test_a_roofline_prices_rows_as_it_prices_a_uniform_batch():
    model = roofline(attention_apart=True, corner=1.1)
    rows = RowSums.of(np.full(16, 4), np.full(16, 700))
    assert model.predict_rows(rows) == model.predict(4, 700, 16)


def test_a_roofline_with_its_new_terms_reads_back():
    model = roofline(attention_apart=True, corner=1.1, launch_s=1e-3)
    again = latency_model(model.to_dict(), "m")
    assert again.to_dict() == model.to_dict() and again.to_dict()["params"]["corner"] == 1.1
    assert "corner" not in roofline().to_dict()["params"]        # written only where set


def test_a_bad_corner_is_refused_in_one_line():
    with pytest.raises(InputError, match="corner must be a number >= 0"):
        roofline(corner=-1.0)


def test_a_linear_fit_adds_its_terms_over_the_batch():
    model = LinearLatency(5e-3, 2e-5, 4e-8)
    rows = RowSums.of([1, 4], [100, 1000])
    assert model.predict_rows(rows) == pytest.approx(5e-3 + 2e-5 * 5 + 4e-8 * 1100)
    assert model.predict(4, 1000, 2) == pytest.approx(5e-3 + 2e-5 * 8 + 4e-8 * 2000)
    assert latency_model(model.to_dict(), "linear").to_dict() == model.to_dict()


def test_a_table_refuses_ragged_rows_and_a_linear_fit_refuses_to_move():
    table = TableLatency((1.0, 2.0), (0.0,), (1.0,), np.array([[[0.01]], [[0.011]]]))
    with pytest.raises(InputError, match="cannot price a forward over ragged rows"):
        table.predict_rows(RowSums.of([1], [0]))
    with pytest.raises(InputError, match="only a roofline model can be moved"):
        LinearLatency(5e-3, 2e-5, 4e-8).moved_to("A100")
    with pytest.raises(InputError, match="per_token_s must be a number of seconds >= 0"):
        LinearLatency(5e-3, -2e-5, 4e-8)
