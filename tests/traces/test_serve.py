"""traces.serve: the serving loop admits first come first served within the max batch and the KV budget,
preempts the newest by recompute when a step's reserved slots do not fit, and every request still gets
its own greedy output; bad loads are refused in one line."""
import itertools

import pytest

from common.errors import InputError
from runtime.engine import make_decoder
from runtime.engine.batch import BatchEngine
from runtime.models import tiny_model, truncated
from traces.serve import Arrival, Limits, serve

PROMPTS = [[3, 7, 1, 9, 12, 5, 3, 7], [5, 2], [1, 2, 3, 4, 5, 6], [9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 11], [4, 4, 4]]
NEW = [12, 6, 9, 14, 7]


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def models():
    target = tiny_model(0, num_layers=2)
    return target, truncated(target, 1)


def ticking(step: float = 0.01):
    """A clock that moves `step` seconds each time it is read, and a sleep that moves it on."""
    now = itertools.count()
    state = {"t": 0.0}

    def clock():
        state["t"] += step
        next(now)
        return state["t"]

    def sleep(seconds):
        state["t"] += seconds
    return clock, sleep


def arrivals(gap: float = 0.05) -> list[Arrival]:
    return [Arrival(f"r{i}", i * gap, tuple(p), n) for i, (p, n) in enumerate(zip(PROMPTS, NEW))]


@pytest.mark.parametrize("method,config,kv_tokens", [("ar", {}, 10_000), ("sd", {"gamma": 3}, 10_000),
                                                     ("sd", {"gamma": 3}, 40)])
def test_every_request_gets_its_own_output_within_the_batch_and_the_budget(models, method, config, kv_tokens):
    target, shallow = models
    drafter = shallow if method == "sd" else None
    alone = [make_decoder(method, target, drafter, **config).generate(p, n).tokens for p, n in zip(PROMPTS, NEW)]
    engine = BatchEngine(method, target, drafter, batch=2, context=64, **config)
    clock, sleep = ticking()
    served = serve(engine, arrivals(), Limits(kv_tokens, 4), clock=clock, sleep=sleep)
    assert [served.outputs[f"r{i}"] for i in range(len(PROMPTS))] == alone
    r = served.requests
    assert (r["status"] == "done").all() and list(r["generated"]) == NEW
    assert (r["admitted_s"] >= r["arrival_s"]).all() and (r["first_token_s"] > r["admitted_s"]).all()
    assert (r["finish_s"] >= r["first_token_s"]).all()
    assert r["tpot_s"].tolist() == pytest.approx(((r["finish_s"] - r["first_token_s"]) / (r["generated"] - 1)).tolist())
    assert (served.steps["rows"] <= 2).all() and (served.steps["held_tokens"] <= kv_tokens).all()
    first = r.sort_values("admitted_s")["request_id"].tolist()
    if kv_tokens == 10_000:
        assert first == [f"r{i}" for i in range(len(PROMPTS))] and r["preemptions"].sum() == 0     # FCFS
    else:
        assert r["preemptions"].sum() > 0             # the budget bit: the newest went back to the queue


def test_a_request_that_cannot_fit_alone_fails_and_the_others_are_served(models):
    target, _ = models
    engine = BatchEngine("ar", target, batch=2, context=64)
    clock, sleep = ticking()
    served = serve(engine, arrivals(), Limits(10, 1), clock=clock, sleep=sleep)
    status = dict(zip(served.requests["request_id"], served.requests["status"]))
    assert status["r3"] == "oom" and status["r1"] == "done" and status["r4"] == "done"


def test_bad_loads_are_refused_in_one_line(models):
    target, _ = models
    engine = BatchEngine("ar", target, batch=2, context=16)
    backwards = [Arrival("a", 1.0, (1, 2), 2), Arrival("b", 0.5, (1, 2), 2)]
    for load, message in ((backwards, "arrival times go backwards at request 'b' (0.5 s after 1 s)"),
                          ([Arrival("a", 0.0, tuple(range(15)), 4)],
                           "request 'a': a prompt of 15 tokens and 4 new tokens exceed the context of 16 tokens"),
                          ([Arrival("a", -1.0, (1,), 2)], "arrival times must be finite numbers >= 0"),
                          ([], "no request to serve")):
        with pytest.raises(InputError) as refused:
            serve(engine, load, Limits(100, 1))
        assert str(refused.value) == message
    with pytest.raises(InputError, match="kv_tokens must be an integer >= 1, got 0"):
        Limits(0, 1)
