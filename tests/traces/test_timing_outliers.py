"""traces.timer's re-timing of points that stand out from their context neighbours."""
from __future__ import annotations

from traces.timer import outliers, retime_outliers


def grid(stalled: dict[tuple[int, int], float]) -> list[dict]:
    """A smooth grid (time grows with tokens and context) with some points stalled."""
    rows = []
    for n in (1, 2, 4):
        for ctx in (0, 256, 1024, 4096):
            seconds = stalled.get((n, ctx), 0.05 + 0.01 * n + 1e-5 * ctx)
            rows.append({"n_tokens": n, "ctx_len": ctx, "batch": 1, "seconds": seconds, "repeats": 5})
    return rows


def smooth(n, ctx, batch):
    return 0.05 + 0.01 * n + 1e-5 * ctx, 5


def test_stalls_are_found_and_retimed():
    rows = grid({(2, 0): 3.2, (4, 4096): 0.9, (1, 256): 0.064})
    found = {(rows[i]["n_tokens"], rows[i]["ctx_len"]) for i in outliers(rows)}
    assert found == {(2, 0), (4, 4096)}            # (1, 256) is within the rules
    assert retime_outliers(rows, smooth) == 2
    assert outliers(rows) == []
    assert {(r["n_tokens"], r["ctx_len"]): r["seconds"] for r in rows}[(2, 0)] == smooth(2, 0, 1)[0]


def test_a_point_slower_again_keeps_its_first_median():
    rows = grid({(2, 0): 3.2})
    calls = []

    def slower(n, ctx, batch):
        calls.append((n, ctx))
        return 5.0, 3

    retime_outliers(rows, slower)
    assert calls == [(2, 0)] * 3                    # three rounds, then it gives up
    assert rows[4]["seconds"] == 3.2


def test_a_smooth_grid_is_left_alone():
    rows = grid({})
    assert outliers(rows) == [] and retime_outliers(rows, smooth) == 0
