"""The sweep's answers as engines take them (experiments.sweep.export), one answer per deployment at
each batch size (experiments.sweep.deployments), outputs of sensible size, bad options refused first."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

import methods
from experiments.sweep import deployments, export
from experiments.sweep import cli
from experiments.sweep import run as sweep
from methods import engines
from experiments.sweep.executor import LocalExecutor
from methods.spec import Setup
from tests.experiments.test_sweep import toy_profile


@pytest.fixture(scope="module")
def toy():
    return toy_profile()


def _setup(profile, method):
    return profile.setups_for(methods.get(method))[0]


def test_sd_maps_exactly_to_every_engine(toy):
    setup = _setup(toy, "sd")
    vllm = export.to_engine("vllm", setup, "sd g5")
    assert vllm.match == "exact" and vllm.settings == {"method": "draft_model", "model": "llama-68m",
                                                       "num_speculative_tokens": 5}
    sglang = export.to_engine("sglang", setup, "sd g5").settings
    assert sglang == {"--speculative-algorithm": "STANDALONE", "--speculative-draft-model-path": "llama-68m",
                      "--speculative-num-steps": 5, "--speculative-eagle-topk": 1,
                      "--speculative-num-draft-tokens": 6}
    hf = export.to_engine("hf", setup, "sd g5").settings
    assert hf["assistant_model"] == "llama-68m" and hf["num_assistant_tokens"] == 5
    assert hf["num_assistant_tokens_schedule"] == "constant" and hf["assistant_confidence_threshold"] == 0.0


def test_every_method_is_mapped_or_listed_with_a_reason(toy):
    for engine in engines.ENGINES:
        for method in methods.names(sweep_only=True):
            setup = _setup(toy, method)
            label = methods.get(method).space(setup).config.iloc[0]
            got = export.to_engine(engine, setup, label)
            assert isinstance(got, (engines.EngineConfig, engines.NoCounterpart)), (engine, method)
            if isinstance(got, engines.NoCounterpart):
                assert got.reason and got.method == method
            else:
                assert got.match in ("exact", "approximate") and (got.match == "exact") == (not got.differs)
    for engine in engines.ENGINES:          # MCSD's candidate tree is never passed off as a chain
        assert isinstance(export.to_engine(engine, _setup(toy, "mcsd"), "mcsd k4x2x1 repl"), engines.NoCounterpart)


def test_a_method_maps_itself_with_its_own_configuration(toy):
    """The toy method reuses sd's mapping (its spec subclasses sd's) with its own draft length; a
    method that maps nothing is listed with a reason, never mapped to something else."""
    from tests.methods import toy_method

    class Bare(toy_method.Toy):
        name, config = "bare", type("BareConfig", (toy_method.ToyConfig,), {"method": "bare"})
        to_engine = methods.MethodSpec.to_engine

    methods.register(toy_method.Toy())
    methods.register(Bare())
    try:
        got = export.to_engine("vllm", _setup(toy, "sd"), "toy d2")
        assert isinstance(got, engines.EngineConfig) and got.settings["num_speculative_tokens"] == 2
        got = export.to_engine("vllm", _setup(toy, "sd"), "bare d2")
        assert isinstance(got, engines.NoCounterpart) and "offers no counterpart of bare" in got.reason
    finally:
        methods.unregister("toy")
        methods.unregister("bare")


def test_coral_router_and_tree(toy):
    setup = _setup(toy, "coral")
    chain = export.to_engine("vllm", setup, "coral g4")
    assert chain.match == "exact" and chain.settings["method"] == "eagle"
    routed = export.to_engine("vllm", setup, "coral g4 N16 top2")
    assert routed.match == "approximate" and "router" in routed.differs
    raw = toy.to_dict()
    raw["drafters"]["eagle"]["tree"] = {"depth": 6, "candidates": 60}
    from calibrate.profile import Profile

    tree = Setup(Profile.from_dict(raw), "eagle", "eagle")
    flags = export.to_engine("sglang", tree, "coral g6").settings
    assert flags["--speculative-eagle-topk"] == 10 and flags["--speculative-num-draft-tokens"] == 61
    assert export.to_engine("vllm", tree, "coral g6").match == "approximate"


def test_vllm_schedule_ranges():
    assert export.vllm_schedule([(4, 3), (1, 4), (2, 4), (8, 0)]) == [[1, 3, 4], [4, 7, 3], [8, 8, 0]]
    assert export.vllm_schedule([(1, 2)]) == [[1, 1, 2]]


def _served(ratios: dict[int, float]) -> pd.DataFrame:
    rows = []
    for batch, ratio in ratios.items():
        base = {"profile": "p", "target": "t", "hardware": "H", "dataset": "d", "temperature": 0.0, "batch": batch,
                "oom": 0, "not_served": "", "ar_throughput_tok_s": 100.0, "heldout_error": 0.05}
        rows.append({**base, "method": "ar", "drafter": "-", "config": "ar", "throughput_tok_s": 100.0,
                     "throughput_ratio": 1.0, "serving_verdict": "-"})
        rows.append({**base, "method": "sd", "drafter": "x", "config": "sd g3", "throughput_tok_s": 100.0 * ratio,
                     "throughput_ratio": ratio, "serving_verdict": "speculate" if ratio > 1.05 else "don't"})
    return pd.DataFrame(rows)


def test_where_speculation_stops_paying():
    served = _served({1: 2.0, 4: 1.3, 16: 0.9, 64: 0.7})
    assert deployments.stops_paying(served)["stops_paying_at"].iat[0] == 16
    best = deployments.best_per_batch(served)
    assert list(best["answer"]) == ["sd g3", "sd g3", "ar", "ar"]
    assert list(best["throughput_tok_s"]) == [200.0, 130.0, 100.0, 100.0]     # the answer's own numbers
    assert np.isnan(deployments.stops_paying(_served({1: 2.0, 8: 1.1}))["stops_paying_at"].iat[0])


def test_one_answer_per_deployment_and_batch(toy):
    opts = sweep.SweepOptions(methods=["sd", "coral"], space={"budget": 8}, rescore=0, batch_sizes=[1, 16], sim_tokens=64)
    result = sweep.run_sweep([toy], opts, LocalExecutor(workers=1, progress=False))
    answers = result.deployments
    assert len(answers) == answers[deployments.DEPLOYMENT + ["batch"]].drop_duplicates().shape[0]
    assert set(answers["batch"]) == {1, 16} and (answers["hardware"] == "A100-80G").all()
    served = result.served
    assert (served["method"] == "ar").sum() == answers.shape[0]      # plain decoding served once per answer
    assert (served.loc[served.method == "ar", "throughput_ratio"] == 1.0).all()
    for _, row in answers.iterrows():       # the best speculative is the fastest served at that batch
        at = served[(served.batch == row.batch) & (served.dataset == row.dataset) & (served.oom == 0)]
        fastest = at[at.method != "ar"].sort_values("throughput_tok_s").iloc[-1]
        assert row.best_speculative == fastest.config
        answer = fastest if fastest.throughput_ratio > 1 else at[at.method == "ar"].iloc[0]
        assert row.throughput_tok_s == answer.throughput_tok_s and row.tpot_ms == answer.tpot_ms
    # the configurations served at batch 16 are the closed form's best when scored at batch 16
    big = sweep._score_tables([toy], opts, LocalExecutor(workers=1, progress=False), 16, [])
    want = big["sd"].sort_values("speedup", ascending=False).config.iloc[0]
    assert want in set(served[(served.batch == 16) & (served.method == "sd")].config)


def test_cli_exports_small_tables_and_report(tmp_path, toy):
    path = toy.save(tmp_path / "toy.json")
    out = tmp_path / "out"
    code = cli.main(["--profile", str(path), "--methods", "sd,mcsd,lookahead", "--budget", "8", "--rescore", "0",
                       "--batch-sizes", "1,32", "--sim-tokens", "64", "--export", "vllm,sglang,hf", "--top", "3",
                       "--out", str(out), "--workers", "1", "--no-progress"])
    assert code == 0
    vllm = json.loads(next(out.glob("vllm_*.json")).read_text())
    assert vllm["method"] in ("draft_model", "ngram") and vllm["num_speculative_tokens"] >= 1
    schedule = vllm["num_speculative_tokens_per_batch_size"]
    assert schedule[0][0] == 1 and schedule[-1][1] == 32
    assert max(k for _, _, k in schedule) == vllm["num_speculative_tokens"]
    assert next(out.glob("sglang_*.txt")).read_text().startswith("--speculative-algorithm ")
    assert "num_assistant_tokens" in json.loads(next(out.glob("hf_*.json")).read_text()) \
        or "prompt_lookup_num_tokens" in json.loads(next(out.glob("hf_*.json")).read_text())
    notes = (out / "exports.md").read_text()
    assert "no counterpart: mcsd" in notes
    top = pd.read_csv(out / "tables/mcsd_top3.csv")
    full = pd.read_parquet(out / "tables/mcsd.parquet")
    assert len(top) == 3 and len(full) > 3 and (top.config.to_numpy() == full.config.to_numpy()[:3]).all()
    assert not (out / "tables/mcsd.csv").exists()
    assert pq.ParquetFile(out / "tables/mcsd.parquet").metadata.row_group(0).column(0).compression == "ZSTD"
    report = (out / "report.md").read_text()
    assert "## Answer per deployment" in report and "Best configuration overall" not in report
    assert "`heldout_error`" in report and ("stops paying" in report or "pays at every batch" in report)
    answers = pd.read_csv(out / "deployments.csv")
    assert set(answers.batch) == {1, 32} and "stops_paying_at" in answers and "tpot_ms" in answers


@pytest.mark.parametrize("args,message", [
    (["--batch-sizes", "1,x"], "--batch-sizes: 'x' in '1,x' is not a batch size (allowed: comma-separated integers >= 1"),
    (["--batch-sizes", "0,4"], "--batch-sizes: '0'"),
    (["--export", "vllm,trt"], "--export: unknown engine 'trt' in 'vllm,trt' (allowed: vllm, sglang, hf)"),
    (["--export", ","], "--export: no engine in ','"),
    (["--top", "0"], "--top must be at least 1, got 0"),
])
def test_bad_new_options_are_refused_before_any_work(args, message, capsys):
    # a profile that does not exist: the option is checked first, so its error is the one shown
    assert cli.main(args + ["--profile", "/nonexistent/p.json", "--out", "/tmp/never-written"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and message in err and "\n" not in err
