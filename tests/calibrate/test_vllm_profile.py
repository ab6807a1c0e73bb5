"""calibrate.vllm: the grid fit recovers the efficiencies it was made with, the engine fit the terms it was made
with, the study's fit prices a step as its constants say, and the bundled vLLM Profile reads back and prices
with the closed forms. Bad input: one line, exit 2."""
import json

import numpy as np
import pytest

import methods
from calibrate.vllm import facts
from calibrate.vllm.__main__ import main as calibrate_main
from calibrate.vllm.acceptance import eagle_entry
from calibrate.vllm.build import ingested_statistics
from calibrate.vllm.engine import eagle_arch, fit_engine, roofline, target_arch
from calibrate.vllm.grid import GridFit, fit_grid
from calibrate.vllm.study_fit import STUDY_FIT
from common.bundled import bundled
from costmodel.latency import RowSums
from costmodel.params import get_arch
from costmodel.step import RaggedSteps
from profiles.latency import RooflineLatency
from profiles.profile import Profile

TRUE = dict(bw_eff=0.85, flops_eff=0.6, corner=2.0, fixed_s=1e-4, layer_s=1e-4)


def synthetic_grid(path, archs=("llama-68m", "llama-160m", "vicuna-7b", "llama-3-8b")):
    """A graph grid made by the model the fit assumes, with known terms."""
    rows = []
    for arch in archs:
        a = get_arch(arch)
        model = RooflineLatency(arch=a, hardware="H100", dtype="bf16", bw_eff=TRUE["bw_eff"], flops_eff=TRUE["flops_eff"],
                                corner=TRUE["corner"], attention_apart=True)
        for n in (1, 4, 16, 64, 256):
            for batch in (1, 4, 8):
                for ctx in (0, 1024):
                    seconds = float(model.predict(n, ctx, batch)) + TRUE["fixed_s"] + TRUE["layer_s"] * a.n_layers
                    rows.append({"model": f"random:{arch}", "n_tokens": n, "ctx_len": ctx, "batch": batch, "graph_s": seconds})
    path.write_text("\n".join(json.dumps(r) for r in rows))
    return path


def test_the_grid_fit_recovers_the_terms_it_was_made_with(tmp_path):
    fit = fit_grid(synthetic_grid(tmp_path / "grid.jsonl"))
    assert fit.bw_eff == pytest.approx(TRUE["bw_eff"], rel=1e-3)
    assert fit.flops_eff == pytest.approx(TRUE["flops_eff"], rel=1e-2)
    assert fit.corner == pytest.approx(TRUE["corner"], rel=2e-2)
    assert fit.layer_s == pytest.approx(TRUE["layer_s"], rel=1e-3) and not fit.warnings


def test_a_grid_without_the_target_is_refused_in_one_line(tmp_path):
    with pytest.raises(Exception, match="no rows of llama-3-8b"):
        fit_grid(synthetic_grid(tmp_path / "grid.jsonl", archs=("llama-68m", "vicuna-7b")))


def test_the_engine_fit_recovers_the_eagle_terms_it_was_made_with():
    grid = GridFit(0.9, 0.7, 1.1, 1e-4, 0.9)
    speculation_s, launch_s, sweep = 1.2e-3, 1.0e-3, facts.EAGLE_SWEEP
    target, drafter = roofline(target_arch(), grid, "t"), roofline(eagle_arch(), grid, "d", launch_s)
    overhead = sweep.plain_tpot_s - float(target.predict(1, sweep.mean_ctx)) - facts.HOST_PER_ROW_S
    steps = [float(target.predict(k + 1, sweep.mean_ctx)) + overhead + facts.HOST_PER_ROW_S + speculation_s
             + float(drafter.predict_rows(RowSums.of([a], sweep.mean_ctx, logits=1.0)))
             + (k - 1) * float(drafter.predict(1, sweep.mean_ctx + a)) for k, a in zip(sweep.k, sweep.acceptance_length)]
    made = facts.EagleSweep(tpot_s=tuple(s / a for s, a in zip(steps, sweep.acceptance_length)))
    fit = fit_engine(grid, made)
    assert fit.record["speculation_s"] == pytest.approx(speculation_s, rel=1e-3)
    assert fit.record["drafter_launch_s"] == pytest.approx(launch_s, rel=1e-3)
    assert fit.calibrations["coral"].speculation_s == pytest.approx(speculation_s, rel=1e-3) and not fit.warnings


def test_the_study_fit_prices_a_step_as_its_constants_say():
    verify = RowSums.of([[4], [4]], [[100], [300]], logits=[[4], [4]])         # two rows, one step
    first = RowSums.of([[2], [3]], [[100], [300]], logits=[[1], [1]])
    steps = RaggedSteps(verify, np.array([2.0]), np.array([400.0]), (first,))
    forward = STUDY_FIT.target_c_fixed + 8 * STUDY_FIT.target_c_compute + 400 * STUDY_FIT.target_c_kv
    eagle = STUDY_FIT.draft_c_fixed + 400 * STUDY_FIT.draft_c_kv + 4 * STUDY_FIT.draft_c_num_spec_tokens
    overhead = STUDY_FIT.overhead_constant_per_step
    assert STUDY_FIT.step_seconds(steps, "eagle", 3)[0] == pytest.approx(forward + eagle + overhead)
    assert STUDY_FIT.step_seconds(steps, "ngram", 3)[0] == pytest.approx(forward * 1.005875 + overhead)
    assert STUDY_FIT.step_seconds(steps, "plain", 0)[0] == pytest.approx(forward + overhead)


def test_the_bundled_profile_reads_back_and_the_closed_forms_price_it():
    profile = Profile.load(bundled("profiles", "llama-3.1-8b-h100-vllm.json"))
    assert profile.datasets() == ["cnn", "gsm8k", "instructcoder", "sharegpt"]
    assert profile.drafter("eagle3").draft_vocab == facts.EAGLE_DRAFT_VOCAB
    forward = float(profile.latency_model(facts.TARGET).predict(1, 300))
    assert 4.5e-3 < forward < 7.07e-3                         # above the HBM floor, below the published TPOT
    for method, label, low, high in (("coral", "coral g3", 2.2, 2.5), ("prompt_lookup", "prompt_lookup g3 nmin3 nmax7", 1.1, 1.25)):
        spec = methods.get(method)
        setup = profile.setups_for(spec, dataset="gsm8k")[0]
        tokens = float(spec.expected_tokens(setup, spec.frame_of([spec.parse(label)]))[0])
        assert low < tokens < high, (label, tokens)


def test_a_data_folder_without_the_files_is_one_line_and_exit_2(tmp_path, capsys):
    (tmp_path / "combined_gsm8k.jsonl").write_text("")
    assert calibrate_main(["--data", str(tmp_path), "--out", str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: data folder") and "combined_cnn.jsonl" in err and "\n" not in err
    assert not (tmp_path / "p.json").exists()


def test_eagle_entries_carry_the_ingested_betas_at_each_draft_length():

    summary = ingested_statistics()["datasets"]["cnn"]
    entry = eagle_entry("cnn", summary)
    by_k = summary["drafters"]["eagle"]["by_k"]
    assert entry["alpha_by_position_at_gamma"]["3"] == by_k["beta"][by_k["k"].index(3)]
    assert entry["alpha"] == by_k["beta"][0][0] and entry["drafter"] == "eagle3"
