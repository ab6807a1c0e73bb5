"""Prompt-lookup decoding (methods/prompt_lookup.py, runtime/engine/prompt_lookup.py): the proposer
matches as vLLM's ngram does, the engine is the target's greedy and sampled law, the acceptance
model is recovered from steps drawn from it, the closed form is the mean of its process, and each
engine gets its own options."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import methods
from common.errors import InputError
from costmodel.leviathan import generation_tokens
from methods.match_chain import MatchAcceptance, MatchSampler, chain_at, generation_counts
from methods.prompt_lookup import PromptLookupConfig
from methods.spec import Setup
from runtime.engine import Sampling, make_decoder
from runtime.engine.prompt_lookup import match_continuation
from runtime.models import tiny_model

TRUE = MatchAcceptance(hit=0.6, decay=0.3, alpha=0.15, alpha_next=0.4, rho=0.9, sigma=0.08, catch=0.7)
SPEC = methods.get("prompt_lookup")


@pytest.mark.parametrize("tokens,n_min,n_max,gamma,expected", [
    ([1, 2, 3, 4, 2, 3], 2, 3, 4, [4, 2, 3]),           # vLLM's own example: [4, 2, 3] cannot match, [2, 3] can
    ([5, 1, 2, 9, 1, 2, 7, 1, 2], 1, 3, 2, [9, 1]),     # the earliest of equal matches
    ([1, 2, 8, 3, 1, 2, 3, 4, 2, 3], 1, 3, 3, [4, 2, 3]),   # the longest match wins over an earlier shorter one
    ([1, 2, 3], 1, 3, 4, []),                           # nothing repeats
    ([7, 7], 2, 3, 4, []),                              # shorter than n_min before the suffix
    ([3, 7, 3], 1, 1, 5, [7, 3]),                       # the continuation runs up to the context's end
])
def test_the_proposer_matches_like_vllm(tokens, n_min, n_max, gamma, expected):
    assert match_continuation(tokens, n_min, n_max, gamma) == expected


def test_greedy_steps_are_the_targets_tokens_and_propose_where_the_context_repeats():
    target = tiny_model(0, num_layers=2)
    prompt = [3, 17, 5, 9, 22, 3, 17, 5, 9, 22, 3, 17]
    reference = make_decoder("ar", target).generate(prompt, 24).tokens
    out = make_decoder("prompt_lookup", target, gamma=3, n_min=1, n_max=3).generate(prompt, 24)
    assert out.tokens == reference
    assert any(s.verify_tokens == 4 for s in out.steps) and all(1 <= s.verify_tokens <= 4 for s in out.steps)
    assert all(s.draft_forwards == 0 for s in out.steps)


@pytest.mark.slow
def test_the_sampled_law_of_two_tokens_is_the_targets():
    from tests.runtime.test_engine import VOCAB, _two_token_law
    from verification.statistical import statistical_check

    target = tiny_model(2, vocab_size=VOCAB, num_layers=1, std=0.8)
    prompt = [1, 2, 3, 1, 2]
    sampling = Sampling(temperature=1.0, top_p=0.95)
    law = _two_token_law(target, prompt, sampling)
    decoder = make_decoder("prompt_lookup", target, sampling=sampling, gamma=2, n_min=1, n_max=2)

    def sampler(case, rng):
        decoder.seed = int(rng.uniform() * 2**31)
        out = decoder.generate(prompt, 2).tokens
        return out[0] * VOCAB + out[1]

    result = statistical_check(sampler, None, target=law, n=700, alpha=1e-4, seed=5)
    assert result.passed, result.reason


def _steps(part: MatchAcceptance, labels: list[str], n: int, seed: int, length: int = 50) -> pd.DataFrame:
    """StepTrace rows drawn from `part`: n / length generations of `length` steps per configuration."""
    rng = np.random.default_rng(seed)
    frames = []
    for label in labels:
        config = SPEC.parse(label)
        for g in range(n // length):
            draws, _ = MatchSampler(config, part).stream(rng, length, 0)
            frames.append(pd.DataFrame({"method": SPEC.name, "config": label, "run_id": f"{label}#{g}", "prompt_id": "p",
                                        "step": np.arange(length), "verify_tokens": draws.verify_tokens,
                                        "accepted": draws.accepted}))
    return pd.concat(frames, ignore_index=True)


def test_the_fit_recovers_the_model_its_steps_were_drawn_from():
    steps = _steps(TRUE, list(SPEC.calibration), 3000, seed=0)
    entry = SPEC.fit_steps(steps, dataset="d", temperature=0.0, source="synthetic")
    fitted = SPEC.acceptance_part(entry[SPEC.name], "fit")
    for config in SPEC.calibration_configs():
        want = 1 + TRUE.reach(config.n_min, config.n_max, config.gamma).sum()
        got = 1 + fitted.reach(config.n_min, config.n_max, config.gamma).sum()
        assert got == pytest.approx(want, rel=0.02), config.label
    assert entry["fit"]["heldout_error_max"] < 0.1 and entry["fit"]["at_bound"] == []
    assert fitted.rho == pytest.approx(TRUE.rho, abs=0.03) and fitted.hit == pytest.approx(TRUE.hit, abs=0.05)
    assert fitted.catch == pytest.approx(TRUE.catch, abs=0.1)


def test_a_chain_fitted_at_one_match_length_prices_that_length_alone():
    """hit * decay^(n - 1) and sigma * catch^(n - 1) are seen only at the n_min fitted: vLLM's window 3-7
    fitted at n_min 3 once priced n_min 1 at 3.4 tokens per step on chat. The fit records its n_min
    values; the sweep's space keeps n_min where the fit saw two or more, else the one it saw."""
    one = SPEC.fit_steps(_steps(TRUE, ["prompt_lookup g1 nmin3 nmax7", "prompt_lookup g5 nmin3 nmax7"], 1000, 0),
                         dataset="d", temperature=0.0, source="synthetic")
    assert one[SPEC.name]["n_min_fitted"] == [3]
    part = SPEC.acceptance_part(one[SPEC.name], "entry")
    assert part.n_min_fitted == (3,) and list(part.prices([1, 2, 3, 4])) == [False, False, True, False]
    grid = SPEC.fit_steps(_steps(TRUE, list(SPEC.calibration), 700, 0), dataset="d", temperature=0.0, source="s")
    assert grid[SPEC.name]["n_min_fitted"] == [1, 2, 3, 4]
    assert SPEC.acceptance_part(grid[SPEC.name], "entry").prices([1, 6]).all()
    assert SPEC.acceptance_part(TRUE.to_dict(), "entry").prices([1, 6]).all()      # an entry that predates it
    with pytest.raises(InputError, match="n_min_fitted must be a list of match lengths >= 1"):
        SPEC.acceptance_part({**TRUE.to_dict(), "n_min_fitted": [0]}, "entry")


def test_a_chain_matched_to_its_replay_gives_every_replayed_configuration():
    """A chain fitted on a sample of requests, matched (hit and the copy entry at the replay's n_min)
    to a replay over all of them, drawn here from another chain: the replay's tokens per step within 1%."""
    from dataclasses import replace as with_

    from methods.match_chain import matched_to_replay

    configs = [SPEC.parse(f"prompt_lookup g{g} nmin3 nmax7") for g in range(1, 11)]
    other = with_(TRUE, hit=TRUE.hit * 1.3, catch=min(1.0, TRUE.catch * 1.4))
    replay = {c.label: tuple(float(v[0]) for v in chain_at(other, c.n_min, c.n_max, c.gamma, 200)) for c in configs}
    part = with_(TRUE, replayed=replay, replayed_new_tokens=200)
    matched = matched_to_replay(part, configs)
    for c in configs:
        before, after = (float(chain_at(p, c.n_min, c.n_max, c.gamma, 200)[0][0]) for p in (part, matched))
        assert after == pytest.approx(replay[c.label][0], rel=0.01) and abs(before / replay[c.label][0] - 1) > 0.02
    assert matched.sigma == TRUE.sigma and matched.rho == TRUE.rho      # the entry moves through catch at n_min 3
    with pytest.raises(ValueError, match="one match length"):
        matched_to_replay(part, [*configs, SPEC.parse("prompt_lookup g2 nmin1 nmax7")])


def test_the_sweep_prices_vllms_window_only_at_its_n_min():
    """The bundled vLLM Profile's n-gram entries were fitted on window 3-7: on their own target and
    carried (ASSUMED) to another, prompt lookup is searched at n_min 3 alone."""
    from calibrate.assumed import with_assumed
    from profiles.profile import Profile

    for name in ("llama-3.1-8b-h100-vllm", "coral-llama-3-8b-a6000"):
        profile = with_assumed(Profile.load(f"data/profiles/{name}.json"), [SPEC.name])
        setups = SPEC.setups(profile)
        assert setups, name
        for setup in setups:
            space = SPEC.space(setup)
            assert set(space["n_min"]) == {3} and set(space["n_max"]) == {3, 4, 5, 6}, (name, setup.acceptance_key)


def test_one_configuration_cannot_be_fitted():
    with pytest.raises(InputError, match="two or more configurations"):
        SPEC.fit_steps(_steps(TRUE, ["prompt_lookup g4 nmin1 nmax3"], 50, 0), dataset="d", temperature=0.0, source="s")


@pytest.mark.parametrize("label", ["prompt_lookup g4 nmin1 nmax3", "prompt_lookup g2 nmin3 nmax3", "prompt_lookup g8 nmin2 nmax6"])
def test_the_closed_form_is_the_mean_of_the_chain(label):
    """Stationary tokens and verified tokens per step against a long run of the sampler's chain."""
    config = SPEC.parse(label)
    draws, _ = MatchSampler(config, TRUE).stream(np.random.default_rng(1), 60_000, 0)
    closed = 1 + TRUE.reach(config.n_min, config.n_max, config.gamma).sum()
    assert draws.accepted.mean() == pytest.approx(closed, rel=0.02)
    verify = 1 + TRUE.matched(config.n_min, config.gamma)[0] * config.gamma
    assert draws.verify_tokens.mean() == pytest.approx(verify, rel=0.02)


def test_a_longer_gamma_spends_fewer_steps_per_copy():
    """In a copy, tokens per step grow with gamma as the copy's run allows; free steps barely."""
    copy = MatchAcceptance(hit=0.0, decay=0.5, alpha=0.0, alpha_next=0.0, rho=0.95, sigma=1.0)
    tokens = [1 + copy.reach(1, 3, g).sum() for g in (2, 4, 8)]
    assert tokens[0] < tokens[1] < tokens[2] and tokens[2] > 5


def test_bad_configurations_and_parts_are_one_line():
    with pytest.raises(InputError, match="n_min .3. exceeds n_max .2."):
        PromptLookupConfig(gamma=4, n_min=3, n_max=2)
    with pytest.raises(InputError, match="nmin0|must be in 1"):
        methods.parse_label("prompt_lookup g4 nmin0 nmax2")
    with pytest.raises(InputError, match="prompt_lookup.sigma must be a probability"):
        SPEC.acceptance_part({**TRUE.to_dict(), "sigma": 1.5}, "entry")
    with pytest.raises(InputError, match="needs 'hit'"):
        SPEC.acceptance_part({"alpha": 0.5}, "entry")


class _Setup:
    drafter_spec: dict = {}


@pytest.mark.parametrize("engine,match,expected", [
    ("vllm", "exact", {"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_min": 1, "prompt_lookup_max": 4}),
    ("sglang", "approximate", {"--speculative-algorithm": "NGRAM", "--speculative-num-draft-tokens": 6,
                               "--speculative-ngram-min-match-window-size": 1,
                               "--speculative-ngram-max-match-window-size": 4}),
    ("hf", "exact", {"prompt_lookup_num_tokens": 5, "max_matching_ngram_size": 4}),
])
def test_each_engine_takes_its_own_options(engine, match, expected):
    got = SPEC.to_engine(engine, _Setup(), SPEC.parse("prompt_lookup g5 nmin1 nmax4"))
    assert got.match == match and expected.items() <= got.settings.items()
    hf = SPEC.to_engine("hf", _Setup(), SPEC.parse("prompt_lookup g5 nmin2 nmax4"))
    assert hf.match == "approximate" and "down to one token" in hf.differs


def test_the_sweep_prices_it_from_its_own_part():
    from tests.simulator.fixtures import profile_dict
    from profiles.profile import Profile

    profile = Profile.from_dict(profile_dict())
    setup = SPEC.setups(profile)[0]
    space = SPEC.space(setup)
    assert len(space) == 10 * 21 and (space["n_min"] <= space["n_max"]).all()
    tokens = SPEC.expected_tokens(setup, space)
    shape = SPEC.step_shape(setup, space)
    assert np.all(tokens >= 1) and np.all(shape.verify_tokens >= 1) and shape.max_drafted == 0
    longer = Setup(profile, setup.drafter, setup.acceptance_key, new_tokens=16)
    assert np.all(SPEC.expected_tokens(longer, space) <= tokens + 1e-12)    # a short generation clips its last step


def test_a_rare_copy_barely_shows_in_a_short_answer():
    """A copy entered with 1% per step that never ends dominates the stationary chain, but a
    32-token answer starts in free text and rarely reaches it, and one that does ends early. The
    closed form over the answer is the sampler's own mean (it was 31% off under a fixed point on
    the step count); the stationary one is more than three times too high."""
    part = MatchAcceptance(hit=0.3, decay=0.5, alpha=0.3, alpha_next=0.5, rho=0.999, sigma=0.01)
    config = SPEC.parse("prompt_lookup g8 nmin1 nmax3")
    closed = float(chain_at(part, config.n_min, config.n_max, config.gamma, 32)[0][0])
    stationary = float(generation_tokens(part.reach(config.n_min, config.n_max, config.gamma), 32)[0])
    rng, sampler, tokens, taken = np.random.default_rng(3), MatchSampler(config, part), 0, 0
    for _ in range(3000):
        state, done = None, 0
        while done < 32:
            draws, state = sampler.draw(rng, 1, state)
            done, taken = done + int(draws.accepted[0]), taken + 1
        tokens += 32
    assert closed == pytest.approx(tokens / taken, rel=0.02)
    assert stationary > 3 * closed


def test_a_longer_n_min_finds_fewer_copies_and_old_profiles_read_as_before():
    longer = [TRUE.copy_share(4, n) for n in (1, 2, 4)]
    assert longer[0] > longer[1] > longer[2]
    assert TRUE.entry(3) == pytest.approx(TRUE.sigma * TRUE.catch ** 2)
    old = {k: v for k, v in TRUE.to_dict().items() if k != "catch"}       # a Profile written before catch
    assert SPEC.acceptance_part(old, "old").catch == 1.0
    with pytest.raises(InputError, match="prompt_lookup.catch must be a probability"):
        SPEC.acceptance_part({**old, "catch": 1.5}, "bad")


def _forward_counts(part, n_min, gamma, new_tokens):
    """(tokens per step, proposing share) by pushing the probability of (tokens committed, copying)
    forward step by step until every generation has ended: the same chain read the other way."""
    found, entry, rho, a, b = float(part.found(n_min)), float(part.entry(n_min)), part.rho, part.alpha, part.alpha_next
    live, steps, proposing = {(0, False): 1.0}, 0.0, 0.0
    while live:
        nxt = {}
        for (n, copying), mass in live.items():
            steps += mass
            if copying:
                proposing += mass
                outcomes = [(rho ** r * (1 - rho), 1 + r, False) for r in range(gamma + 1)] + [(rho ** (gamma + 1), 1 + gamma, True)]
            else:
                proposing += mass * found
                drawn = [(1 - found * a, 1)] + [(found * a * b ** (i - 1) * ((1 - b) if i < gamma else 1.0), 1 + i)
                                                 for i in range(1, gamma + 1)]
                outcomes = [(p * q, x, to) for p, x in drawn for q, to in ((1 - entry, False), (entry, True))]
            for p, x, to in outcomes:
                if n + x < new_tokens and p * mass > 0:
                    nxt[(n + x, to)] = nxt.get((n + x, to), 0.0) + p * mass
        live = nxt
    return new_tokens / steps, proposing / steps


@pytest.mark.parametrize("gamma,n_min,new_tokens", [(1, 1, 5), (3, 2, 9), (5, 1, 12)])
def test_a_generations_counts_are_the_chains_own(gamma, n_min, new_tokens):
    """generation_counts (backward over the tokens left) against the chain's probability pushed
    forward step by step, on configurations of several draft lengths at once."""
    part = MatchAcceptance(hit=0.6, decay=0.7, alpha=0.4, alpha_next=0.6, rho=0.8, sigma=0.2, catch=0.9)
    tokens, share = generation_counts(part, [n_min, 1], [gamma, 2], new_tokens)
    want = _forward_counts(part, n_min, gamma, new_tokens)
    assert (float(tokens[0]), float(share[0])) == pytest.approx(want, rel=1e-12)
    assert (float(tokens[1]), float(share[1])) == pytest.approx(_forward_counts(part, 1, 2, new_tokens), rel=1e-12)


def test_a_replayed_configuration_is_priced_at_its_replay_carried_by_the_chains_ratio():
    """Where the entry holds a configuration's replay (module docstring of methods.prompt_lookup)
    the closed form is that replay at its own generation length, the replay times the chain's
    ratio at another length, and the chain alone for a configuration the replay lacks."""
    from tests.simulator.fixtures import profile_dict
    from profiles.profile import Profile

    raw_profile = profile_dict()
    profile = Profile.from_dict(raw_profile)
    setup = SPEC.setups(profile)[0]
    space = SPEC.space(setup).iloc[[0, 45, 120]].reset_index(drop=True)
    labels = SPEC.config.labels(space)
    raw = {**setup.need(SPEC.name, SPEC.name).to_dict(), "replayed": {labels[0]: [1.9, 0.6], labels[1]: [2.4, 0.8]},
           "replayed_new_tokens": 32}
    key = setup.acceptance_key
    raw_profile["acceptance"][key][SPEC.name] = raw
    with_replay = SPEC.setups(Profile.from_dict(raw_profile))[0]
    chain = SPEC.expected_tokens(setup, space)
    at_32 = SPEC.expected_tokens(Setup(with_replay.profile, with_replay.drafter, key, new_tokens=32), space)
    assert at_32[:2] == pytest.approx([1.9, 2.4]) and at_32[2] == pytest.approx(
        SPEC.expected_tokens(Setup(profile, setup.drafter, key, new_tokens=32), space)[2])
    at_16 = SPEC.expected_tokens(Setup(with_replay.profile, with_replay.drafter, key, new_tokens=16), space)
    plain_16 = SPEC.expected_tokens(Setup(profile, setup.drafter, key, new_tokens=16), space)
    plain_32 = SPEC.expected_tokens(Setup(profile, setup.drafter, key, new_tokens=32), space)
    assert at_16[:2] == pytest.approx(np.array([1.9, 2.4]) * plain_16[:2] / plain_32[:2])
    shape = SPEC.step_shape(Setup(with_replay.profile, with_replay.drafter, key, new_tokens=32), space)
    assert shape.verify_tokens[:2] == pytest.approx(1 + np.array([0.6, 0.8]) * space["gamma"].to_numpy()[:2])
    assert chain.shape == at_32.shape


def test_a_length_shape_carries_the_replay_to_other_lengths_and_the_chain_past_its_longest():
    """An entry's `length_shape` (each configuration's replay on long answers at several lengths)
    carries its replay to another length by that replay's ratio, linear in log length; past the
    longest length replayed the chain carries it on; a configuration the shape lacks keeps the chain."""
    from tests.simulator.fixtures import profile_dict
    from profiles.profile import Profile

    raw_profile = profile_dict()
    setup = SPEC.setups(Profile.from_dict(raw_profile))[0]
    space = SPEC.space(setup).iloc[[0, 45]].reset_index(drop=True)
    labels = SPEC.config.labels(space)
    key = setup.acceptance_key
    replay = {**setup.need(SPEC.name, SPEC.name).to_dict(), "replayed": {labels[0]: [1.9, 0.6], labels[1]: [2.4, 0.8]},
              "replayed_new_tokens": 32}
    raw_profile["acceptance"][key][SPEC.name] = {**replay, "length_prompts": 8, "length_shape": {
        "32": {labels[0]: [2.0, 0.5]}, "64": {labels[0]: [1.6, 0.4]}, "256": {labels[0]: [3.2, 0.6]}}}
    shaped = Profile.from_dict(raw_profile)
    raw_profile["acceptance"][key][SPEC.name] = replay
    plain = Profile.from_dict(raw_profile)
    at = lambda profile, n: SPEC.expected_tokens(Setup(profile, setup.drafter, key, new_tokens=n), space)  # noqa: E731
    assert at(shaped, 32) == pytest.approx([1.9, 2.4])
    assert at(shaped, 64)[0] == pytest.approx(1.9 * 1.6 / 2.0)
    between = 1.6 + (3.2 - 1.6) * np.log(128 / 64) / np.log(256 / 64)
    assert at(shaped, 128)[0] == pytest.approx(1.9 * between / 2.0)
    assert at(shaped, 512)[0] == pytest.approx(1.9 * 3.2 / 2.0 * at(plain, 512)[0] / at(plain, 256)[0])
    assert at(shaped, 128)[1] == pytest.approx(at(plain, 128)[1])          # not in the shape: the chain's carry
    assert Profile.from_dict(shaped.to_dict()).to_dict() == shaped.to_dict()
    raw_profile["acceptance"][key][SPEC.name] = {**replay, "length_prompts": 8, "length_shape": {"32": {}}}
    with pytest.raises(InputError, match="length_shape needs a replay and two or more lengths"):
        Profile.from_dict(raw_profile)


def test_a_replay_entry_is_fitted_on_the_calibration_grid_and_checked():
    steps = _steps(TRUE, list(SPEC.calibration) + ["prompt_lookup g9 nmin2 nmax5"], 600, seed=2, length=30)
    entry = SPEC.fit_replayed(steps, dataset="d", temperature=0.0, source="synthetic")
    table = entry[SPEC.name]["replayed"]
    assert set(table) == {SPEC.parse(label).label for label in steps["config"].unique()}
    extra = steps[steps["config"] == "prompt_lookup g9 nmin2 nmax5"]
    assert table["prompt_lookup g9 nmin2 nmax5"][0] == pytest.approx(extra["accepted"].mean(), abs=1e-4)
    assert [c["config"] for c in entry["fit"]["configs"]] == sorted(SPEC.parse(c).label for c in SPEC.calibration)
    assert entry[SPEC.name]["replayed_new_tokens"] == round(steps.groupby(["config", "run_id"])["accepted"].sum().mean())
    with pytest.raises(InputError, match="lacks calibration configuration"):
        SPEC.fit_replayed(steps[steps["config"] != SPEC.calibration[0]], dataset="d", temperature=0.0, source="s")
    part = entry[SPEC.name]
    with pytest.raises(InputError, match=r"replayed\['x'\] must be \[tokens per step >= 1"):
        SPEC.acceptance_part({**part, "replayed": {"x": [0.5, 0.2]}}, "entry")
    with pytest.raises(InputError, match="replayed_new_tokens, a whole number"):
        SPEC.acceptance_part({**part, "replayed_new_tokens": None}, "entry")


def test_the_simulator_draws_a_replayed_configuration_at_its_replay():
    """The simulator's sampler of a replayed configuration is the chain refitted to its replay: its
    generations of the replay's length average the replay's tokens per step and proposing share,
    where the chain alone misses them (methods.match_chain.fitted_to_replay)."""
    from profiles.profile import Profile
    from methods.match_chain import chain_at
    from tests.simulator.fixtures import profile_dict

    raw_profile = profile_dict()
    profile = Profile.from_dict(raw_profile)
    setup = SPEC.setups(profile)[0]
    config = SPEC.parse("prompt_lookup g4 nmin2 nmax3")
    part = setup.need(SPEC.name, SPEC.name)
    chain_tokens, chain_share = (float(v[0]) for v in chain_at(part, config.n_min, config.n_max, config.gamma, 32))
    replay = [round(chain_tokens * 1.2, 4), round(chain_share * 1.1, 4)]
    raw_profile["acceptance"][setup.acceptance_key][SPEC.name] = {**part.to_dict(), "replayed": {config.label: replay},
                                                                  "replayed_new_tokens": 32}
    sampler = SPEC.sampler(SPEC.setups(Profile.from_dict(raw_profile))[0], config)
    refitted = chain_at(sampler.part, config.n_min, config.n_max, config.gamma, 32)
    assert [float(v[0]) for v in refitted] == pytest.approx(replay, rel=1e-3)
    rng, n = np.random.default_rng(0), 20000
    state, committed, tokens, steps, proposing = sampler.initial_state(n), np.zeros(n, int), 0, 0, 0
    while (committed < 32).any():
        live = committed < 32
        draws, state = sampler.draw(rng, n, state)
        taken = np.minimum(draws.accepted, 32 - committed)          # the last step cut at the length
        tokens, steps = tokens + int(taken[live].sum()), steps + int(live.sum())
        proposing += int((draws.verify_tokens[live] > 1).sum())
        committed = committed + np.where(live, taken, 0)
    assert tokens / steps == pytest.approx(replay[0], rel=0.01)      # the closed form is the chain's own mean
    assert proposing / steps == pytest.approx(replay[1], abs=0.01)
    assert abs(chain_tokens / replay[0] - 1) > 0.15              # the chain alone is far from it
