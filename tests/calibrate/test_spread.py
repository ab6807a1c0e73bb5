"""How far one prompt's speed strays from its dataset's: fitted from StepTraces with each step priced by
the Profile (`calibrate.spread.prompt_spreads`), recorded in a Profile (`calibrate.spread`), read back typed."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from calibrate import spread
from calibrate.engine import StepRun, workload
from calibrate.spread import priced_seconds, prompt_spreads
from common.bundled import bundled
from common.errors import InputError
from profiles.profile import Profile
from traces.schema import RunMetadata, read_trace, write_trace

PROFILE = Profile.load(bundled("profiles", "smollm2-135m-cpu.json"))


def steps(method: str, per_prompt: dict[str, list[int]], run: str = "r", config: dict | None = None,
          verify=None, ctx=None) -> pd.DataFrame:
    """StepTrace rows: `verify` tokens per step (default: what the step accepted, plus one), each at
    context `ctx` (default: 50 + its step)."""
    rows = [{"run_id": run, "method": method, "prompt_id": p, "step": i, "ctx_len": 50 + i if ctx is None else ctx,
             "accepted": a, "draft_forwards": 1 if method == "sd" else 0,
             "verify_tokens": (a + 1 if verify is None else verify(p)), "config": json.dumps(config or {})}
            for p, accepted in per_prompt.items() for i, a in enumerate(accepted)]
    return pd.DataFrame(rows)


def test_the_spread_is_the_prompts_relative_deviation_of_seconds_per_token_per_unit_of_gain():
    """Steps of one width at one context cost alike: a prompt's seconds per token is that cost over its
    tokens per step, and the spread is theirs relative, over the share the drafts add (T - 1) / T."""
    prompts = {"a": [1, 1, 1, 1], "b": [2, 2, 2, 2], "c": [3, 3, 3, 3], "d": [2, 2, 2, 2]}
    chain = steps("sd", prompts, config={"gamma": 2}, verify=lambda p: 3, ctx=60)
    got = prompt_spreads(PROFILE, pd.concat([chain, steps("ar", {p: [1] * 4 for p in prompts}, "plain")]), "mt-bench")
    per_token = 1 / np.array([1.0, 2.0, 3.0, 2.0])
    assert got == {"prompt_spread": {"sd": round(per_token.std(ddof=1) / per_token.mean() / (1 / 2), 4)},
                   "spread_prompts": 4}
    # three prompts say nothing; nor does plain decoding
    assert prompt_spreads(PROFILE, steps("sd", {"a": [1, 2], "b": [2, 2], "c": [3, 1]}, config={"gamma": 2}),
                          "mt-bench") == {}


def test_a_prompt_that_verifies_wider_strays_though_it_commits_as_many_tokens():
    """Prompt lookup on four prompts of 2 tokens a step: two verify 3 tokens a step, two verify 11.
    Their tokens per step agree; their seconds per token do not, by what the Profile prices the widths."""
    prompts = {p: [2] * 6 for p in "abcd"}
    config = {"gamma": 10, "n_min": 1, "n_max": 3}
    run = steps("prompt_lookup", prompts, config=config, verify=lambda p: 3 if p in "ab" else 11)
    seconds = priced_seconds(PROFILE, run, "lib-edit")
    assert seconds[run["verify_tokens"].to_numpy() == 11].min() > seconds[run["verify_tokens"].to_numpy() == 3].max()
    per_token = run.assign(s=seconds).groupby("prompt_id")["s"].sum() / 12
    got = prompt_spreads(PROFILE, run, "lib-edit")["prompt_spread"]["prompt_lookup"]
    assert got > 0 and got == round(per_token.std(ddof=1) / per_token.mean() / (1 / 2), 4)


def test_the_workload_holds_the_lengths_and_the_profile_reads_a_spread_back():
    frame = steps("sd", {"a": [1, 2], "b": [2, 2], "c": [3, 1], "d": [1, 1]}, config={"gamma": 2})
    got = workload([StepRun(frame, "vanilla", "mt-bench")])["mt-bench"]
    assert set(got) == {"prompt_tokens", "new_tokens"}
    got.update(prompt_spreads(PROFILE, frame, "mt-bench"))
    profile = Profile.from_dict({**PROFILE.to_dict(), "workload": {"mt-bench": got}})
    assert profile.prompt_spread("mt-bench", "sd") == (got["prompt_spread"]["sd"], 4)
    assert profile.prompt_spread("mt-bench", "coral") is None and profile.prompt_spread("lib-edit", "sd") is None
    assert Profile.from_dict(profile.to_dict()).to_dict() == profile.to_dict()


@pytest.mark.parametrize("bad, message", [
    ({"prompt_spread": {"sd": 0.3}}, "spread_prompts must be a whole number >= 2"),
    ({"prompt_spread": {"sd": -0.3}, "spread_prompts": 4}, "prompt_spread.sd must be a number >= 0"),
    ({"prompt_spread": [0.3], "spread_prompts": 4}, "prompt_spread must be an object"),
])
def test_a_bad_spread_is_refused_in_one_line(bad, message):
    base = Profile.load(bundled("profiles", "smollm2-135m-cpu.json")).to_dict()
    with pytest.raises(InputError, match=message):
        Profile.from_dict({**base, "workload": {"mt-bench": {"prompt_tokens": 60.0, "new_tokens": 32.0, **bad}}})


def _trace(path, dataset: str, prompts: list[str]) -> None:
    _write(path, dataset, {p: [1 + i % 3, 2, 1, 3] for i, p in enumerate(prompts)})


def _write(path, dataset: str, per_prompt: dict[str, list[int]]) -> None:
    frame = steps("prompt_lookup", per_prompt, config={"gamma": 3, "n_min": 2, "n_max": 3}, verify=lambda p: 4)
    frame = frame.assign(pair=-1, draft_s=0.0, verify_s=0.03, overhead_s=0.001)
    frame["accept_mask"] = [[True] * (a - 1) + [False] for a in frame["accepted"]]
    frame["confidences"] = [[] for _ in range(len(frame))]
    write_trace(path, frame, RunMetadata(kind="step", dataset=dataset, models={"target": "smollm2-135m"}))


def test_the_command_records_the_spread_and_refuses_held_out_prompts(tmp_path, capsys):
    source = Profile.load(bundled("profiles", "smollm2-135m-cpu.json"))
    calibrated = [p for p in source.provenance.calibration_prompts if p.startswith("libedit/")][:5]
    _trace(tmp_path / "steps_pl_lib-edit.parquet", "lib-edit", calibrated)
    out = tmp_path / "p.json"
    assert spread.main(["--profile", str(bundled("profiles", "smollm2-135m-cpu.json")), "--traces", str(tmp_path),
                        "--out", str(out)]) == 0
    moved = Profile.load(out)
    assert moved.prompt_spread("lib-edit", "prompt_lookup")[1] == 5
    unmoved = lambda p: {k: v for k, v in p.to_dict().items() if k != "workload"}      # noqa: E731
    assert unmoved(moved) == unmoved(source)
    _trace(tmp_path / "steps_pl_held.parquet", "lib-edit", ["libedit/99", *calibrated])
    assert spread.main(["--profile", str(out), "--traces", str(tmp_path)]) == 2
    assert "not calibrated on (libedit/99" in capsys.readouterr().err
    assert Profile.load(out).to_dict() == moved.to_dict()       # refused: untouched


def test_runs_of_two_files_are_two_runs_even_under_one_run_id(tmp_path):
    """A calibration run on two prompts and a later run of the same configuration on five share their
    run ids ("sd g1 @vanilla#0"): the spread is the five-prompt run's, not the two merged."""
    source = Profile.load(bundled("profiles", "smollm2-135m-cpu.json"))
    calibrated = [p for p in source.provenance.calibration_prompts if p.startswith("libedit/")][:5]
    _trace(tmp_path / "steps_a.parquet", "lib-edit", calibrated)
    alone, _ = spread.with_spreads(source, [tmp_path / "steps_a.parquet"])
    _write(tmp_path / "steps_b.parquet", "lib-edit", {calibrated[0]: [4, 4, 4, 4, 4, 4], calibrated[1]: [1, 1]})
    both, _ = spread.with_spreads(source, [tmp_path / "steps_a.parquet", tmp_path / "steps_b.parquet"])
    assert both.prompt_spread("lib-edit", "prompt_lookup") == alone.prompt_spread("lib-edit", "prompt_lookup")


def test_a_token_trace_replays_into_steps_of_each_method_its_draft_model_runs():
    """The bundled vanilla TokenTrace of lib-edit (48 calibration prompts): sd, mcsd and cape replay from it
    on the vanilla drafter; every output token is committed once, sd g4 verifies 5 tokens a step."""
    path = bundled("traces", "smollm2-cpu", "tokens_vanilla_lib-edit.parquet")
    frame, meta = read_trace(path, kind="token")
    steps = spread.replayed_token_steps(PROFILE, frame, "lib-edit", "vanilla")
    assert set(steps["method"]) == {"sd", "mcsd", "cape"}
    sd4 = steps[steps["run_id"] == "sd g4#tokens"]
    assert (sd4.groupby("prompt_id")["accepted"].sum() == frame.groupby("prompt_id").size()).all()
    assert (sd4["verify_tokens"] == 5).all() and (sd4["draft_forwards"] <= 4).all()
    assert sd4["ctx_len"].min() == pytest.approx(PROFILE.workload["lib-edit"].prompt_tokens)
    moved, recorded = spread.with_spreads(PROFILE, [path])
    assert recorded["lib-edit"]["spread_prompts"] == 48
    assert set(recorded["lib-edit"]["prompt_spread"]) == {"sd", "mcsd", "cape"}
    assert moved.prompt_spread("lib-edit", "sd") == (recorded["lib-edit"]["prompt_spread"]["sd"], 48)
    assert spread.main(["--profile", "p.json", "--traces", str(path.parent), "--target", "smollm2"]) == 2
