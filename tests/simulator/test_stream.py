"""Single-stream simulator: closed-form agreement, fast path = simpy path, trace replay, bad input."""
import numpy as np
import pandas as pd
import pytest

from costmodel import cape as cape_cf
from costmodel import leviathan, lookahead, trees
from simulator import FixedLatency, simulate_stream
from simulator.stream import prepare_stream, run_stream
from methods.draws import draw_stream
from methods.sd import SDConfig
from simulator.methods import build_step_model, split_config
from simulator.replay import replay_draws
from tests.simulator.fixtures import CASES, DRAFT_S, FIXED, LINEAR, FREQ, TARGET_S, TOPK, profile_dict
from traces import replay as trace_replay
from common.errors import InputError

N = 40_001  # output tokens per stream: 40,000 decode tokens


def _mc_tolerance(steps: pd.DataFrame, z: float = 4.5) -> float:
    """z standard errors of the mean tokens per step (ratio estimator, from the sample itself)."""
    acc = steps["accepted"].to_numpy(float)
    return z * acc.std(ddof=1) / np.sqrt(acc.size)


def _stream(method, config, seed=3, n=N, **kw):
    return simulate_stream(profile_dict(), method, config, n, seed, latencies=FIXED, per_step=True, **kw)


@pytest.mark.parametrize("alpha,gamma", [(0.6, 3), (0.8, 5), (0.9, 8)])
def test_sd_tokens_per_step_and_speedup_match_leviathan(alpha, gamma):
    prof = profile_dict()
    prof["acceptance"]["D"]["alpha"] = alpha
    res = simulate_stream(prof, "sd", {"gamma": gamma}, N, 11, latencies=FIXED, per_step=True)
    tol = _mc_tolerance(res.steps)
    expected = float(leviathan.expected_tokens(alpha, gamma))
    assert abs(res.summary["tokens_per_step"] - expected) < tol
    # fixed latencies: verify of gamma+1 tokens costs one target forward, as Leviathan assumes
    c = DRAFT_S / TARGET_S
    expected_speedup = float(leviathan.speedup(alpha, gamma, c))
    assert abs(res.summary["speedup"] - expected_speedup) < tol / (gamma * c + 1)


def test_mcsd_matches_tree_closed_form():
    res = _stream("mcsd", {"k": "4x2x1"})
    expected = float(trees.expected_tokens_tree("4x2x1", {1: 0.7, 2: 0.8, 4: 0.88, 8: 0.92}))
    assert abs(res.summary["tokens_per_step"] - expected) < _mc_tolerance(res.steps)


def test_lookahead_matches_eq5_eq7():
    res = _stream("lookahead", {"W": 5, "N": 4, "G": 5})
    expected = float(lookahead.compression_ratio(0.5, 2.0, 4, 5, 5))
    assert abs(res.summary["tokens_per_step"] - expected) < _mc_tolerance(res.steps)


def test_cape_matches_closed_form():
    bins = [4, 4, 4, 2, 2, 2, 1, 1, 1, 1, 1]
    res = _stream("cape", {"gamma": 5, "bins": bins, "drafter": "D"})
    topk = {int(k): v for k, v in TOPK.items()}
    expected = float(cape_cf.cape_expected_tokens(bins, FREQ, topk, 5))
    assert abs(res.summary["tokens_per_step"] - expected) < _mc_tolerance(res.steps)
    verify = float(cape_cf.cape_verify_tokens(bins, FREQ, 5))
    assert abs(res.steps["verify_tokens"].mean() - 1 - verify) < 0.05 * verify


def test_markov_stream_agrees_with_stepwise_draws_and_stationary_alpha():
    gamma = 3
    res = _stream("sd", {"gamma": gamma, "acceptance_model": "markov"})
    acc = res.steps["accepted"].to_numpy()
    evaluated = (acc - 1) + (acc <= gamma)          # positions checked: accepts, plus the reject
    stationary = 0.4 / (1 - 0.85 + 0.4)
    rate = (acc - 1).sum() / evaluated.sum()
    assert abs(rate - stationary) < 4.5 * np.sqrt(stationary * (1 - stationary) / evaluated.sum()) * 3
    # the vectorised run-length stream and the per-step stateful draw are the same process
    step = build_step_model(profile_dict(), "sd", {"gamma": gamma, "acceptance_model": "markov"})
    rng, state, stepwise = np.random.default_rng(2), None, []
    for _ in range(8_000):
        draws, state = step.sampler.draw(rng, 1, state)
        stepwise.append(int(draws.accepted[0]))
    stepwise = np.asarray(stepwise)
    se = np.hypot(acc.std() / np.sqrt(acc.size), stepwise.std() / np.sqrt(stepwise.size))
    assert abs(acc.mean() - stepwise.mean()) < 4.5 * se


@pytest.mark.parametrize("method,config", CASES)
def test_fast_path_equals_simpy_path(method, config):
    prof = profile_dict()
    fast = simulate_stream(prof, method, config, 3001, 5, latencies=LINEAR, per_step=True)
    ref = simulate_stream(prof, method, config, 3001, 5, latencies=LINEAR, per_step=True, engine="simpy")
    assert fast.summary["steps"] == ref.summary["steps"]
    np.testing.assert_array_equal(fast.steps["accepted"], ref.steps["accepted"])
    for col in ("draft_s", "verify_s", "overhead_s"):
        np.testing.assert_allclose(fast.steps[col], ref.steps[col], rtol=1e-9, atol=1e-12)
    assert fast.summary["e2e_s"] == pytest.approx(ref.summary["e2e_s"], rel=1e-9)


@pytest.mark.parametrize("method,config", CASES)
def test_a_prepared_stream_run_with_several_seeds_is_each_seed_simulated_afresh(method, config):
    """The sweep prepares a stream once and runs it per seed: nothing a run draws may leak into the next."""
    prof = profile_dict()
    stream = prepare_stream(prof, method, config, 801, prompt_len=64, latencies=LINEAR)
    runs = [run_stream(stream, seed).summary for seed in (7, 8, 7)]
    for seed, summary in zip((7, 8, 7), runs):
        assert summary == simulate_stream(prof, method, config, 801, seed, prompt_len=64, latencies=LINEAR).summary


def test_every_method_runs_with_roofline_latency():
    from tests.simulator.fixtures import roofline_profile

    res = simulate_stream(roofline_profile(), "sd", {"gamma": 4}, 512, 0)
    assert res.summary["speedup"] > 1.0 and res.summary["ttft_s"] > 0


def _token_frame(n_prompts=3, length=300, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for p in range(n_prompts):
        rank = np.where(rng.random(length) < 0.7, 0, rng.integers(1, 6, length))
        conf = np.clip(rng.beta(4, 2, length), 0, 1)
        for i in range(length):
            rows.append(dict(run_id="r", prompt_id=f"p{p}", pos=i, token=int(rng.integers(0, 100)),
                             draft_rank=int(rank[i]), draft_conf=float(conf[i]), draft_q_token=0.5, alpha=0.7,
                             target_entropy=1.0))
    return pd.DataFrame(rows)


@pytest.mark.parametrize("method,config", [
    ("sd", {"gamma": 4}), ("mcsd", {"k": "4x2x1"}),
    ("cape", {"gamma": 5, "bins": [4, 4, 4, 2, 2, 2, 1, 1, 1, 1, 1]}), ("kangaroo", {"gamma": 6, "eta": 0.6}),
])
def test_token_trace_replay_reproduces_traces_replay_exactly(method, config):
    frame = _token_frame()
    drafter = {"sd": "D", "mcsd": "D", "cape": "D", "kangaroo": "K"}[method]
    config = dict(config, drafter=drafter)
    table = trace_replay.TokenTable.from_frame(frame)
    expected = trace_replay.replay_steps(table, method, {k: v for k, v in config.items() if k != "drafter"})
    for prompt_id in ("p0", "p2"):
        draws = replay_draws(frame, profile_dict(), method, config, prompt_id)
        res = simulate_stream(profile_dict(), method, config, int(draws.accepted.sum()) + 1, 0,
                              latencies=FIXED, draws=draws, per_step=True)
        want = expected.loc[expected["prompt_id"] == prompt_id, "accepted"].to_numpy()
        np.testing.assert_array_equal(res.steps["accepted"].to_numpy(), want)


def test_replay_rejects_trace_with_missing_columns():
    frame = _token_frame(1, 20).drop(columns=["draft_conf"])
    with pytest.raises(InputError, match="draft_conf"):
        replay_draws(frame, profile_dict(), "sd", {"gamma": 4}, "p0")


def test_draw_stream_commits_exactly_n_tokens():
    step = build_step_model(profile_dict(), "sd", {"gamma": 4})
    draws = draw_stream(step.sampler, np.random.default_rng(0), 1234)
    assert draws.accepted.sum() == 1234 and draws.accepted.min() >= 1


@pytest.mark.parametrize("method,config,match", [
    ("nope", {}, "unknown method"),
    ("sd", {"gamma": 0}, "gamma"),
    ("mcsd", {"k": "2x2", "drafter": "G"}, "method mcsd runs on draft_model drafters"),
    ("cape", {"gamma": 4, "drafter": "G"}, "method cape runs on draft_model drafters; 'G' is a glide drafter"),
    ("coral", {"groups": 16, "top_n": 3}, "router_recall"),
    ("kangaroo", {"exit_layer": 40}, "exit_layer"),
])
def test_bad_method_configs_raise_one_line(method, config, match):
    with pytest.raises(InputError, match=match) as info:
        build_step_model(profile_dict(), method, config)
    assert "\n" not in str(info.value)


def test_config_splits_into_method_keys_and_setup_options():
    config, options = split_config("sd", '{"gamma": 3, "drafter": "D", "acceptance_model": "markov"}')
    assert config == SDConfig(gamma=3) and options == {"drafter": "D", "acceptance_model": "markov"}
    assert split_config("sd", "sd g5") == (SDConfig(gamma=5), {})
    assert split_config("sd", SDConfig(gamma=2)) == (SDConfig(gamma=2), {})
    step = build_step_model(profile_dict(), "sd", {"gamma": 3}, overhead_s=0.001)
    assert step.config.label == "sd g3" and step.overhead_s == 0.001 and step.shape.size == 1
    assert step.models == ["D", "T"] and step.drafter == "D" and step.setup.acceptance_key == "D"


@pytest.mark.parametrize("config,match", [
    ({"gama": 8}, "unknown config key 'gama'"),
    ({"gamma": 4, "acceptance_model": "bursty"}, "acceptance_model"),
    ({"gamma": 4, "overhead_s": -1}, "overhead_s"),
    ({"gamma": 4, "drafter": "nope"}, "no drafter 'nope'"),
])
def test_bad_setup_options_raise_one_line(config, match):
    with pytest.raises(InputError, match=match) as info:
        build_step_model(profile_dict(), "sd", config)
    assert "\n" not in str(info.value)


def test_profile_without_needed_latency_model_is_rejected():
    prof = profile_dict()
    del prof["latency"]["D"]
    with pytest.raises(InputError, match="latency model for 'D'"):
        simulate_stream(prof, "sd", {"gamma": 4}, 100, 0)


def test_fixed_latency_rejects_nonpositive():
    with pytest.raises(InputError):
        FixedLatency(0.0)
