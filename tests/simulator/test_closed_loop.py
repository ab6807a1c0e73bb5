"""A replayed request stream (traces.stream_steps) served in a closed loop (simulator.closed_loop), on small
hand-made streams whose every step can be counted by hand."""
import numpy as np
import pytest

from common.errors import InputError
from simulator.closed_loop import EngineLimits, padded, price, schedule
from costmodel.latency import RowSums
from traces.span_replay import ReplayRequest
from traces.stream_steps import oracle_sizes, stream_steps


def request(rid, prompt, eagle, ngram) -> ReplayRequest:
    return ReplayRequest("toy", rid, prompt, len(ngram), {"eagle": np.array(eagle, np.int16), "ngram": np.array(ngram, np.int16)})


STREAM = [request("a", 10, [1, 3, 1, 2, 1], [1, 1, 1, 1, 1, 1]),
          request("b", 20, [1, 1, 1], [1, 4, 3, 2, 1]),
          request("c", 5, [1, 2, 1, 1], [1, 1])]
PROPOSED = [np.array([0, 0, 3, 0, 1, 0]), np.array([0, 5, 4, 3, 2]), np.array([0, 0])]


def test_each_proposer_replays_its_own_steps():
    eagle = stream_steps(STREAM, "eagle", 2)
    assert list(eagle.size) == [1, 3, 1, 1, 1, 1, 1, 2, 1]          # a's span of 3 taken whole at k = 2
    assert list(eagle.output) == [5, 3, 4] and list(eagle.steps_of) == [3, 3, 3]
    assert list(eagle.drafted[eagle.offsets[:-1]]) == [0, 0, 0] and set(eagle.drafted) == {0, 2}
    ngram = stream_steps(STREAM, "ngram", 2, proposed=PROPOSED)
    # request b: steps of 1, then 3 (its span 4 cut at k + 1), then 1 left at the end: proposed min(5, 2), then its share
    b = slice(ngram.offsets[1], ngram.offsets[2])
    assert list(ngram.size[b]) == [1, 3, 1] and list(ngram.drafted[b]) == [0, 2, 2]
    # request a at k=2: the proposer found 3 at position 2 where nothing was accepted: it still verified 2
    a = slice(ngram.offsets[0], ngram.offsets[1])
    assert list(ngram.drafted[a]) == [0, 0, 2, 0, 1, 0]
    plain = stream_steps(STREAM, "plain")
    assert list(plain.output) == [6, 5, 2] and plain.drafted.sum() == 0
    assert list(oracle_sizes(8, 2)) == [1, 3, 3, 1] and list(oracle_sizes(7, 2)) == [1, 3, 3]


def test_a_stream_without_what_it_needs_is_refused_in_one_line():
    with pytest.raises(InputError, match="proposals"):
        stream_steps(STREAM, "ngram", 2)
    with pytest.raises(InputError, match="k must be >= 1"):
        stream_steps(STREAM, "eagle", 0)
    with pytest.raises(InputError, match="unknown proposer"):
        stream_steps(STREAM, "medusa", 2)


def test_two_places_serve_three_requests_in_order():
    steps = stream_steps(STREAM, "plain")                # 6, 5 and 2 tokens: 5, 4 and 1 decode steps
    plan = schedule(steps, EngineLimits(max_num_seqs=2))
    # step 0 prefills a and b; b finishes its 4 decode steps at step 4, a its 5 at step 5; c is admitted at
    # step 5 (prefill, its first token) and decodes its last token at step 6
    assert list(plan.first_step) == [0, 0, 5] and list(plan.last_step) == [5, 4, 6]
    assert plan.steps == 7 and plan.full_until == 6
    rows = plan.row_arrays()
    assert np.bincount(rows["step"]).tolist() == [2, 2, 2, 2, 2, 2, 1]
    assert plan.produced().sum() == steps.output.sum()


def test_a_small_budget_chunks_the_prompts():
    steps = stream_steps(STREAM, "plain")
    plan = schedule(steps, EngineLimits(max_num_seqs=3, max_batched_tokens=12))
    rows = plan.row_arrays()
    first = rows["step"] == 0
    assert list(rows["width"][first]) == [10, 2]                 # a's prompt whole, b's first 2 tokens
    assert plan.first_step[1] > 0 and plan.first_step[0] == 0


def test_a_drafter_runs_its_forwards_over_what_each_row_accepted():
    steps = stream_steps(STREAM, "eagle", 2)
    ragged = schedule(steps, EngineLimits(max_num_seqs=3), draft_forwards=2).ragged()
    assert len(ragged.drafts) == 2
    assert ragged.drafts[0].tokens[0] == 10 + 20 + 5             # the prompts in the prefill step
    assert ragged.verify.tokens[1] == 3 * 3                      # every row verifies 1 + 2 drafts
    assert ragged.drafts[0].tokens[1] == 3 + 1 + 2               # the tokens each row accepted in step 1


def test_a_cache_too_small_preempts_and_every_request_still_finishes():
    # a (15 prompt tokens) and b (30) fill 48 slots of blocks of 16; a's 17th token needs a block more: b goes
    tight = [request("a", 15, [1] * 6, [1] * 6), request("b", 30, [1] * 5, [1] * 5)]
    steps = stream_steps(tight, "plain")
    plan = schedule(steps, EngineLimits(max_num_seqs=2, kv_capacity_tokens=48, block_tokens=16))
    assert plan.preemptions > 0 and (plan.last_step >= 0).all()
    assert plan.produced().sum() == steps.output.sum()


def test_a_priced_loop_measures_its_loaded_phase():
    steps = stream_steps(STREAM, "plain")
    plan = schedule(steps, EngineLimits(max_num_seqs=2))
    result = price(plan, steps, lambda ragged: np.ones(ragged.rows.size))       # one second a step
    assert result.makespan_s == 7.0 and result.loaded_s == 6.0
    assert result.throughput_tok_s == pytest.approx(plan.produced()[:6].sum() / 6.0)
    assert result.run_throughput_tok_s == pytest.approx(13 / 7.0)
    assert list(result.loaded()) == [True, True, False]


def test_padding_rounds_a_step_up_to_the_next_graph():
    sums = RowSums.of([[3], [2]], [[0], [0]])
    assert padded(sums, (1, 2, 4, 8)).tokens[0] == 8
    assert padded(RowSums.of([[9]], [[0]]), (1, 2, 4, 8)).tokens[0] == 9     # past the largest: no graph


@pytest.mark.parametrize("limits, message", [(dict(max_num_seqs=0), "max_num_seqs must be a whole number >= 1"),
                                             (dict(max_num_seqs=2, kv_capacity_tokens=4), "not one block")])
def test_bad_limits_are_refused_in_one_line(limits, message):
    with pytest.raises(InputError, match=message):
        EngineLimits(**limits)
