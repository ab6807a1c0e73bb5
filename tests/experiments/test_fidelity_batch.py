"""experiments.fidelity --batch and fidelity.batch: refusals before anything is written, the padded context,
predictions at batch 1 equal to the unbatched ones, batch runs paired and rated per batch, the crossover
and best-K read off the curves, and a finished batch run judged, reported and pooled per batch."""
from __future__ import annotations

import json
import shutil
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch

import methods
import runtime.engine.batch as batch_engine
from campaigns.measure import Bench, Candidate, rates
from common.bundled import bundled
from common.errors import InputError
from experiments import fidelity as fidelity_cli
from fidelity import batch as fb
from fidelity import run as fidelity_run
from fidelity.report import compare
from profiles.profile import Profile
from runtime.models import tiny_model
from traces import schema


@pytest.fixture(scope="module")
def profile() -> Profile:
    return Profile.load(bundled("profiles", "smollm2-135m-cpu.json"))


def test_bad_batches_are_refused_before_anything_is_written(tmp_path, capsys, profile):
    out = tmp_path / "o"
    argv = ["--profile", str(bundled("profiles", "smollm2-135m-cpu.json")), "--target", "smollm2", "--out", str(out)]
    assert fidelity_cli.main(argv + ["--prompts", "libedit:59-60", "--batch", "1,0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "error: --batch needs integers >= 1, got '1,0'" and not out.exists()
    assert fidelity_cli.main(argv + ["--prompts", "libedit:59-60", "--batch", "2", "--sim-repeats", "0"]) == 2
    assert capsys.readouterr().err.strip() == "error: --sim-repeats must be >= 1, got 0" and not out.exists()
    assert fidelity_cli.main(argv + ["--prompts", "libedit:59-60,mtbench:13-13", "--batch", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --batch decodes the prompts as one request mix of one dataset") and not out.exists()
    assert len(err.splitlines()) == 1


@pytest.mark.slow
def test_a_batch_over_the_cache_budget_is_refused_by_the_command_before_anything_is_written(tmp_path, capsys,
                                                                                             monkeypatch):
    monkeypatch.setattr(batch_engine, "memory_available", lambda device: 64 * 2 ** 20)     # batch 1 fits, 64 does not
    configs = tmp_path / "configs.txt"
    configs.write_text("ar\n")
    out = tmp_path / "o"
    argv = ["--profile", str(bundled("profiles", "smollm2-135m-cpu.json")), "--target", "smollm2", "--out", str(out),
            "--prompts", "libedit:59-60", "--configs", str(configs), "--max-new-tokens", "8", "--threads", "1"]
    assert fidelity_cli.main(argv + ["--batch", "1,64"]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: batch 64 at a context of ")
    assert errors[0].endswith("over the cache budget of 64.0 MiB") and not out.exists()


class _TinyBench:
    def __init__(self):
        self.target = type("T", (), {"model": tiny_model(0, num_layers=2)})()

    def _drafter_argument(self, cand):
        return None


def test_a_batch_over_the_cache_budget_is_refused_in_one_line(monkeypatch):
    monkeypatch.setattr(batch_engine, "memory_available", lambda device: 2 ** 20)
    bench = _TinyBench()
    fb.check_cache_budget(bench, [Candidate(methods.parse_label("ar"))], [1, 2], 64)
    with pytest.raises(InputError) as refused:
        fb.check_cache_budget(bench, [Candidate(methods.parse_label("ar"))], [1, 4096], 64)
    assert str(refused.value).startswith("batch 4096 at a context of 64 tokens needs ") and "over the cache budget" in str(refused.value)


def test_the_padded_context_is_the_expected_longest_of_b_prompts():
    lengths = [10, 20, 30, 40]
    assert fb.padded_context(lengths, 1, 8) == pytest.approx(25 + 4)
    assert fb.padded_context(lengths, 4, 8) == pytest.approx(40 + 4)
    assert fb.padded_context(lengths, 9, 0) == pytest.approx(40)
    # B = 2: the longest of a pair is the 2nd, 3rd or 4th length with 1, 2, 3 of the 6 pairs
    assert fb.padded_context(lengths, 2, 0) == pytest.approx((20 + 2 * 30 + 3 * 40) / 6)


def test_batch_one_predicts_what_one_request_at_a_time_predicts():
    profile = Profile.load(bundled("profiles", "batch/smollm2-135m-cpu-batch-drafters.json"))   # measured at 1-32
    padded = replace(profile, engine=replace(profile.engine, batching="padded"))
    cands = [Candidate(methods.parse_label("ar")), Candidate(methods.parse_label("prompt_lookup g5 nmin2 nmax3")),
             Candidate(methods.parse_label("sd g1"), "vanilla")]
    lengths = [200, 300]
    batched = fb.predict_batches(padded, cands, "lib-edit", lengths, [1, 4], 32, 0, sim_repeats=3)
    single = fidelity_run.predict(profile, cands, "lib-edit", fb.padded_context(lengths, 1, 32), 32, 0, sim_repeats=20)
    one = batched[batched["batch"] == 1].set_index("candidate")
    assert one["predicted_speedup"].to_numpy() == pytest.approx(single.set_index("candidate")["predicted_speedup"]
                                                                .loc[one.index].to_numpy(), rel=1e-9)
    four = batched[batched["batch"] == 4].set_index("candidate")
    assert four.loc["sd g1 @vanilla", "predicted_speedup"] < one.loc["sd g1 @vanilla", "predicted_speedup"]
    assert (batched["ctx_len"] > 0).all() and set(batched["batch"]) == {1, 4}


def _fid(curves: dict[str, tuple[list[float], list[float]]], batches=(1, 2, 4, 8)) -> pd.DataFrame:
    rows = [{"dataset": "d", "candidate": "ar", "method": "ar", "batch": b, "predicted_speedup": 1.0,
             "simulated_speedup": 1.0, "measured_speedup": 1.0} for b in batches]
    for cand, (pred, meas) in curves.items():
        for b, p, m in zip(batches, pred, meas):
            rows.append({"dataset": "d", "candidate": cand, "method": cand.split()[0], "batch": b,
                         "predicted_speedup": p, "simulated_speedup": p, "measured_speedup": m})
    return pd.DataFrame(rows)


def test_crossovers_and_the_best_draft_length_are_read_off_the_curves():
    fid = _fid({"sd g1 @vanilla": ([1.2, 1.1, 0.95, 0.8], [1.15, 1.02, 0.97, 0.7]),
                "sd g3 @vanilla": ([1.3, 0.9, 0.7, 0.5], [1.1, 1.05, 0.8, 0.6]),
                "prompt_lookup g5 nmin2 nmax3": ([2.0, 1.8, 1.5, 1.2], [1.9, 1.7, 1.4, 0.99])})
    cross = fb.crossovers(fid).set_index("curve")
    assert cross.loc["sd g1 @vanilla", "predicted_stops_at"] == 4 and cross.loc["sd g1 @vanilla", "grid_steps"] == 0
    assert cross.loc["sd g3 @vanilla", "predicted_stops_at"] == 2 and cross.loc["sd g3 @vanilla", "measured_stops_at"] == 4
    assert cross.loc["sd g3 @vanilla", "grid_steps"] == 1
    assert cross.loc["prompt_lookup g5 nmin2 nmax3", "predicted_stops_at"] == np.inf
    assert cross.loc["prompt_lookup g5 nmin2 nmax3", "grid_steps"] == 1            # inf is one step past 8
    assert cross.loc["sd", "measured_stops_at"] == 4                                 # the method's best at each batch
    assert cross["measured_pays_again_at"].isna().all()
    k = fb.best_k(fid).set_index("batch")
    assert list(k["predicted_k"]) == [3, 1, 1, 1] and list(k["measured_k"]) == [1, 3, 1, 1]
    assert k.loc[1, "regret"] == pytest.approx(1 - 1.1 / 1.15) and not k.loc[2, "within"] and k.loc[4, "within"]


def test_a_curve_that_pays_again_at_a_larger_batch_says_where():
    """sd g1 on the CPU engine measured 1.09x, 0.73x and 1.15x at batch 2, 4 and 8: it stops at 4 and pays
    again at 8; a curve that stays below after its stop has no such batch."""
    fid = _fid({"sd g1 @vanilla": ([1.25, 0.92, 1.05], [1.09, 0.73, 1.15]),
                "sd g2 @vanilla": ([0.93, 0.86, 0.90], [0.80, 0.80, 0.88])}, batches=(2, 4, 8))
    cross = fb.crossovers(fid).set_index("curve")
    assert cross.loc["sd g1 @vanilla", ["measured_stops_at", "measured_pays_again_at", "predicted_pays_again_at"]
                     ].tolist() == [4, 8, 8]
    assert cross.loc["sd g2 @vanilla", "measured_stops_at"] == 2 and np.isnan(cross.loc["sd g2 @vanilla",
                                                                                        "measured_pays_again_at"])


def test_the_best_draft_length_groups_configurations_that_hold_lists():
    """CAPE's bins and MCSD's tree are lists: a run with them beside sd still finds sd's best K."""
    fid = _fid({"sd g1 @vanilla": ([1.2, 0.9], [1.1, 0.8]), "sd g3 @vanilla": ([1.0, 0.7], [1.2, 0.6]),
                "mcsd k2x2 norepl @vanilla": ([0.9, 0.6], [0.9, 0.5]),
                "cape g1 S44442222111 @vanilla": ([1.0, 0.7], [1.0, 0.6])}, batches=(1, 2))
    k = fb.best_k(fid).set_index("batch")
    assert list(k["predicted_k"]) == [1, 1] and list(k["measured_k"]) == [3, 1] and len(k) == 2


def _tiny_bench() -> Bench:
    torch.set_num_threads(1)
    bench = Bench.__new__(Bench)          # a tiny target, no drafter files
    bench.target = type("T", (), {"model": tiny_model(11, vocab_size=16, num_layers=2, std=1.0)})()
    bench.drafters, bench.drafters_dir, bench.seed, bench.threads, bench.engine, bench.eos = {}, ".", 0, 1, "specsim", None
    bench._drafters, bench._decoders = {}, {}
    return bench


def test_batch_runs_are_paired_and_rated_per_batch():
    bench = _tiny_bench()
    prompts = [("libedit", f"libedit/{i}", [3, 7, 1, 9, 3, 7, 1][: 3 + i]) for i in range(4)]
    cands = [Candidate(methods.parse_label("ar")), Candidate(methods.parse_label("prompt_lookup g3 nmin1 nmax2"))]
    runs, steps = bench.measure_batches(cands, prompts, [1, 2], repeats=2, max_new_tokens=6, log=lambda m: None)
    assert len(runs) == 2 * 2 * 2 and set(runs["batch"]) == {1, 2}
    for pair, g in runs.groupby("pair"):
        assert sorted(g["method"]) == ["ar", "prompt_lookup"] and g["batch"].nunique() == 1
    assert (runs["tokens"] == 4 * 6).all()
    schema.validate(steps.drop(columns=["candidate", "dataset", "repeat", "pair"]), "batch_step")
    assert set(steps["request_id"]) == {p for _, p, _ in prompts}
    per = rates(runs)
    assert set(zip(per["candidate"], per["batch"])) >= {("ar", 1), ("ar", 2)}
    assert (per.loc[per["method"] == "ar", "speedup"] == 1.0).all()
    pred = pd.DataFrame([{"dataset": "libedit", "candidate": c.label, "method": c.method, "batch": b,
                          "predicted_speedup": 1.0, "simulated_speedup": 1.0, "sim_se": 0.0,
                          "predicted_tokens_per_step": 1.0, "predicted_step_s": 0.01, "ctx_len": 10.0}
                         for c in cands for b in (1, 2)])
    fid = compare(pred, runs, 0.0)
    assert len(fid) == 4 and "batch" in fid and (fid["acceptance_se"] == 0).all()


def _batch_run(folder, profile, batches, repeats=2):
    """A finished --batch run in `folder`: predictions of the Profile, runs of a tiny target (lib-edit prompts
    58-61 as experiments.fidelity --batch --prompts libedit:59-62 names them)."""
    cands = [Candidate(methods.parse_label(label)) for label in
             ("ar", "prompt_lookup g3 nmin1 nmax2", "prompt_lookup g5 nmin1 nmax2")]
    prompts = [("lib-edit", f"libedit/{58 + i}", [3, 7, 1, 9, 3, 7, 1, 9][: 4 + i]) for i in range(4)]
    runs, _ = _tiny_bench().measure_batches(cands, prompts, batches, repeats=repeats, max_new_tokens=6,
                                            log=lambda m: None)
    pred = fb.predict_batches(profile, cands, "lib-edit", [len(ids) for _, _, ids in prompts], batches, 6, 0,
                              sim_repeats=2)
    folder.mkdir()
    pred.to_csv(folder / "predictions.csv", index=False)
    runs.to_csv(folder / "runs.csv", index=False)
    (folder / "run.json").write_text(json.dumps({"minutes": 0.1, "prompts": [p for _, p, _ in prompts],
                                                 "prompt_tokens": [len(ids) for _, _, ids in prompts],
                                                 "max_new_tokens": 6, "argv": [
        "--profile", str(bundled("profiles", "smollm2-135m-cpu.json")), "--target", "smollm2", "--prompts", "libedit:59-62",
        "--out", str(folder), "--batch", ",".join(map(str, batches)), "--max-new-tokens", "6", "--threads", "1"]}))


def test_a_batch_run_is_judged_and_reported_per_batch_and_pooled_with_another(tmp_path, capsys, profile):
    out = tmp_path / "run"
    _batch_run(out, profile, [1, 2])
    argv = ["--profile", str(bundled("profiles", "smollm2-135m-cpu.json")), "--target", "smollm2",
            "--prompts", "libedit:59-62", "--out", str(out), "--report-only"]
    assert fidelity_cli.main(argv) == 0, capsys.readouterr().err
    fid = pd.read_csv(out / "fidelity.csv")
    assert set(zip(fid["candidate"], fid["batch"])) == {(c, b) for c in ("ar", "prompt_lookup g3 nmin1 nmax2",
                                                                        "prompt_lookup g5 nmin1 nmax2") for b in (1, 2)}
    assert (fid["runs"] == 1).all() and fid["measured_speedup"].gt(0).all()
    assert "in_interval" in fid and fid["in_interval"].notna().all()     # intervals from the Profile, per batch
    cross, k = pd.read_csv(out / "crossover.csv"), pd.read_csv(out / "best_k.csv")
    assert set(cross["curve"]) == {"prompt_lookup g3 nmin1 nmax2", "prompt_lookup g5 nmin1 nmax2", "prompt_lookup"}
    assert sorted(k["batch"]) == [1, 2] and set(k["predicted_k"]) <= {3, 5}
    text = (out / "report.md").read_text()
    for part in ("## Batches", "- every (configuration, batch): closed form median |error|", "  - batch 2: median",
                 "## Where speculation stops paying (crossover.csv)", "## Best draft length per batch (best_k.csv)",
                 "every batch run paired with plain decoding of the same prompts at the same batch", "| B1 | B2 |"):
        assert part in text, part

    other = tmp_path / "again"
    shutil.copytree(out, other)
    assert fidelity_cli.main(argv + ["--pool", str(other)]) == 0, capsys.readouterr().err
    assert (pd.read_csv(out / "fidelity.csv")["runs"] == 2).all()
    elsewhere = tmp_path / "elsewhere"
    _batch_run(elsewhere, profile, [2], repeats=1)
    assert fidelity_cli.main(argv + ["--pool", str(elsewhere)]) == 2
    assert capsys.readouterr().err.strip() == (f"error: --pool {elsewhere}: measured other configurations than this "
                                               "run; pool only runs of the same command")


def test_a_batch_run_predicted_again_by_its_own_profile_gives_its_predictions(tmp_path, capsys, profile):
    """--report-only --repredict on a batch run: every (configuration, batch) predicted again from the run's
    prompt lengths and batches; by the Profile that predicted it first, the same numbers to the last digit,
    the first kept in predictions_first.csv; by another Profile, other numbers."""
    out = tmp_path / "run"
    _batch_run(out, profile, [1, 2])
    first = pd.read_csv(out / "predictions.csv")
    argv = ["--profile", str(bundled("profiles", "smollm2-135m-cpu.json")), "--target", "smollm2",
            "--prompts", "libedit:59-62", "--out", str(out), "--report-only", "--repredict", "--sim-repeats", "2"]
    assert fidelity_cli.main(argv) == 0, capsys.readouterr().err
    again = pd.read_csv(out / "predictions.csv")
    cols = ["candidate", "batch", "ctx_len", "predicted_speedup", "predicted_tokens_per_step", "simulated_speedup"]
    pd.testing.assert_frame_equal(again[cols], first[cols])
    pd.testing.assert_frame_equal(pd.read_csv(out / "predictions_first.csv")[cols], first[cols])
    assert "predicted_lo" in again and "after the measurement" in (out / "report.md").read_text()
    batch32 = str(bundled("profiles", "batch/smollm2-135m-cpu-batch32.json"))
    assert fidelity_cli.main([*argv[:1], batch32, *argv[2:]]) == 0, capsys.readouterr().err
    other = pd.read_csv(out / "predictions.csv")
    assert not np.allclose(other["predicted_speedup"], first["predicted_speedup"])
