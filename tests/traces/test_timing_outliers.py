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


def shaped_grid(stalled: dict[tuple[int, int, int], float]) -> list[dict]:
    """A grid over tokens, context and batch where 7 tokens cost 1.4x 8 at every context (a CPU
    kernel's choice for that shape), with some points stalled."""
    rows = []
    for b in (1, 2, 4):
        for n in (4, 7, 8):
            for ctx in (128, 256, 384, 512):
                cost = 0.02 * b * (n + (4 if n == 7 else 0)) + 1e-5 * ctx
                rows.append({"n_tokens": n, "ctx_len": ctx, "batch": b, "seconds": stalled.get((n, ctx, b), cost),
                             "repeats": 5})
    return rows


def test_a_point_slower_than_more_work_is_a_stall_unless_its_shape_is_so_at_every_context():
    clean = shaped_grid({})
    assert outliers(clean) == []                  # 7 tokens slower than 8 everywhere: the kernel, not a stall
    rows = shaped_grid({(4, 384, 2): 0.4, (4, 512, 2): 0.4})      # 2.4x and 2.4x their own shape's 0.16 s
    found = {(rows[i]["n_tokens"], rows[i]["ctx_len"], rows[i]["batch"]) for i in outliers(rows)}
    assert found == {(4, 384, 2), (4, 512, 2)}    # two contexts of one shape, slower than 7 and 8 tokens there
