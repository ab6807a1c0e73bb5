"""One number per configuration at a batch size: the sweep's deployments and capacity planning's
crossover serve a batch under the one load of `simulator.batch_load`, so on the same profile,
configuration, batch and lengths they agree (the target: within 1%; they are the same run)."""
from __future__ import annotations

import pytest

from capacity import plan as capacity
from simulator.batch_load import BatchLoad, serve_at_batch
from sweep import deployments
from sweep.executor import LocalExecutor
from sweep.run import SweepOptions, run_sweep
from common.errors import InputError
from tests.experiments.test_sweep import toy_profile

PROMPT, OUTPUT, BATCHES = 160, 64, (1, 8)


def test_sweep_and_capacity_serve_the_same_deployment_and_load_to_the_same_number():
    profile = toy_profile()
    executor = LocalExecutor(workers=1, progress=False)
    sweep = run_sweep([profile], SweepOptions(methods=["sd"], batch_sizes=list(BATCHES), sim_tokens=OUTPUT,
                                              ctx_len=PROMPT + OUTPUT // 2, rescore=0), executor)
    opts = capacity.CapacityOptions(methods=["sd"], target_rate=2.0, slo=capacity.Slo(tpot_p99=0.2),
                                    load=capacity.LoadSpec(prompt_len=f"fixed:{PROMPT}", output_len=f"fixed:{OUTPUT}",
                                                           duration_s=6.0), batches=BATCHES)
    plan = capacity.plan(profile, opts, executor)
    assert plan["crossover_load"] == BatchLoad(PROMPT, OUTPUT)

    # plain decoding, served by both commands
    plain = sweep.served[sweep.served["method"] == "ar"].set_index("batch")["throughput_tok_s"]
    crossover = plan["crossover"].set_index(["label", "batch"])["throughput_tok_s"]
    for batch in BATCHES:
        assert plain[batch] == pytest.approx(crossover["no speculation", batch], rel=0.01)
    # capacity's speculative choice, served as the sweep serves a deployment's candidates
    chosen = plan["best"].set_index("method").loc["sd"]
    loads = deployments.loads_of([profile], OUTPUT, lambda p: PROMPT + OUTPUT // 2)
    for batch in BATCHES:
        task = deployments.ServeTask(profile, "sd", chosen["config"], batch, loads[profile.name], 0)
        assert deployments.serve_task(task)["throughput_tok_s"] == pytest.approx(crossover[chosen["label"], batch],
                                                                                  rel=0.01)


def test_the_load_is_seeded_by_what_is_served_not_by_who_serves_it():
    profile = toy_profile()
    load = BatchLoad(PROMPT, OUTPUT)
    first, again = (serve_at_batch(profile, "sd", {"gamma": 4, "drafter": "llama-68m"}, 4, load, 0).summary
                    for _ in range(2))
    assert first["throughput_tok_s"] == again["throughput_tok_s"]
    other = serve_at_batch(profile, "sd", {"gamma": 4, "drafter": "llama-68m"}, 4, load, 1).summary
    assert other["throughput_tok_s"] != first["throughput_tok_s"]
    assert "12 requests (prompt 160, output 64 tokens) arrive together at t = 0, batch limit 4" in load.describe(4)


@pytest.mark.parametrize("args,message", [
    ((0, 64), "the batch load's prompt_len must be an integer >= 1, got 0"),
    ((16, 1), "the batch load's output_len must be an integer >= 2, got 1"),
    ((16, 64, 0), "the batch load's waves must be an integer >= 1, got 0"),
])
def test_a_bad_load_is_refused_in_one_line(args, message):
    with pytest.raises(InputError, match=f"^{message}$"):
        BatchLoad(*args)
