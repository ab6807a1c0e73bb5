"""simulator.leaning: each request drafts at its own level, spread as the Profile's prompt spread
says, the mean kept; a batch of requests started together then lasts as long as its slowest."""
import numpy as np
import pandas as pd
import pytest

from methods.draws import ChainSampler, MarkovChainSampler
from simulator import Cluster, Workload, simulate_serving
from simulator.leaning import draw_leaning, leanings
from tests.simulator.fixtures import LINEAR, profile_dict


def test_leaning_spreads_tokens_per_step_as_asked_and_keeps_the_mean():
    sampler, spread, steps = ChainSampler(3, np.full(3, 0.6)), 0.3, 400
    rng = np.random.default_rng(0)
    lean = leanings(sampler, spread, 3000, rng)
    per_request = np.mean([draw_leaning(sampler, rng, lean).accepted for _ in range(steps)], axis=0)
    plain = np.mean([sampler.draw(rng, 3000)[0].accepted for _ in range(steps)], axis=0)
    tokens = 1 + 0.6 + 0.36 + 0.216
    assert per_request.mean() == pytest.approx(tokens, rel=0.01)
    between = np.sqrt(per_request.var() - plain.var())        # the levels' spread, the steps' own noise taken out
    assert between == pytest.approx(spread * (tokens - 1), rel=0.1)


def test_nothing_leans_without_a_spread_or_with_a_sequences_own_state():
    rng = np.random.default_rng(1)
    assert leanings(ChainSampler(2, np.full(2, 0.5)), 0.0, 10, rng) is None
    assert leanings(MarkovChainSampler(2, 0.8, 0.3), 0.5, 10, rng) is None


def _together(spread: float, seed: int):
    trace = pd.DataFrame({"arrival_s": 0.0, "prompt_len": 64, "output_len": [32] * 32})
    return simulate_serving(profile_dict(), "sd", {"gamma": 3}, Workload(arrival="trace", trace=trace, acceptance_spread=spread),
                            Cluster(max_batch=32, kv_tokens=10 ** 6), seed, latencies=LINEAR, per_step=True)


def test_a_batch_started_together_lasts_as_long_as_its_slowest_request():
    alike = [_together(0.0, s) for s in range(6)]
    spread = [_together(0.6, s) for s in range(6)]
    steps = [np.mean([(r.iterations["kind"] == "decode").sum() for r in runs]) for runs in (alike, spread)]
    assert steps[1] > steps[0] + 1
    assert np.mean([r.summary["throughput_tok_s"] for r in spread]) < np.mean([r.summary["throughput_tok_s"] for r in alike])
    unchanged = _together(0.0, 0)
    assert unchanged.summary == alike[0].summary                # no spread: the draws of every other run


def test_the_steps_own_noise_is_taken_out_of_a_measured_spread():
    """A spread measured on prompts of L tokens holds each prompt's step noise, var(a) T / L: only the
    rest leans; a spread the noise alone explains leans nothing."""
    sampler, rng = ChainSampler(3, np.full(3, 0.6)), np.random.default_rng(2)
    accepted, p = np.arange(1, 5), np.array([0.4, 0.6 * 0.4, 0.36 * 0.4, 0.216])
    tokens = float(p @ accepted)
    noise_only = np.sqrt(float(p @ (accepted - tokens) ** 2) * tokens / 32) / (tokens - 1)   # as a spread
    assert leanings(sampler, 0.5 * noise_only, 100, rng, spread_tokens=32) is None
    lean_all = leanings(sampler, 0.4, 20000, np.random.default_rng(3))
    lean_rest = leanings(sampler, 0.4, 20000, np.random.default_rng(3), spread_tokens=32)
    assert 0.3 * lean_all.std() < lean_rest.std() < 0.95 * lean_all.std()
