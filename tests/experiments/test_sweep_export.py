"""The sweep's answers as engines take them (sweep.export), one answer per deployment at
each batch size (sweep.deployments), outputs of sensible size, bad options refused first."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

import methods
from sweep import deployments, export
from experiments import sweep as cli
from sweep import run as sweep
from methods import engines
from sweep.executor import LocalExecutor
from common.errors import InputError
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
    assert "draft_model" in vllm.requires
    sglang = export.to_engine("sglang", setup, "sd g5")
    assert sglang.settings == {"--speculative-algorithm": "STANDALONE", "--speculative-draft-model-path": "llama-68m",
                               "--speculative-num-steps": 5, "--speculative-eagle-topk": 1,
                               "--speculative-num-draft-tokens": 6}
    assert "STANDALONE" in sglang.requires
    hf = export.to_engine("hf", setup, "sd g5")          # the draft length lives on the assistant, not generate()
    assert hf.settings == {} and hf.models == ("llama-68m",) and "4.45" in hf.requires
    assert hf.generation_config == {"assistant": {"num_assistant_tokens": 5, "num_assistant_tokens_schedule": "constant",
                                                  "assistant_confidence_threshold": 0.0}}


def _entry(toy, engine, label, method, temperature=0.0, batches=(1,), schedule=None):
    """A plan() entry for one configuration, as write_exports takes it."""
    deployment = {"profile": "toy", "target": "vicuna-7b", "hardware": "A100-80G", "dataset": "mt-bench",
                  "temperature": temperature}
    entry = {"deployment": deployment, "slug": "toy", "engine": engine, "batch": batches[0], "overall_best": label,
             "overall_ratio": 2.0, "not_exported": [], "config": label, "method": method, "drafter": "x",
             "mapped": export.to_engine(engine, _setup(toy, method), label), "throughput_tok_s": 100.0, "ratio": 2.0,
             "tpot_ms": 10.0, "batches": list(batches), "stops_paying_at": None}
    return {**entry, **({"schedule": schedule} if schedule else {})}


def test_hf_file_splits_generation_config_from_generate(toy):
    sd = export.hf_file(_entry(toy, "hf", "sd g4", "sd"))
    assert sd == {"requires": sd["requires"], "assistant_checkpoint": "llama-68m",
                  "assistant_generation_config": {"num_assistant_tokens": 4, "num_assistant_tokens_schedule": "constant",
                                                  "assistant_confidence_threshold": 0.0},
                  "target_generation_config": {}, "generate": {"do_sample": False}}
    hot = export.hf_file(_entry(toy, "hf", "sd g4", "sd", temperature=0.7))
    assert hot["generate"] == {"do_sample": True, "temperature": 0.7}
    early = export.hf_file(_entry(toy, "hf", "kangaroo L2 g5 eta0.3", "kangaroo"))
    assert early["assistant_checkpoint"] is None and early["assistant_generation_config"] == {}
    assert early["target_generation_config"] == {"num_assistant_tokens": 5, "num_assistant_tokens_schedule": "constant",
                                                 "assistant_confidence_threshold": 0.3}
    assert early["generate"] == {"assistant_early_exit": 2, "do_sample": False} and "4.47" in early["requires"]
    lookup = export.hf_file(_entry(toy, "hf", "prompt_lookup g3 nmin1 nmax4", "prompt_lookup"))
    assert lookup["generate"] == {"prompt_lookup_num_tokens": 3, "max_matching_ngram_size": 4, "do_sample": False}
    assert lookup["assistant_checkpoint"] is None


def test_ngram_window_is_emitted_wherever_an_engine_matches_ngrams(toy):
    setup = _setup(toy, "lookahead")
    label = "lookahead W5 N4 G3"
    vllm = export.to_engine("vllm", setup, label).settings
    assert vllm == {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 1}
    sglang = export.to_engine("sglang", setup, label).settings
    assert sglang["--speculative-ngram-min-match-window-size"] == sglang["--speculative-ngram-max-match-window-size"] == 1
    assert export.to_engine("hf", setup, label).settings == {"prompt_lookup_num_tokens": 3, "max_matching_ngram_size": 1}
    lookup = export.to_engine("vllm", _setup(toy, "prompt_lookup"), "prompt_lookup g4 nmin2 nmax5").settings
    assert (lookup["prompt_lookup_min"], lookup["prompt_lookup_max"]) == (2, 5)


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


def _coral(toy, **drafter):
    from profiles.profile import Profile

    raw = toy.to_dict()
    raw["drafters"]["eagle"].update(drafter)
    return Setup(Profile.from_dict(raw), "eagle", "eagle")


def test_coral_router_and_tree(toy):
    setup = _setup(toy, "coral")
    chain = export.to_engine("vllm", setup, "coral g4")
    assert chain.match == "exact" and chain.settings["method"] == "eagle"
    routed = export.to_engine("vllm", setup, "coral g4 N16 top2")
    assert routed.match == "approximate" and "router" in routed.differs
    tree = _coral(toy, tree={"depth": 6, "candidates": 60})
    flags = export.to_engine("sglang", tree, "coral g6").settings      # SGLang's EAGLE runs the tree
    assert flags["--speculative-eagle-topk"] == 10 and flags["--speculative-num-draft-tokens"] == 61
    assert export.to_engine("sglang", tree, "coral g6").match == "exact"
    vllm = export.to_engine("vllm", tree, "coral g6")                   # vLLM's a chain: what it drops, in numbers
    assert vllm.match == "approximate" and "verifies 7 tokens a step, not 61" in vllm.differs


@pytest.mark.parametrize("engine_method, vllm, sglang", [("eagle3", "eagle3", "EAGLE3"), ("mtp", "mtp", "NEXTN")])
def test_eagle3_and_mtp_names_only_where_the_drafter_says_so(toy, engine_method, vllm, sglang):
    setup = _coral(toy, engine_method=engine_method)
    assert export.to_engine("vllm", setup, "coral g3").settings["method"] == vllm
    assert export.to_engine("sglang", setup, "coral g3").settings["--speculative-algorithm"] == sglang
    with pytest.raises(InputError, match="drafter 'eagle': engine_method 'eagle4' is not one of eagle, eagle3, mtp"):
        export.to_engine("vllm", _coral(toy, engine_method="eagle4"), "coral g3")


def test_every_export_says_what_it_needs_and_what_happens_outside_the_priced_range(toy):
    schedule = [[1, 7, 4], [8, 31, 2], [32, 32, 1]]
    vllm = _entry(toy, "vllm", "sd g4", "sd", batches=(1, 8, 32), schedule=schedule)
    assert "vLLM >= 0.24" in export.requirements(vllm) and "#32374" in export.requirements(vllm)
    assert "K=1 to every batch past 32" in export.outside_range(vllm) and "--max-num-seqs 32" in export.outside_range(vllm)
    off = _entry(toy, "vllm", "sd g4", "sd", batches=(1, 32), schedule=[[1, 31, 4], [32, 32, 0]])
    assert "K=0 past batch 32: no speculation there" in export.outside_range(off)
    single = _entry(toy, "vllm", "sd g4", "sd")
    assert "0.24" not in export.requirements(single) and "priced at batch 1 only" in export.outside_range(single)
    sglang = {**_entry(toy, "sglang", "sd g4", "sd", batches=(1, 8, 32)), "stops_paying_at": 32}
    name, text = export.engine_file(sglang)
    assert text.strip().endswith("--max-running-requests 32")
    assert "48" in export.outside_range(sglang) and "stops paying at batch 32" in export.outside_range(sglang)
    hf = _entry(toy, "hf", "sd g4", "sd", batches=(4, 8))
    assert "batch 1" in export.outside_range(hf) and "priced at batch 4" in export.outside_range(hf)


def test_vllm_schedule_ranges():
    assert export.vllm_schedule([(4, 3), (1, 4), (2, 4), (8, 0)]) == [[1, 3, 4], [4, 7, 3], [8, 8, 0]]
    assert export.vllm_schedule([(1, 2)]) == [[1, 1, 2]]


def _served(ratios: dict[int, float]) -> pd.DataFrame:
    rows = []
    for batch, ratio in ratios.items():
        base = {"profile": "p", "target": "t", "hardware": "H", "dataset": "d", "temperature": 0.0, "batch": batch,
                "oom": 0, "not_served": "", "ar_throughput_tok_s": 100.0, "heldout_error": 0.05,
                "arrivals": deployments.load_of(300, 128).describe(batch)}
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
    assert best["arrivals"].iat[2] == ("48 requests (prompt 236, output 128 tokens) arrive together at t = 0, batch "
                                       "limit 16: 16 decode at once, the others wait for a slot")
    assert np.isnan(deployments.stops_paying(_served({1: 2.0, 8: 1.1}))["stops_paying_at"].iat[0])
    assert np.isnan(deployments.stops_paying(served)["pays_again_at"].iat[0])


def test_a_served_curve_that_pays_again_says_where():
    """Losing at batch 4 and paying at 8 (as a draft model measured on the CPU engine, decode alone): it stops
    paying at 4 and pays again at 8, and the report's line says both."""
    from sweep.markdown import _again

    stop = deployments.stops_paying(_served({1: 1.2, 2: 1.08, 4: 0.91, 8: 1.1, 32: 0.87})).iloc[0]
    assert (stop["stops_paying_at"], stop["pays_again_at"]) == (4, 8)
    assert _again(stop) == ", and pays again at batch 8"


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
    big, _ = sweep._score_tables([toy], opts, LocalExecutor(workers=1, progress=False), 16, [])
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
    sglang = next(out.glob("sglang_*.txt")).read_text()
    assert sglang.startswith("--speculative-algorithm ") and sglang.strip().endswith("--max-running-requests 32")
    hf = json.loads(next(out.glob("hf_*.json")).read_text())
    assert set(hf) == {"requires", "assistant_checkpoint", "assistant_generation_config", "target_generation_config",
                       "generate"} and "assistant_model" not in hf["generate"]
    notes = (out / "exports.md").read_text()
    assert "no counterpart: mcsd" in notes and notes.count("- needs: ") == 3
    assert notes.count("- outside the priced range: ") == 3 and export.HF_SNIPPET.strip() in notes
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


def _tiny_pair():
    """The example's tiny transformers Llama target and its one-layer assistant (seeded)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "examples" / "ingest" / "record_hf_assisted.py"
    spec = importlib.util.spec_from_file_location("record_hf_assisted", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.tiny_pair(0)


@pytest.mark.slow
@pytest.mark.parametrize("label, method, gamma", [("sd g4", "sd", 4), ("kangaroo L1 g3 eta0", "kangaroo", 3)])
def test_the_hf_snippet_applied_drafts_what_was_exported(toy, tmp_path, label, method, gamma):
    """exports.md's snippet, run as written on a tiny transformers target and assistant: every step
    drafts the exported length (fewer only where the length limit cuts it), not transformers'
    defaults (which draft 1-2 tokens a step here)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from calibrate.ingest.hf_assisted import AssistedRecorder

    path = tmp_path / "hf.json"
    path.write_text(json.dumps(export.hf_file(_entry(toy, "hf", label, method))))
    target, assistant = _tiny_pair()
    ids = torch.randint(1, 96, (1, 8), generator=torch.Generator().manual_seed(0))
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "max_new_tokens": 20}
    with torch.no_grad(), AssistedRecorder(target) as recorder:
        exec(export.HF_SNIPPET, {"path": str(path), "target": target, "assistant": assistant, "inputs": inputs})
    steps = recorder.frame()
    room = 8 + 20 - 1 - steps["ctx_len"].to_numpy()          # what the length limit leaves a step to draft
    assert len(steps) >= 4 and (steps["draft_forwards"].to_numpy() == np.minimum(gamma, room)).all()


def test_a_batch_kv_memory_cannot_hold_is_refused_or_never_served_as_that_batch():
    """The simulator admits what KV memory holds: at a batch beyond it a row ran fewer sequences, so
    it says so (`reached`, `not_served`) rather than stand for that batch; a batch no profile's KV
    memory admits at once is refused before the sweep."""
    from profiles.profile import Profile
    from simulator.memory import memory_of

    profile = Profile.load("data/profiles/glide-vicuna-7b-h800.json")
    ctx, output = 448.0, 128
    load = deployments.load_of(ctx, output)
    prompt = load.prompt_len
    most = memory_of(profile).capacity_tokens // (prompt + 1)
    deployments.check_batch_sizes([profile], [1, most], {profile.name: load})
    with pytest.raises(InputError, match=rf"--batch-sizes: {most + 1:,} sequences at once fit in no profile's KV "
                                         rf"memory \(glide-vicuna-7b-h800: at most {most:,} sequences of a "
                                         rf"{prompt}-token prompt and one token\); give batch sizes up to {most:,}"):
        deployments.check_batch_sizes([profile], [1, most + 1, 100_000], {profile.name: load})
    beyond = deployments.serve_task(deployments.ServeTask(profile, "ar", {}, most + 20, load, 0))
    assert beyond["reached"] < most + 20 and beyond["not_served"].startswith(f"reaches batch {beyond['reached']} only")
    fits = deployments.serve_task(deployments.ServeTask(profile, "ar", {}, 8, load, 0))
    assert fits["reached"] == 8 and fits["not_served"] == ""


def test_each_exported_file_is_priced_as_the_engine_runs_it(tmp_path):
    """vLLM drafts EAGLE's tree as a chain: its file is priced as that chain (the drafter's chain twin),
    not as the tree; SGLang's flags run the batch-1 tree at every batch: priced at each, and where the
    engine runs what was served, the number is the served row's, to the digit."""
    out = tmp_path / "out"
    assert cli.main(["--profile", "data/profiles/coral-llama-3-8b-a6000.json", "--methods", "coral",
                     "--batch-sizes", "1,8", "--export", "vllm,sglang", "--out", str(out), "--no-progress"]) == 0
    index = {item["engine"]: item for item in json.loads((out / "exports.json").read_text())}
    served = pd.read_csv(out / "deployments_served.csv")
    row = lambda item, batch: served[(served["config"] == item["config"]) & (served["drafter"] == item["drafter"])
                                     & (served["batch"] == batch)].iloc[0]
    vllm, sglang = index["vllm"], index["sglang"]
    assert [p["as_run"] for p in vllm["priced"]] == [f"{vllm['drafter']}-chain"] * len(vllm["priced"])
    assert vllm["ratio"] == vllm["priced"][0]["ratio"] != pytest.approx(row(vllm, 1)["throughput_ratio"], rel=1e-6)
    assert [p["batch"] for p in sglang["priced"]] == [1, 8] and sglang["match"] == "exact"
    assert sglang["ratio"] == pytest.approx(row(sglang, 1)["throughput_ratio"], rel=1e-12)
    notes = (out / "exports.md").read_text()
    assert f"`{vllm['config']}` on {vllm['drafter']}-chain" in notes and "priced as the engine runs it" in notes
    assert "upper bound" in notes
    first = vllm["priced"][0]      # the headline names what the file runs at its first batch, not the tree
    assert (f"`{first['config']}` on {vllm['drafter']}-chain (approximate; the sweep chose `{vllm['config']}` on "
            f"{vllm['drafter']}") in notes


def test_vllm_gets_the_chain_that_does_best_at_each_batch_not_the_trees_depth(tmp_path):
    """A tree drafter runs in vLLM as a chain: at each batch the exported K is the draft length whose chain
    the closed forms price best on the chain twin (every other field as chosen), and the file is priced with it."""
    from profiles.profile import Profile
    from sweep import scoring

    path = "data/profiles/coral-llama-3-8b-a6000.json"
    out = tmp_path / "out"
    assert cli.main(["--profile", path, "--methods", "coral", "--batch-sizes", "1,64", "--export", "vllm",
                     "--out", str(out), "--no-progress"]) == 0
    vllm = json.loads((out / "exports.json").read_text())[0]
    profile = Profile.load(path)
    spec, chosen = methods.get("coral"), methods.parse_label(vllm["config"])
    setup = profile.setups_for(spec, drafter=vllm["drafter"])[0]
    twin = spec.to_engine("vllm", setup, chosen).runs_on
    load = deployments.load_of(sweep.setting_of(profile, sweep.SweepOptions()).ctx_len, 256)
    variants = spec.frame_of([type(chosen)(**{**chosen.to_dict(), "gamma": g})
                              for g in sorted(set(spec.space(twin)["gamma"]))])
    schedule = {b: k for start, end, k in vllm["schedule"] for b in range(start, end + 1)}
    for priced in vllm["priced"]:
        if priced["config"] == methods.BASELINE:           # the chain stops paying here: speculation off
            assert schedule[priced["batch"]] == 0
            continue
        setting = scoring.Setting(temperature=twin.acceptance.temperature, batch=priced["batch"],
                                  dataset=twin.acceptance.dataset, ctx_len=load.prompt_len + load.output_len // 2,
                                  new_tokens=load.output_len)
        speedup = scoring.score(twin, "coral", variants, setting).set_index("gamma")["speedup"]
        gamma = methods.parse_label(priced["config"]).gamma
        assert speedup[gamma] == pytest.approx(speedup.max(), rel=1e-9), (priced["batch"], speedup.to_dict())
        assert schedule[priced["batch"]] == gamma


def test_sglang_flags_hold_at_every_batch_so_they_are_the_best_over_all_batches(tmp_path):
    """SGLang runs one configuration at every batch: each per-batch best of the chosen drafter is priced at
    every batch simulated, and the exported one has the highest geometric-mean ratio over them: on this
    Profile at batch 1, 32 and 64 that is not batch 1's best, which loses more than half from batch 32."""
    out = tmp_path / "out"
    assert cli.main(["--profile", "data/profiles/coral-llama-3-8b-a6000.json", "--methods", "coral",
                     "--batch-sizes", "1,32,64", "--export", "sglang", "--out", str(out), "--no-progress"]) == 0
    sglang = json.loads((out / "exports.json").read_text())[0]
    choices = sglang["static_choice"]
    served = pd.read_csv(out / "deployments_served.csv")
    bests = served[(served["drafter"] == sglang["drafter"]) & (served["method"] == "coral")]["config"]
    assert {c["config"] for c in choices} == set(bests) and len(choices) >= 2
    for choice in choices:
        assert sorted(int(b) for b in choice["ratios"]) == [1, 32, 64]
        assert choice["geomean_ratio"] == pytest.approx(np.exp(np.mean(np.log(list(choice["ratios"].values())))))
    assert choices[0]["config"] == sglang["config"] != served[served["batch"] == 1].sort_values(
        "throughput_tok_s")["config"].iloc[-1]
    assert choices[0]["geomean_ratio"] == max(c["geomean_ratio"] for c in choices)
    assert [p["ratio"] for p in sglang["priced"]] == pytest.approx(list(choices[0]["ratios"].values()), rel=1e-12)
    assert "geometric-mean ratio" in (out / "exports.md").read_text()
    # the flags' throughput peaks at 64 here (0.88x of plain decoding there, still more tokens/s than at 32)
    peak = max(p["throughput_tok_s"] for p in sglang["priced"])
    cap = min(p["batch"] for p in sglang["priced"] if p["throughput_tok_s"] >= export.PEAK_SHARE * peak)
    assert sglang["max_running"] == cap and next(out.glob("sglang_*.txt")).read_text().strip().endswith(
        f"--max-running-requests {cap}")
    assert sglang["plain_at_top"]["batch"] == 64 and sglang["plain_at_top"]["ratio"] == 1.0
    assert ("serve plain decoding" in sglang["outside_range"]) == (sglang["plain_at_top"]["throughput_tok_s"] > peak)


def test_sglang_cap_is_the_smallest_batch_at_the_flags_peak():
    priced = [{"batch": b, "throughput_tok_s": t} for b, t in ((1, 60.0), (8, 400.0), (32, 900.0), (64, 700.0))]
    assert export.max_running(priced) == 32                  # past the peak a larger batch serves less
    priced[3]["throughput_tok_s"] = 905.0                      # within 1% of the peak: the smaller batch
    assert export.max_running(priced) == 32
    priced[3]["throughput_tok_s"] = 1000.0
    assert export.max_running(priced) == 64
