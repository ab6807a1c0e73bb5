"""A replaying method's acceptance fitted again on a workload's own greedy answers
(`calibrate.answers`): priced exactly as replayed at the lengths the answers reach, the prompts kept
as calibration prompts, bad input named in one line."""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

import methods
from calibrate import answers
from common.bundled import bundled
from common.errors import InputError
from fidelity import lengths
from methods.match_chain import chain_at
from profiles.profile import Profile
from profiles.record import Record
from runtime.models import load_model
from simulator.stream import prepare_stream

CONFIGS = [methods.get("prompt_lookup").parse(methods.parse_label(label).to_dict())
           for label in ("prompt_lookup g3 nmin2 nmax3", "prompt_lookup g6 nmin1 nmax4")]
PROFILE = str(bundled("profiles", "smollm2-135m-cpu.json"))


def copying_answers(seed: int, prompts: int = 4, length: int = 96):
    """Prompts of random tokens whose answers copy stretches of them between free tokens."""
    rng = np.random.default_rng(seed)
    ins, outs = {}, {}
    for i in range(prompts):
        prompt = rng.integers(0, 500, 120).tolist()
        answer = []
        while len(answer) < length:
            start = int(rng.integers(0, 100))
            answer += prompt[start:start + int(rng.integers(2, 12))] + rng.integers(500, 900, 3).tolist()
        ins[f"libedit/{seed}-{i}"], outs[f"libedit/{seed}-{i}"] = prompt, answer[:length]
    return ins, outs


def test_an_entry_fitted_on_answers_prices_their_replay_at_every_length_they_reach():
    profile = Profile.load(PROFILE)
    prompts, outputs = copying_answers(4, prompts=6)
    outputs["libedit/4-0"] = outputs["libedit/4-0"][:50]          # an answer that ended first
    fitted = answers.fitted_on_answers(profile, "lib-edit", prompts, outputs, 96)
    part = fitted.acceptance["prompt_lookup/lib-edit"].part("prompt_lookup")
    assert sorted(part.length_shape) == [32, 64, 96] and part.replayed_new_tokens == 96
    table = lengths.replayed(prompts, outputs, CONFIGS, [32, 64, 96]).set_index(["config", "length"])["replayed"]
    for n in (32, 64, 96):
        assert lengths.predicted(fitted, "lib-edit", CONFIGS, n, 300.0) == pytest.approx(
            [table[(c.label, n)] for c in CONFIGS], rel=1e-4)
    # the other datasets' entries and the latency are the Profile's own
    assert fitted.acceptance["prompt_lookup/code-edit"] == profile.acceptance["prompt_lookup/code-edit"]
    assert fitted.latency == profile.latency


def test_the_simulator_draws_the_tokens_per_step_the_closed_form_prices_at_each_length():
    """The bundled entry (real answers' replay at 32 tokens) given a shape that copies less as answers
    grow: the simulator's chain, refitted at the length it simulates, gives the closed form's tokens per
    step there (it was refitted at the replay's length, and carried by the chain alone)."""
    profile = Profile.load(PROFILE)
    spec, key = methods.get("prompt_lookup"), "prompt_lookup/lib-edit"
    entry = profile.acceptance[key]
    part = entry.part(spec.name)
    shape = {n: {label: (1 + (t - 1) * f, s * f) for label, (t, s) in part.replayed.items()}
             for n, f in ((32, 1.0), (64, 0.85), (128, 0.7))}
    shaped = replace(part, length_shape=shape, length_prompts=6)
    profile = replace(profile, acceptance={**profile.acceptance, key: replace(entry, own=Record({**entry.own,
                                                                                               spec.name: shaped}))})
    for n in (32, 64, 100):
        closed = lengths.predicted(profile, "lib-edit", CONFIGS, n, 300.0)
        streams = [prepare_stream(profile, spec.name, {**c.to_dict(), "dataset": "lib-edit", "temperature": 0.0},
                                  n_tokens=n + 1) for c in CONFIGS]       # the prefill emits one token more
        drawn = [float(chain_at(stream.step.sampler.part, c.n_min, c.n_max, c.gamma, n)[0][0])
                 for stream, c in zip(streams, CONFIGS)]
        assert drawn == pytest.approx(closed, rel=2e-3)
    assert closed[0] < lengths.predicted(profile, "lib-edit", CONFIGS[:1], 32, 300.0)[0] * 0.95   # the shape moved it


def test_a_dataset_of_the_profile_without_a_greedy_entry_is_named_in_one_line():
    profile = Profile.load(PROFILE)
    lacking = replace(profile, acceptance={k: a for k, a in profile.acceptance.items() if k != "prompt_lookup/lib-edit"})
    prompts, outputs = copying_answers(3)
    spec = methods.get("prompt_lookup")
    with pytest.raises(InputError, match="no greedy prompt_lookup entry of 'lib-edit'"):
        answers.refit(lacking, spec, "lib-edit", prompts, outputs, CONFIGS, "toy answers")
    with pytest.raises(InputError, match="no greedy prompt_lookup entry of 'gsm8k'"):
        answers.with_length_shape(profile, spec, "gsm8k", prompts, outputs, [32, 96])


def test_a_workload_new_to_the_profile_becomes_a_dataset_of_its_own():
    """A prompt set none of the Profile's datasets names (one's own JSONL, say) gets each replaying
    method's entry fitted from its answers alone, priced as they replay; every other method has none."""
    profile = Profile.load(PROFILE)
    prompts, outputs = copying_answers(5, prompts=6)
    fitted = answers.fitted_on_answers(profile, "mine.jsonl", prompts, outputs, 96)
    assert set(fitted.datasets()) == set(profile.datasets()) | {"mine.jsonl"}
    assert [k for k in fitted.acceptance if k not in profile.acceptance] == ["prompt_lookup/mine.jsonl"]
    table = lengths.replayed(prompts, outputs, CONFIGS, [64]).set_index("config")["replayed"]
    assert lengths.predicted(fitted, "mine.jsonl", CONFIGS, 64, 300.0) == pytest.approx(
        [table[c.label] for c in CONFIGS], rel=1e-4)
    assert fitted.acceptance_for(None, temperature=0.0, dataset="mine.jsonl", needs="lookahead") == []
    assert {k: a for k, a in fitted.acceptance.items() if k in profile.acceptance} == profile.acceptance
    # its own workload: the answers' lengths, and how far a prompt strays, measured on its 6 prompts
    spread, measured_on = fitted.prompt_spread("mine.jsonl", "prompt_lookup")
    assert spread > 0 and measured_on == 6 and fitted.workload["mine.jsonl"].new_tokens == 96
    assert fitted.workload["mine.jsonl"].prompt_tokens == 120
    assert {d: w for d, w in fitted.workload.items() if d in profile.workload} == profile.workload


def test_the_log_says_how_well_the_answers_know_their_workload():
    """Prompts that copy alike know their mean from one prompt; prompts that copy unlike need many."""
    prompts, outputs = copying_answers(6, prompts=6)
    fitted = answers.fitted_on_answers(Profile.load(PROFILE), "mine", prompts, outputs, 96)
    line = answers.sampling_error(fitted, "mine", prompts, outputs)
    assert line.startswith("mine: prompt_lookup: one prompt's seconds per token strays by ")
    assert "the mean of these 6 is known to +-" in line
    many = int(line.rsplit("about ", 1)[1].split()[0].replace(",", ""))
    alike = {f"p{i}": prompts["libedit/6-0"] for i in range(6)}, {f"p{i}": outputs["libedit/6-0"] for i in range(6)}
    assert "strays by 0% (sd)" in answers.sampling_error(fitted, "mine", *alike) and "needs about 1 prompt(s)" in \
        answers.sampling_error(fitted, "mine", *alike)
    assert many > 1
    few = {k: prompts[k] for k in list(prompts)[:2]}, {k: outputs[k] for k in list(prompts)[:2]}
    assert answers.sampling_error(fitted, "mine", *few) == "mine: too few prompts to tell how far one strays"


def test_answers_of_a_shorter_run_are_not_reused(tmp_path):
    rows = [{"prompt_set": "libedit", "prompt_id": f"libedit/{i}", "pos": p, "token": p, "max_new_tokens": n}
            for i, n in ((0, 64), (1, 256)) for p in range(3)]
    pd.DataFrame(rows).to_parquet(tmp_path / "a.parquet")
    kept = answers.read_answers([tmp_path / "a.parquet"], 128)
    assert set(kept["prompt_id"]) == {"libedit/1"}
    pd.DataFrame(rows).drop(columns="token").to_parquet(tmp_path / "b.parquet")
    with pytest.raises(InputError, match="lacks column 'token'"):
        answers.read_answers([tmp_path / "b.parquet"], 128)


def test_answers_held_are_read_back_and_only_the_rest_generated(tmp_path):
    model = load_model("tiny").model
    encoded = [("libedit", "libedit/0", [1, 2, 3, 4]), ("libedit", "libedit/1", [5, 6, 7])]
    held = pd.DataFrame([{"prompt_set": "libedit", "prompt_id": "libedit/0", "pos": p, "token": 9, "max_new_tokens": 6}
                         for p in range(6)])
    held.to_parquet(tmp_path / "held.parquet")
    frame = answers.collect_answers(model, None, encoded, 6, answers.read_answers([tmp_path / "held.parquet"], 6))
    got = answers.answers_by_prompt(frame)
    assert got["libedit/0"] == [9] * 6                                  # read back, not generated again
    fresh = answers.greedy_answers(model, None, encoded[1:], 6)
    assert got["libedit/1"] == answers.answers_by_prompt(fresh)["libedit/1"] and len(got["libedit/1"]) == 6


@pytest.mark.parametrize("argv, message", [
    (["--prompts", "libedit:140-140,codeedit:20-21"], "one prompt of dataset 'lib-edit'"),
    (["--prompts", "gsm8k:1-2"], "prompt set 'gsm8k'"),
    (["--prompts", "libedit:140-141", "--max-new-tokens", "0"], "--max-new-tokens must be >= 1"),
    (["--prompts", "libedit:140-141", "--out", PROFILE], "is the source Profile"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, argv, message):
    out = tmp_path / "p.json"
    base = ["--profile", PROFILE, "--target", "smollm2", "--out", str(out)]
    assert answers.main(base + argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not out.exists()


@pytest.mark.slow
def test_the_command_answers_fits_and_keeps_the_prompts_as_calibration_ones(tmp_path, capsys):
    out, saved = tmp_path / "p.json", tmp_path / "answers.parquet"
    argv = ["--profile", PROFILE, "--target", "smollm2", "--prompts", "libedit:140-141", "--max-new-tokens", "40",
            "--threads", "1", "--save-answers", str(saved)]
    assert answers.main(argv + ["--out", str(out)]) == 0
    fitted, source = Profile.load(out), Profile.load(PROFILE)
    assert {"libedit/139", "libedit/140"} <= set(fitted.provenance.calibration_prompts)
    assert set(source.provenance.calibration_prompts) <= set(fitted.provenance.calibration_prompts)
    refits = json.loads(out.read_text())["provenance"][answers.REFITS]
    assert refits[-1]["prompts"] == ["libedit/139", "libedit/140"] and refits[-1]["datasets"] == ["lib-edit"]
    part = fitted.acceptance["prompt_lookup/lib-edit"].part("prompt_lookup")
    assert sorted(part.length_shape) == [32, 40] and part.length_prompts == 2
    assert fitted.acceptance["prompt_lookup/lib-edit"] != source.acceptance["prompt_lookup/lib-edit"]
    # the saved answers are read back: nothing generated, the same Profile
    assert answers.main(argv + ["--answers", str(saved), "--out", str(tmp_path / "q.json")]) == 0
    assert "2 answer(s) read back, 0 to generate" in capsys.readouterr().out
    again = json.loads((tmp_path / "q.json").read_text())["acceptance"]
    assert again == json.loads(out.read_text())["acceptance"]
