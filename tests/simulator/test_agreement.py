"""The simulator agrees with the closed form, for every registered method, in expectation.

For each method of the registry (`methods.specs()`) and several of its configurations, on a
synthetic Profile holding every drafter kind and acceptance part (tests/simulator_fixtures.py):
the simulated mean tokens per step must match `spec.expected_tokens`, and the simulated mean step
seconds `costmodel.step.step_seconds` on `spec.step_shape`, within 5 standard errors of the
simulated per-step mean (from the simulated per-step spread). Latencies are a fixed time per
forward plus a per-query-token term, different for every model and independent of the context,
so the expectation of a step's seconds is exactly the closed form's price of its expected shape.
Acceptance draws are the independent ones (the closed forms' assumption).
"""
from __future__ import annotations

import numpy as np
import pytest

import methods
from profiles.profile import Profile
from costmodel.step import step_seconds
from simulator.stream import simulate_stream
from tests.simulator.fixtures import LINEAR, profile_dict

N_TOKENS = 30_001        # decode tokens per simulated stream: 30,000
Z = 5.0                  # standard errors allowed
HAND_PICKED = {"glide": ("glide g3", "glide g4 S44222111111"), "mcsd": ("mcsd k4x2x1 norepl",),
               "kangaroo": ("kangaroo L2 g6 eta0.45",)}    # configurations beyond the space's picks


class TokenLinear:
    """base + per_token * query tokens seconds per forward, whatever the context and batch."""

    def __init__(self, base: float, per_token: float):
        self.base, self.per_token = base, per_token

    def predict(self, n_tokens, ctx_len, batch=1):
        n = np.asarray(n_tokens, dtype=float)
        return np.broadcast_to(self.base + self.per_token * n, np.broadcast(n, np.asarray(ctx_len)).shape)


LATENCY = {"T": TokenLinear(0.020, 2e-4), "D": TokenLinear(0.002, 5e-5), "G": TokenLinear(0.003, 4e-5),
           "KA": TokenLinear(0.0005, 1e-5), "CM": TokenLinear(0.0012, 3e-5), "CH": TokenLinear(0.0007, 2e-5)}


def _profile() -> Profile:
    return Profile.from_dict(profile_dict())


def configurations(spec, setup) -> list:
    """The default, the first, middle and last of the method's space, and any hand-picked ones."""
    configs = [spec.config()]
    try:
        space = spec.space(setup)
    except NotImplementedError:
        space = None
    if space is not None and len(space):
        configs += spec.configs_of(space.iloc[sorted({0, len(space) // 2, len(space) - 1})])
    configs += [spec.parse(label) for label in HAND_PICKED.get(spec.name, ())]
    return list(dict.fromkeys(configs))


def closed_form(spec, setup, config, latency=LATENCY) -> tuple[float, float]:
    """(expected tokens per step, expected seconds per step) of one configuration."""
    frame = spec.frame_of([config])
    seconds = step_seconds(lambda m, n, c, b: latency[m].predict(n, c, b), spec.step_shape(setup, frame), 128)
    return float(spec.expected_tokens(setup, frame)[0]), float(np.asarray(seconds).reshape(-1)[0])


def simulated(profile, spec, config, seed: int, latency=LATENCY) -> dict[str, tuple[float, float]]:
    """{quantity: (simulated per-step mean, its standard error)}; the clipped last step left out."""
    steps = simulate_stream(profile, spec.name, config.to_dict(), N_TOKENS, seed, prompt_len=128,
                            latencies=latency, per_step=True).steps.iloc[:-1]
    out = {}
    for name, values in (("tokens", steps["accepted"].to_numpy(float)),
                         ("seconds", steps[["draft_s", "verify_s", "overhead_s"]].sum(axis=1).to_numpy())):
        out[name] = (float(values.mean()), float(values.std(ddof=1) / np.sqrt(values.size)))
    return out


def disagreements(profile, spec, config, seed: int = 0, sim_latency=LATENCY, sim_profile=None) -> list[str]:
    """What differs between the simulator (on `sim_profile`, default `profile`, with `sim_latency`)
    and the closed form on `profile` by more than Z standard errors."""
    setup = profile.setups_for(spec)[0]
    want = dict(zip(("tokens", "seconds"), closed_form(spec, setup, config)))
    out = []
    for name, (mean, se) in simulated(sim_profile or profile, spec, config, seed, sim_latency).items():
        if abs(mean - want[name]) > Z * se + 1e-9 * abs(want[name]):
            out.append(f"{config.label}: simulated {name} per step {mean:.6g} +- {se:.2g}, closed form {want[name]:.6g}")
    return out


CASES = [(spec.name, config) for spec in methods.specs()
         for config in configurations(spec, _profile().setups_for(spec)[0])]


def test_every_method_has_several_configurations():
    per_method = {name: sum(1 for n, _ in CASES if n == name) for name in methods.names()}
    assert all(count >= (1 if name == "ar" else 2) for name, count in per_method.items()), per_method


@pytest.mark.parametrize("name,config", CASES, ids=[c.label for _, c in CASES])
def test_simulator_agrees_with_closed_form(name, config):
    profile = _profile()
    assert disagreements(profile, methods.get(name), config, seed=len(config.label)) == []


def test_the_check_catches_a_few_per_cent():
    """The tolerance is tight enough to see a 3% error: a perturbed simulator fails the check."""
    profile = _profile()
    spec = methods.get("sd")
    config = spec.config()
    slower = dict(LATENCY, T=TokenLinear(0.0206, 2e-4))             # target forwards 3% slower
    assert any("seconds" in d for d in disagreements(profile, spec, config, sim_latency=slower))
    raw = profile_dict()
    raw["acceptance"]["D"]["alpha"] += 0.03                            # acceptance off by 0.03
    assert any("tokens" in d for d in disagreements(profile, spec, config, sim_profile=Profile.from_dict(raw)))


def test_the_simulator_prices_the_context_its_stream_reaches():
    """With a latency that grows with the context, a simulated stream's steps cost what the closed
    form prices at the stream's mean context (prompt + about half the output), not at the prompt:
    why a simulator run that starts at the closed form's context reads a higher speedup when the
    target's forward grows with context faster than the drafter's."""
    profile, spec = _profile(), methods.get("sd")
    config = spec.config()
    setup = profile.setups_for(spec)[0]
    steps = simulate_stream(profile, "sd", config.to_dict(), N_TOKENS, 1, prompt_len=128, latencies=LINEAR,
                            per_step=True).steps
    seconds = steps[["draft_s", "verify_s", "overhead_s"]].sum(axis=1).to_numpy()
    tol = Z * seconds.std(ddof=1) / np.sqrt(seconds.size) + 1e-9

    def priced(ctx):
        return float(step_seconds(lambda m, n, c, b: LINEAR[m].predict(n, c, b),
                                  spec.step_shape(setup, spec.frame_of([config])), ctx)[0])
    assert abs(seconds.mean() - priced(steps["ctx_len"].mean())) < tol
    assert seconds.mean() - priced(128) > 10 * tol
