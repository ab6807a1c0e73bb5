"""Engine calibration: StepCalibration folded into the one step-cost model, fitted from StepTraces."""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

import methods
from calibrate.engine import StepRun, fit_engine, fit_parts, prior_parts, workload
from profiles.profile import Profile
from common.bundled import bundled
from common.errors import InputError
from costmodel.step import StepCalibration, StepShape, DraftPart, chain_width, step_seconds, verify_seconds

TRUTH = StepCalibration(verify_scale=1.2, verify_fixed_s=0.004, draft_scale=1.1, draft_per_forward_s=0.006,
                        draft_per_token_s=0.002, first_draft_s=0.012, first_draft_per_token_s=0.0006,
                        overhead_s=0.0005, overhead_per_token_s=0.0001)


def fixed(model, n, ctx, batch=1):
    return 0.01 * np.asarray(n, float) + 0.05 + 0.0 * np.asarray(ctx, float)


@pytest.fixture(scope="module")
def profile() -> Profile:
    return Profile.load(bundled("profiles", "smollm2-135m-cpu.json"))


def test_apply_prices_every_part():
    shape = StepShape("t", np.array([5.0]), (DraftPart("d", 0.5),), chain_width([4]))
    plain = step_seconds(fixed, shape, 100.0)
    priced = step_seconds(fixed, TRUTH.apply(shape), 100.0)
    draft = 4 * 0.5 * (0.01 + 0.05)
    verify = 0.01 * 5 + 0.05
    assert plain == pytest.approx([draft + verify])
    want = 1.1 * draft + 4 * 0.006 + 5 * 0.002 + 1.2 * verify + 0.004 + 0.0005 + 0.0001 * 5
    assert priced == pytest.approx([want])
    assert StepCalibration().apply(shape) is shape
    no_draft = StepShape("t", np.array([1.0]))       # a method without a drafter pays no draft part
    assert step_seconds(fixed, TRUTH.apply(no_draft), 0.0) == pytest.approx([1.2 * 0.06 + 0.004 + 0.0005 + 0.0001])


def test_speculation_cost_is_paid_by_drafting_steps_only():
    """A drafting step's own work (acceptance, rollback) is paid by a shape that drafts, not by plain
    decoding's: the denominator of every speedup stays the plain step."""
    calibration = StepCalibration(overhead_s=0.003, speculation_s=0.002)
    drafted = StepShape("t", np.array([2.0]), (DraftPart("d"),), np.ones((1, 1)))
    plain = StepShape("t", np.array([1.0]))
    assert step_seconds(fixed, calibration.apply(drafted), 0.0) - step_seconds(fixed, drafted, 0.0) == \
        pytest.approx([0.005])
    assert step_seconds(fixed, calibration.apply(plain), 0.0) - step_seconds(fixed, plain, 0.0) == pytest.approx([0.003])


def test_per_token_costs_follow_each_steps_own_tokens():
    """The per-token parts go with the tokens a step verifies: a realised step (the simulator)
    pays them on its own tokens, a verify distribution (the closed form) on its mean."""
    calibration = StepCalibration(verify_per_token_s=0.002, overhead_per_token_s=0.0005)
    shape = calibration.apply(StepShape("t", np.array([5.0])))
    realised = verify_seconds(fixed, shape, 100.0, verify_tokens=np.array([2.0, 8.0]))
    assert realised[1] - realised[0] == pytest.approx(6 * (0.01 + 0.0025))
    spread = calibration.apply(StepShape("t", np.array([5.0]), verify_dist=(np.array([[2.0, 8.0]]), np.array([[0.5, 0.5]]))))
    assert verify_seconds(fixed, spread, 100.0) == pytest.approx(realised.mean())
    assert step_seconds(fixed, shape, 100.0) == pytest.approx([0.01 * 5 + 0.05 + 0.0025 * 5])


def synthetic_run(profile, label: str, drafter, rng, n_steps=120, prompts=(60, 100, 140, 180, 220, 260),
                  truth=TRUTH) -> StepRun:
    """Steps whose parts are `truth` applied to the prior of their own shape, with 1% noise: one
    generation per prompt length, its first step paying the drafter's catch-up on the prompt."""
    config = methods.parse_label(label)
    spec = methods.get(config.method)
    setup = profile.setups_for(spec, dataset="mt-bench", drafter=drafter)[0]
    shape = spec.step_shape(setup, spec.frame_of([config]))
    depth, tokens = shape.max_drafted, int(np.asarray(shape.verify_tokens).item())
    per = n_steps // len(prompts)
    step = np.tile(np.arange(per), len(prompts))
    prompt = np.repeat(prompts, per)
    ctx = prompt + step
    frame = pd.DataFrame({"run_id": "r", "method": config.method, "config": json.dumps(config.to_dict()),
                          "prompt_id": [f"p{n}" for n in prompt], "step": step, "ctx_len": ctx,
                          "draft_forwards": depth, "draft_s": 0.0, "verify_tokens": tokens, "verify_s": 0.0,
                          "overhead_s": 0.0, "accepted": rng.integers(1, depth + 2, n_steps)})
    run = StepRun(frame, drafter, "mt-bench")
    parts = prior_parts(profile, run)
    noise = lambda: 1 + 0.01 * rng.standard_normal(len(frame))
    catch_up = (step == 0) * (truth.first_draft_s + truth.first_draft_per_token_s * prompt)
    frame["draft_s"] = (truth.draft_scale * parts["prior_draft"] + truth.draft_per_forward_s * depth
                        + (truth.draft_per_token_s * tokens + catch_up) * (depth > 0)) * noise()
    frame["verify_s"] = (truth.verify_scale * parts["prior_verify"] + truth.verify_fixed_s) * noise()
    frame["overhead_s"] = truth.overhead_s + truth.overhead_per_token_s * tokens
    return StepRun(frame, drafter, "mt-bench")


def test_fit_recovers_the_engine_costs(profile):
    rng = np.random.default_rng(0)
    runs = [synthetic_run(profile, label, "vanilla", rng) for label in ("sd g1", "sd g4", "sd g7")]
    runs.append(synthetic_run(profile, "ar", None, rng))
    parts = pd.concat([prior_parts(profile, r) for r in runs])
    sd = parts[parts["method"] == "sd"]
    fitted = fit_parts(sd)
    # a chain's draft forwards all run one token and it verifies one more than it drafts: its scale,
    # per-forward and per-token costs are not told apart, only what a step of each length pays
    # (its generations' first steps, catching up on the prompt, included)
    for (_, measured), (_, predicted) in zip(sd.groupby("config")["draft_s"],
                                             sd.assign(p=fitted.draft_scale * sd["prior_draft"]
                                                       + fitted.draft_per_forward_s * sd["forwards"]
                                                       + fitted.draft_per_token_s * sd["verify_tokens"]
                                                       + sd["first"] * (fitted.first_draft_s + fitted.first_draft_per_token_s
                                                                        * sd["ctx_len"])).groupby("config")["p"]):
        assert predicted.mean() == pytest.approx(measured.mean(), rel=0.01)
    assert fitted.verify_scale == pytest.approx(TRUTH.verify_scale, rel=0.1)
    assert fitted.overhead_s + 5 * fitted.overhead_per_token_s == pytest.approx(
        TRUTH.overhead_s + 5 * TRUTH.overhead_per_token_s, rel=0.01)
    engine = fit_engine(profile, runs)
    assert set(engine["methods"]) == {"ar", "sd"}
    # leaving a configuration out still predicts its speedup (the others pin every part)
    assert engine["fit"]["heldout"]["speedup_error_max"] < 0.03
    plain = runs[-1].frame                  # the calibration window's plain step, kept as a drift reference
    ref = engine["fit"]["reference"][runs[-1].dataset]
    assert ref["ar_step_s"] == pytest.approx((plain["draft_s"] + plain["verify_s"] + plain["overhead_s"]).mean())
    assert ref["steps"] == len(plain)
    calibrated = Profile.from_dict({**profile.to_dict(), "engine": engine})
    assert calibrated.step_calibration("sd").draft_scale == pytest.approx(fitted.draft_scale)
    assert calibrated.step_calibration("kangaroo") == StepCalibration.from_dict(engine["pooled"])


def test_trees_pin_the_draft_cost_per_forward_and_per_proposed_token(profile):
    """Trees of one depth and different widths (and one width at different depths) tell a cost
    per proposed node from the forwards' cost; fails if either is dropped from the fit. The bundled
    drafter costs about the same per forward at widths 1-4 (1.5-2 ms), so its scale and a fixed
    cost per forward are nearly one direction: what each tree's steps pay is pinned, not the split."""
    rng = np.random.default_rng(2)
    runs = [synthetic_run(profile, label, "vanilla", rng) for label in ("mcsd k4", "mcsd k2x2x1", "mcsd k4x2", "mcsd k1x1x1")]
    parts = pd.concat([prior_parts(profile, r) for r in runs])
    fitted = fit_parts(parts)
    predicted = parts.assign(p=fitted.draft_scale * parts["prior_draft"] + fitted.draft_per_forward_s * parts["forwards"]
                             + fitted.draft_per_token_s * parts["verify_tokens"]
                             + parts["first"] * (fitted.first_draft_s + fitted.first_draft_per_token_s * parts["ctx_len"]))
    later = predicted[predicted["first"] == 0].groupby("config")
    assert later["p"].mean().to_numpy() == pytest.approx(later["draft_s"].mean().to_numpy(), rel=0.02)
    # a generation's first step: a fixed catch-up and one per prompt token (prompts of 60-260)
    assert fitted.first_draft_per_token_s == pytest.approx(TRUTH.first_draft_per_token_s, rel=0.1)
    assert fitted.first_draft_s == pytest.approx(TRUTH.first_draft_s, abs=0.006)
    assert fitted.draft_per_token_s == pytest.approx(TRUTH.draft_per_token_s, abs=0.0005)


def test_one_configuration_fits_a_scale_only(profile):
    rng = np.random.default_rng(1)
    parts = prior_parts(profile, synthetic_run(profile, "sd g4", "vanilla", rng))
    fitted = fit_parts(parts)
    assert fitted.verify_fixed_s == 0.0 and fitted.draft_per_forward_s == 0.0 and fitted.draft_per_token_s == 0.0
    measured = parts["draft_s"] + parts["verify_s"]
    predicted = fitted.draft_scale * parts["prior_draft"] + fitted.verify_scale * parts["prior_verify"]
    assert predicted.sum() == pytest.approx(measured.sum(), rel=0.01)


def test_scoring_and_simulator_price_the_calibrated_step(profile):
    from sweep import scoring
    from simulator.stream import simulate_stream

    engine = {"methods": {"sd": TRUTH.to_dict(), "ar": StepCalibration(verify_scale=2.0).to_dict()}}
    calibrated = Profile.from_dict({**profile.to_dict(), "engine": engine})
    profile = Profile.from_dict({**profile.to_dict(), "engine": {}})        # the isolated forwards only
    spec = methods.get("sd")
    setting = scoring.Setting(temperature=0.0, ctx_len=128, dataset="mt-bench")
    frame = spec.frame_of([methods.parse_label("sd g4")])
    plain = scoring.score(profile.setups_for(spec, dataset="mt-bench")[0], "sd", frame, setting)
    priced = scoring.score(calibrated.setups_for(spec, dataset="mt-bench")[0], "sd", frame, setting)
    assert float(priced["step_s"].iloc[0]) > float(plain["step_s"].iloc[0])
    # the baseline is ar's calibrated step: twice the forward
    ratio = float(priced["speedup"].iloc[0] * priced["step_s"].iloc[0]) / float(plain["speedup"].iloc[0] * plain["step_s"].iloc[0])
    assert ratio == pytest.approx(2.0, rel=1e-6)
    sim_plain = simulate_stream(profile, "sd", "sd g4", n_tokens=64, seed=0, prompt_len=128).summary
    sim = simulate_stream(calibrated, "sd", "sd g4", n_tokens=64, seed=0, prompt_len=128).summary
    assert sim["ar_decode_s"] == pytest.approx(2 * sim_plain["ar_decode_s"], rel=1e-9)
    assert sim["decode_s"] > sim_plain["decode_s"]


@pytest.mark.parametrize("engine", ["fast", "simpy"])
def test_the_first_steps_catch_up_is_paid_once_by_the_simulator_and_spread_by_the_closed_form(profile, engine):
    """The drafter's catch-up on the prompt: the simulator's first decode step pays it (and its
    prefill no longer runs the drafter's prompt forward); the closed form spreads it over the
    generation's expected steps; fails if either drops it or pays it per step."""
    from sweep import scoring
    from simulator.stream import simulate_stream

    catch_up = StepCalibration(first_draft_s=0.02, first_draft_per_token_s=0.001)
    with_it = Profile.from_dict({**profile.to_dict(), "engine": {"methods": {"sd": catch_up.to_dict()}}})
    without = Profile.from_dict({**profile.to_dict(), "engine": {}})
    run = lambda p, method="sd": simulate_stream(p, method, f"{method} g4" if method == "sd" else "ar", n_tokens=40,
                                                 seed=3, prompt_len=100, engine=engine).summary
    paid, plain = run(with_it), run(without)
    assert paid["decode_s"] - plain["decode_s"] == pytest.approx(0.02 + 0.001 * 100, rel=1e-9)
    assert paid["ar_decode_s"] == pytest.approx(plain["ar_decode_s"], rel=1e-12)
    spec = methods.get("sd")
    frame = spec.frame_of([methods.parse_label("sd g4")])
    setting = scoring.Setting(temperature=0.0, ctx_len=120, dataset="mt-bench", new_tokens=40)
    scored = {name: scoring.score(p.setups_for(spec, dataset="mt-bench")[0], "sd", frame, setting).iloc[0]
              for name, p in (("with", with_it), ("without", without))}
    spread = (0.02 + 0.001 * 100) * scored["with"]["tokens_per_step"] / 40       # prompt = 120 - 40 / 2
    assert scored["with"]["step_s"] - scored["without"]["step_s"] == pytest.approx(spread, rel=1e-9)
    steady = replace(setting, new_tokens=None)       # a steady state has no first step
    assert scoring.score(with_it.setups_for(spec, dataset="mt-bench")[0], "sd", frame, steady).iloc[0]["step_s"] == \
        pytest.approx(scoring.score(without.setups_for(spec, dataset="mt-bench")[0], "sd", frame, steady).iloc[0]["step_s"])


@pytest.mark.parametrize("engine, message", [
    ({"methods": {"sd": {"verify_scale": "x"}}}, "engine.methods.sd.verify_scale must be a finite number"),
    ({"methods": {"sd": {"scale": 1.0}}}, "engine.methods.sd has unknown key 'scale'"),
    ({"pooled": {"overhead_s": float("nan")}}, "engine.pooled.overhead_s must be a finite number"),
    ([], "profile field 'engine' must be an object"),
])
def test_bad_engine_section_is_refused_in_one_line(profile, engine, message):
    with pytest.raises(InputError, match=message.replace(".", r"\.")):
        Profile.from_dict({**profile.to_dict(), "engine": engine})


def test_workload_is_the_context_the_traces_saw(profile):
    frame = pd.DataFrame({"run_id": "r", "prompt_id": ["a", "a", "b"], "ctx_len": [100, 103, 50],
                          "accepted": [3, 2, 4], "method": "ar", "config": "{}"})
    got = workload([StepRun(frame, None, "mt-bench")])
    assert got == {"mt-bench": {"prompt_tokens": 75.0, "new_tokens": 4.5}}
    p = Profile.from_dict({**profile.to_dict(), "workload": got})
    assert p.workload_ctx("mt-bench") == pytest.approx(77.25)
    assert p.workload_ctx("humaneval") is None


def test_paired_plain_decoding_divides_out_the_machine_drift(profile):
    """Each generation measured while the machine ran slower or faster (a factor per pair), its
    plain-decoding partner slowed alike: the calibration divides the factors out (traces.drift)."""
    rng = np.random.default_rng(2)
    one = lambda label, drafter: synthetic_run(profile, label, drafter, rng, prompts=(100,))   # pairs of one prompt
    runs = [one(label, "vanilla") for label in ("sd g1", "sd g4", "sd g7")]
    runs.append(one("ar", None))
    slow = np.array([1.0, 1.6, 0.8, 1.3, 0.9, 1.45])          # per pair: the machine's speed then
    for i, run in enumerate(runs[:3]):
        run.frame["pair"] = np.repeat([2 * i, 2 * i + 1], 60)
    runs[3].frame["pair"] = np.repeat(np.arange(6), 20)
    for run in runs:
        for part in ("draft_s", "verify_s", "overhead_s"):
            run.frame[part] *= slow[run.frame["pair"]]
    engine = fit_engine(profile, runs)
    assert engine["fit"]["drift"]["pairs"] == 6
    assert engine["fit"]["drift"]["factor_p90"] / engine["fit"]["drift"]["factor_p10"] > 1.4
    assert engine["fit"]["heldout"]["speedup_error_max"] < 0.03
    unpaired = [StepRun(r.frame.assign(pair=-1), r.drafter, r.dataset) for r in runs]
    blind = fit_engine(profile, unpaired)
    assert blind["fit"]["drift"] is None
    assert blind["fit"]["heldout"]["speedup_error_max"] > 0.05        # the drift shows up as error
    # a paired step whose partner is missing is refused
    with pytest.raises(InputError, match=r"pair 5 \(prompt p100\) has no plain-decoding partner"):
        fit_engine(profile, [*runs[:3], StepRun(runs[3].frame[runs[3].frame["pair"] != 5], None, "mt-bench")])


def test_a_dataset_recorded_in_a_slower_hour_is_put_on_the_others_speed(profile):
    """One prompt's every pair measured while the machine ran 1.6x slower (a dataset added later):
    its own median cannot see that; its ratio to the isolated forward at the same context, against
    every pair's, does, so the fit prices the others' speed."""
    rng = np.random.default_rng(4)
    prompts = (100, 200, 300, 400)
    runs = [synthetic_run(profile, label, "vanilla", rng, prompts=prompts) for label in ("sd g1", "sd g4", "sd g7")]
    runs.append(synthetic_run(profile, "ar", None, rng, prompts=prompts))
    for i, run in enumerate(runs[:3]):                  # prompt j, configuration i: pair 3j + i
        run.frame["pair"] = 3 * (run.frame["prompt_id"].str[1:].astype(int) // 100 - 1) + i
    ar = runs[3].frame
    ar["pair"] = 3 * (ar["prompt_id"].str[1:].astype(int) // 100 - 1) + ar["step"] // 10
    steady = fit_engine(profile, [StepRun(r.frame.copy(), r.drafter, r.dataset) for r in runs])
    for run in runs:
        slow = np.where(run.frame["prompt_id"] == "p400", 1.6, 1.0) * (1 + 0.05 * np.sin(run.frame["pair"]))
        for part in ("draft_s", "verify_s", "overhead_s"):
            run.frame[part] *= slow
    engine = fit_engine(profile, runs)
    assert "the median over every pair" in engine["fit"]["drift"]["scheme"]
    assert engine["fit"]["drift"]["factor_p90"] > 1.4
    # priced as if the machine had kept its speed (up to one scale for every part: speedups are ratios)
    ratio = lambda e: e["methods"]["sd"]["verify_scale"] / e["methods"]["ar"]["verify_scale"]
    assert ratio(engine) == pytest.approx(ratio(steady), rel=0.005)
    assert engine["methods"]["sd"]["draft_scale"] / engine["methods"]["ar"]["verify_scale"] == pytest.approx(
        steady["methods"]["sd"]["draft_scale"] / steady["methods"]["ar"]["verify_scale"], rel=0.02)
    assert engine["fit"]["heldout"]["speedup_error_max"] < 0.03


def test_the_structure_with_the_lower_heldout_error_is_kept(profile):
    """Methods whose verify forwards truly cost differently keep their own verify fit; the
    shared-verify structure prices every speculative method's verify alike."""
    from calibrate.engine import fit_calibrations

    rng = np.random.default_rng(3)
    runs = [synthetic_run(profile, label, drafter, rng) for label, drafter in
            (("sd g1", "vanilla"), ("sd g4", "vanilla"), ("sd g7", "vanilla"),
             ("glide g2", "glide"), ("glide g4", "glide"), ("glide g6", "glide"), ("ar", None))]
    for run in runs[3:6]:
        run.frame["verify_s"] *= 1.8              # glide's verify forward: 80% dearer than sd's
    engine = fit_engine(profile, runs)
    means = engine["fit"]["structure"]["heldout_mean"]
    assert engine["fit"]["structure"]["chosen"] == "per method" and means["per method"] < means["shared verify"]
    parts = pd.concat([prior_parts(profile, r) for r in runs], ignore_index=True)
    per, _ = fit_calibrations(parts, "shared verify")
    assert per["sd"].verify_scale == per["glide"].verify_scale and per["ar"].verify_scale != per["sd"].verify_scale
    with pytest.raises(InputError, match="unknown engine fit structure 'both'"):
        fit_calibrations(parts, "both")


def test_a_cost_per_verified_token_is_found_where_the_verify_has_one(profile):
    """Verify forwards that cost 2 ms per verified token beyond the isolated forward (logits at
    every position): the per-token structure wins held out and recovers the cost; the shared
    line without it cannot price 2-token and 60-token verifies both."""
    from calibrate.engine import fit_calibrations

    rng = np.random.default_rng(4)
    plain_draft = replace(TRUTH, draft_per_forward_s=0.0, draft_per_token_s=0.0, first_draft_s=0.0,
                          first_draft_per_token_s=0.0)       # the verify is under test; two chains of a method pin no more
    runs = [synthetic_run(profile, label, drafter, rng, truth=plain_draft) for label, drafter in
            (("sd g1", "vanilla"), ("sd g4", "vanilla"), ("mcsd k4x2 repl", "vanilla"), ("mcsd k4x2x2x2 repl", "vanilla"),
             ("mcsd k2x2x1 repl", "vanilla"), ("glide g2", "glide"), ("glide g6", "glide"), ("ar", None))]
    for run in runs[:-1]:
        run.frame["verify_s"] += 0.002 * run.frame["verify_tokens"]
    engine = fit_engine(profile, runs)
    means = engine["fit"]["structure"]["heldout_mean"]
    assert engine["fit"]["structure"]["chosen"] == "shared verify per token"
    assert means["shared verify per token"] < 0.5 * min(means["shared verify"], means["per method"])
    parts = pd.concat([prior_parts(profile, r) for r in runs], ignore_index=True)
    per, _ = fit_calibrations(parts, "shared verify per token")
    assert per["mcsd"].verify_per_token_s == pytest.approx(0.002, rel=0.1) and per["ar"].verify_per_token_s == 0


def test_verifies_past_the_few_row_kernels_get_a_line_of_their_own(profile):
    """Narrow verifies cost 1.12x their isolated forward, wide ones (9 tokens on, runtime.linear's
    F.linear) 0.9x: one line through both puts a fixed cost on the narrow ones and misprices
    sd g1; the by-width structure wins held out and prices each side as measured."""
    from calibrate.engine import fit_calibrations, predict_parts, wide_from

    rng = np.random.default_rng(5)
    runs = [synthetic_run(profile, label, drafter, rng, truth=replace(TRUTH, verify_scale=1.12, verify_fixed_s=0.0))
            for label, drafter in (("sd g1", "vanilla"), ("sd g4", "vanilla"), ("sd g7", "vanilla"),
                                   ("mcsd k4x2 repl", "vanilla"), ("mcsd k4x2x2x2 repl", "vanilla"),
                                   ("glide g2", "glide"), ("glide g6", "glide"), ("glide g8", "glide"), ("ar", None))]
    for run in runs[:-1]:
        wide = run.frame["verify_tokens"] >= wide_from()
        run.frame.loc[wide, "verify_s"] *= 0.9 / 1.12
    engine = fit_engine(profile, runs)
    means = engine["fit"]["structure"]["heldout_mean"]
    assert engine["fit"]["structure"]["chosen"] == "shared verify by width"
    assert means["shared verify by width"] < 0.5 * means["shared verify"]
    parts = pd.concat([prior_parts(profile, r) for r in runs], ignore_index=True)
    per, _ = fit_calibrations(parts, "shared verify by width")
    sd = per["sd"]
    assert sd.verify_wide_from == wide_from() and sd.verify_scale * sd.verify_wide_factor == pytest.approx(0.9, rel=0.05)
    g1 = parts[parts["config"] == "sd g1"]
    assert predict_parts(sd, g1).mean() == pytest.approx(
        (g1["draft_s"] + g1["verify_s"] + g1["overhead_s"]).mean(), rel=0.01)
    # the one step-cost model prices the same: a realised step and a verify distribution alike
    shape = sd.apply(StepShape("t", np.array([5.0])))
    realised = verify_seconds(fixed, shape, 0.0, verify_tokens=np.array([8.0, 9.0]))
    assert realised == pytest.approx([sd.verify_scale * 0.13 + sd.verify_fixed_s + 8 * shape.verify_per_token_s,
                                      sd.verify_scale * sd.verify_wide_factor * 0.14 + sd.verify_fixed_s
                                      + sd.verify_wide_extra_s + 9 * shape.verify_per_token_s])
    spread = sd.apply(StepShape("t", np.array([8.5]), verify_dist=(np.array([[8.0, 9.0]]), np.array([[0.5, 0.5]]))))
    assert verify_seconds(fixed, spread, 0.0) == pytest.approx(realised.mean())
