"""Ragged-batch pricing: a forward over rows of their own query tokens and contexts (costmodel.latency.RowSums),
the per-row engine terms and ragged steps (costmodel.step.ragged_step_cost)."""
import numpy as np
import pytest

from costmodel.latency import ForwardShape, RowSums, roofline_seconds, rows_roofline_seconds, rows_work
from costmodel.params import drafter_arch, get_arch
from costmodel.step import DraftPart, RaggedSteps, StepCalibration, StepShape, ragged_step_cost, step_cost

SHAPE = ForwardShape.of("llama-3-8b", "bf16")


@pytest.mark.parametrize("attention_apart, corner", [(False, 0.0), (True, 0.0), (True, 1.7)])
def test_a_uniform_batch_as_rows_prices_to_the_last_bit(attention_apart, corner):
    n, ctx, batch = 4, 1000, 8
    rows = RowSums.of(np.full(batch, n), np.full(batch, ctx))
    args = ("H100", "bf16")
    terms = dict(bw_eff=0.9, flops_eff=0.7, overhead_s=1e-4, launch_s=2e-3, attention_apart=attention_apart, corner=corner)
    assert rows_roofline_seconds(SHAPE, *args, rows, **terms) == roofline_seconds(SHAPE, *args, n, ctx, batch, **terms)


def test_ragged_rows_move_and_compute_their_own_work():
    rows = RowSums.of([1, 4], [100, 1000])
    work = rows_work(SHAPE, rows)
    assert work.kv_bytes == (101 + 1004) * SHAPE.kv_bytes_per_token
    assert work.matmul_flops == 2 * 5 * SHAPE.matmul_params
    assert work.attention_flops == (1 * 101 + 4 * 1004) * SHAPE.attn_flops_per_pair


def test_a_prefill_chunk_multiplies_the_lm_head_at_its_sampled_position_only():
    chunk = RowSums.of([512], [0], logits=[1])
    expected = 2 * 512 * (SHAPE.matmul_params - SHAPE.head_params) + 2 * SHAPE.head_params
    assert rows_work(SHAPE, chunk).matmul_flops == pytest.approx(expected)


def test_rows_of_forwards_sum_by_their_index_and_absent_rows_add_nothing():
    by_forward = RowSums.of([1, 2, 0, 3], [10, 20, 99, 30], forward=[0, 0, 1, 2], forwards=3)
    assert list(by_forward.tokens) == [3, 0, 3]
    assert list(by_forward.ctx_tokens) == [30, 0, 30]          # the absent row's context is not read


def test_the_corner_adds_or_maxes_memory_and_compute():
    one = RowSums.of([256], [0])
    sharp = rows_roofline_seconds(SHAPE, "H100", "bf16", one, 1.0, 1.0)
    added = rows_roofline_seconds(SHAPE, "H100", "bf16", one, 1.0, 1.0, corner=1.0)
    work = rows_work(SHAPE, one)
    memory, compute = (work.moved) / 3.35e12, work.flops / 989.4e12
    assert sharp == pytest.approx(max(memory, compute)) and added == pytest.approx(memory + compute)


def test_a_negative_row_is_refused():
    with pytest.raises(ValueError, match="must be >= 0"):
        RowSums.of([1, -1], [0, 0])


def test_per_row_terms_are_written_only_when_set_and_read_back():
    assert "overhead_per_row_s" not in StepCalibration().to_dict()
    fitted = StepCalibration(overhead_s=2e-3, overhead_per_row_s=1e-5, overhead_per_ctx_token_s=1.5e-9)
    assert StepCalibration.from_dict(fitted.to_dict()) == fitted


def test_a_uniform_step_pays_its_rows_host_work():
    shape = StepCalibration(overhead_s=1e-3, overhead_per_row_s=1e-5, overhead_per_ctx_token_s=1e-9).apply(
        StepShape("t", np.array([1.0])))
    fixed = lambda model, n, c, b=1: np.zeros(np.broadcast(np.asarray(n), np.asarray(c)).shape) + 0.005
    cost = step_cost(fixed, shape, 500.0, batch=8)
    assert float(cost.overhead_s[0]) == pytest.approx(1e-3 + 8 * 1e-5 + 8 * 500 * 1e-9)


def test_ragged_steps_price_each_draft_forward_where_it_has_rows():
    parts = (DraftPart("d"),)
    shape = StepCalibration(overhead_s=1e-3, speculation_s=5e-4, overhead_per_row_s=1e-5).apply(
        StepShape("t", np.array([3.0]), parts, np.array([[1, 1]])))
    seconds = {"t": 0.01, "d": 0.001}
    latency = lambda model, sums: seconds[model] + 0.0 * np.asarray(sums.tokens, float)
    steps = RaggedSteps(RowSums.of([[3, 1], [3, 3]], [[10, 20], [10, 30]]), np.array([2.0, 2.0]), np.array([20.0, 50.0]),
                        (RowSums.of([[2, 1], [1, 1]], [[10, 20], [10, 30]]), RowSums.of([[1, 0], [1, 0]], [[0, 0], [0, 0]])))
    cost = ragged_step_cost(latency, shape, steps)
    assert list(cost.draft_s) == [0.002, 0.001]                    # the second step's second forward has no rows
    assert cost.verify_s == pytest.approx([0.01, 0.01])
    assert cost.overhead_s == pytest.approx([1.5e-3 + 2e-5] * 2)


def test_eagle3_drafts_from_three_layers_over_its_own_vocabulary():
    target = get_arch("llama-3-8b")
    eagle = drafter_arch("coral", target, eagle3=True, draft_vocab=32000)
    eagle1 = drafter_arch("coral", target)
    assert eagle["vocab"] == 32000 and eagle1["vocab"] == target.vocab
    assert eagle["extra_params"] - eagle1["extra_params"] == target.hidden * target.hidden + target.hidden * (
        target.n_heads + 2 * target.n_kv_heads) * target.dim_head
    with pytest.raises(ValueError, match="draft vocabulary"):
        drafter_arch("coral", target, eagle3=True, draft_vocab=10 ** 6)
