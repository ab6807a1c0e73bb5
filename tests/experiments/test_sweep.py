"""The main job: generic scoring over the method registry agrees with costmodel, labels parse back,
the CLI writes its report, bad input is one line."""
from __future__ import annotations

import copy
import json

import numpy as np
import pandas as pd
import pytest

import methods
from profiles.profile import Profile
from common.errors import InputError
from costmodel.params import arch_dict, drafter_arch
from sweep import deployments, scoring
from experiments import sweep as cli
from sweep import run as sweep
from sweep.executor import LocalExecutor

FREQ = [0.02, 0.04, 0.05, 0.06, 0.07, 0.08, 0.08, 0.1, 0.12, 0.18, 0.2]
HIT1 = [0.1, 0.15, 0.25, 0.35, 0.45, 0.55, 0.62, 0.7, 0.8, 0.9, 0.97]


def toy_profile(hardware: str = "A100-80G", latency_kind: str = "roofline") -> Profile:
    """A Vicuna-7B-shaped profile carrying every acceptance part every method needs."""
    models = {"vicuna-7b": arch_dict("vicuna-7b"), "llama-68m": arch_dict("llama-68m"),
              "glide-1l": drafter_arch("glide", "vicuna-7b"), "eagle-1l": drafter_arch("coral", "vicuna-7b"), "eagle-head": arch_dict("llama-68m")}

    def latency(arch, scale):
        if latency_kind == "table":   # flat in context: the closed forms' assumption, for exact checks
            n = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
            return {"kind": "table", "params": {"n_tokens": n, "ctx_len": [0], "batch": [1],
                                                "seconds": [[[scale * (1 + 0.002 * t)]] for t in n]}}
        return {"kind": "roofline", "params": {"hardware": hardware, "dtype": "fp16", "arch": arch,
                                               "bw_eff": 0.7, "flops_eff": 0.5, "overhead_s": 2e-4}}

    scales = {"vicuna-7b": 0.02, "llama-68m": 0.001, "glide-1l": 0.0012, "eagle-1l": 0.0015, "eagle-head": 0.0005}
    topk = {"1": HIT1, "2": [min(1.0, h + 0.12) for h in HIT1], "4": [min(1.0, h + 0.2) for h in HIT1],
            "8": [min(1.0, h + 0.26) for h in HIT1]}
    raw = {
        "schema_version": 2, "name": f"toy vicuna-7b ({latency_kind})", "hardware": hardware, "dtype": "fp16",
        "target": "vicuna-7b", "models": models,
        "latency": {m: latency(a, scales[m]) for m, a in models.items()},
        "drafters": {"llama-68m": {"kind": "draft_model", "model": "llama-68m"},
                     "glide": {"kind": "glide", "model": "glide-1l"},
                     "kangaroo": {"kind": "kangaroo", "exit_layer": 2},
                     "eagle": {"kind": "coral", "model": "eagle-1l", "head_model": "eagle-head"},
                     "lookahead": {"kind": "lookahead"}, "prompt_lookup": {"kind": "prompt_lookup"}},
        "acceptance": {
            "llama-68m": {"drafter": "llama-68m", "temperature": 0.0, "dataset": "mt-bench", "alpha": 0.7,
                          "alpha_at_k": {"1": 0.7, "2": 0.8, "4": 0.87, "8": 0.91, "16": 0.94, "32": 0.96},
                          "alpha_at_k_without_replacement": {"1": 0.7, "2": 0.82, "4": 0.89, "8": 0.93, "16": 0.95,
                                                             "32": 0.97},
                          "conf_bins": {"freq": FREQ, "topk_hit": topk}},
            "glide": {"drafter": "glide", "temperature": 0.0, "dataset": "mt-bench", "alpha": 0.75,
                      "conf_bins": {"freq": FREQ, "topk_hit": topk}},
            "kangaroo": {"drafter": "kangaroo", "temperature": 0.0, "dataset": "mt-bench", "alpha": 0.6,
                         "conf_bins": {"freq": FREQ, "topk_hit": topk}},
            "eagle": {"drafter": "eagle", "temperature": 0.0, "dataset": "mt-bench", "alpha": 0.78,
                      "router_recall": {"4/1": 0.9, "4/2": 0.99, "8/2": 0.97, "16/2": 0.96, "16/1": 0.88}},
            "lookahead": {"drafter": "lookahead", "temperature": 0.0, "dataset": "mt-bench",
                          "lookahead": {"alpha": 0.425, "f": 3.106}},
            "prompt_lookup": {"drafter": "prompt_lookup", "temperature": 0.0, "dataset": "mt-bench",
                              "prompt_lookup": {"hit": 0.6, "decay": 0.3, "alpha": 0.3, "alpha_next": 0.8,
                                                "rho": 0.9, "sigma": 0.1}}},
        "provenance": {"sources": ["synthetic test profile"]},
    }
    return Profile.from_dict(raw)


@pytest.fixture(scope="module")
def toy():
    return toy_profile()


@pytest.fixture(scope="module")
def small_sweep(toy):
    """Every swept method on the toy profile, no simulator re-score."""
    opts = sweep.SweepOptions(space={"budget": 8}, rescore=0)
    return sweep.run_sweep([toy], opts, LocalExecutor(workers=1, progress=False))


def _score(profile, method, setting=scoring.Setting(), **space):
    setup = scoring.setups(profile, method, setting)[0]
    return scoring.score(setup, method, methods.get(method).space(setup, **space), setting)


def test_sd_scores_equal_leviathan_through_the_latency_model():
    from costmodel.leviathan import expected_tokens, speedup_from_latency

    profile = toy_profile(latency_kind="table")
    scored = _score(profile, "sd")
    t = profile.latency_model("vicuna-7b")
    d = profile.latency_model("llama-68m")
    want = speedup_from_latency(expected_tokens(0.7, scored.gamma.to_numpy()), scored.gamma.to_numpy(),
                                lambda n: d.predict(n, 0), lambda n: t.predict(n, 0))
    np.testing.assert_allclose(scored.speedup, want, rtol=1e-12)
    np.testing.assert_allclose(scored.draft_forwards, scored.gamma)
    np.testing.assert_allclose(scored.verified_per_step, scored.gamma + 1)


def test_every_method_scores_its_space(small_sweep):
    assert list(small_sweep.tables) == methods.names(sweep_only=True)
    for method, scored in small_sweep.tables.items():
        assert list(scored.columns[-len(scoring.SCORE_COLUMNS) - 1:-1]) == scoring.SCORE_COLUMNS, method
        assert scored.speedup.notna().all() and (scored.tokens_per_step >= 1).all(), method
        assert (scored.step_s > 0).all() and (scored.draft_cost >= 0).all(), method
    coral = small_sweep.tables["coral"]
    assert set(zip(coral.groups, coral.top_n)) == {(0, 0), (4, 1), (4, 2), (8, 2), (16, 1), (16, 2)}
    assert (small_sweep.tables["lookahead"].draft_forwards == 0).all()


def test_every_label_of_the_tables_parses_back_to_its_row(small_sweep):
    for method, table in small_sweep.tables.items():
        rows = methods.get(method).configs_of(table)
        assert [methods.parse_label(label) for label in table.config] == rows, method


def test_mcsd_levels_and_tree_cost(toy):
    from costmodel.trees import expected_tokens_tree

    scored = _score(toy, "mcsd", budget=16, max_depth=3)
    acc = toy.acceptance_model("llama-68m")
    for repl in (True, False):
        sub = scored[scored.replacement == repl]
        curve = {k: acc.alpha_at(k, without_replacement=not repl) for k in methods.mcsd.K_CHOICES}
        np.testing.assert_allclose(sub.tokens_per_step, expected_tokens_tree(list(sub.k), curve), rtol=1e-12)
    a, b = (scored[scored.config == label].iloc[0] for label in ("mcsd k4x2 repl", "mcsd k2x4 repl"))
    assert a.tokens_per_step > b.tokens_per_step          # MCSD's monotonic rule
    assert a.verified_per_step == 1 + 4 + 8 and b.verified_per_step == 1 + 2 + 8
    assert a.draft_forwards == 2


def test_tabulated_latency_gives_the_same_seconds(toy):
    rng = np.random.default_rng(0)
    width = rng.choice([1, 2, 4, 8, 16, 64], size=(5000, 6))
    ctx = 512.0 + np.arange(6)
    direct = toy.seconds("llama-68m", width, ctx, 2)
    np.testing.assert_array_equal(scoring.tabulated(toy.seconds)("llama-68m", width, ctx, 2), direct)
    np.testing.assert_array_equal(scoring.tabulated(toy.seconds)("llama-68m", width[:, 0], 512.0, 1),
                                  toy.seconds("llama-68m", width[:, 0], 512.0, 1))
    fractional = width + 0.5          # expected token counts are priced as they are
    np.testing.assert_array_equal(scoring.tabulated(toy.seconds)("llama-68m", fractional, ctx, 1),
                                  toy.seconds("llama-68m", fractional, ctx, 1))


def test_trace_replay_scores_exact_greedy_steps(toy):
    from traces.replay import TokenTable

    table = TokenTable.from_arrays(["p"], [0, 60], np.zeros(60, int), np.full(60, 0.9))
    space = methods.get("sd").space(scoring.setups(toy, "sd", scoring.Setting())[0], gammas=range(1, 6))
    tokens = scoring.replay_tokens(table, "sd", space)
    np.testing.assert_allclose(tokens, [60 / np.ceil(60 / (g + 1)) for g in range(1, 6)])


def test_a_method_without_a_setup_is_listed_with_the_reason(toy):
    raw = copy.deepcopy(toy.to_dict())
    del raw["acceptance"]["lookahead"]
    opts = sweep.SweepOptions(methods=["sd", "lookahead"], rescore=0)
    result = sweep.run_sweep([Profile.from_dict(raw)], opts, LocalExecutor(workers=1, progress=False))
    assert list(result.tables) == ["sd"]
    assert len(result.skipped) == 1 and "with lookahead" in result.skipped[0] and "lookahead" in result.skipped[0]


def test_sim_config_is_the_method_config_plus_the_setup(small_sweep):
    for method, table in small_sweep.tables.items():
        config = scoring.sim_config(table.iloc[[0]])
        spec = methods.get(method)
        assert spec.parse({k: v for k, v in config.items() if k not in ("drafter", "acceptance")}).label \
            == table.config.iloc[0], method
        assert config["acceptance"] == table.acceptance.iloc[0]
        assert ("drafter" in config) == (table.drafter.iloc[0] != "-"), method


def test_run_sweep_ranks_and_rescores_in_the_simulator(toy):
    opts = sweep.SweepOptions(methods=["sd", "mcsd", "cape"], space={"budget": 8}, rescore=1, sim_tokens=256, sim_repeats=3)
    result = sweep.run_sweep([toy], opts, LocalExecutor(workers=1, progress=False))
    for method, frame in result.tables.items():
        assert frame["rank"].iloc[0] == 1 and frame.speedup.iloc[0] == frame.speedup.max()
    for method in ("sd", "mcsd", "cape"):
        row = result.best[result.best.method == method].iloc[0]
        assert row.sim_p05 <= row.sim_speedup <= row.sim_p95
        assert abs(row.sim_speedup / row.speedup - 1) < 0.15, method  # simulator and closed form agree


def test_tables_ranked_per_profile_in_the_workers_equal_one_ranking_of_the_whole(toy):
    """Each (profile, method) is scored and ranked in its own task (`score_space`); the tables are the
    rows and order of ranking every profile's rows at once, and `rank` counts within each profile."""
    from sweep import ranking

    raw = toy.to_dict()
    profiles = [Profile.from_dict({**raw, "name": name}) for name in ("z toy", "a toy")]   # given out of order
    opts = sweep.SweepOptions(methods=["sd", "mcsd"], space={"budget": 8}, rescore=0)
    tables, _ = sweep._score_tables(profiles, opts, LocalExecutor(workers=1, progress=False), 1, [])
    for method, table in tables.items():
        parts = []
        for profile in profiles:
            setting = sweep.setting_of(profile, opts)
            for setup in scoring.setups(profile, method, setting):
                parts.append(scoring.score(setup, method, sweep.space_of(methods.get(method), setup, opts), setting))
        whole = ranking.ranked(pd.concat(parts, ignore_index=True), "speedup", ["profile"]).reset_index(drop=True)
        whole["rank"] = whole.groupby("profile").cumcount() + 1
        pd.testing.assert_frame_equal(table, whole)
        assert list(table["profile"].unique()) == ["a toy", "z toy"]


def test_other_batches_answered_by_the_scoring_tasks_give_the_candidates_of_a_whole_scoring(toy):
    """--batch-sizes' other batches are priced inside the scoring tasks, each keeping its candidate
    groups' best rows only (`sweep.spaces`): the same candidates, in the same order, as the whole
    space scored again at that batch."""
    raw = toy.to_dict()
    profiles = [Profile.from_dict({**raw, "name": name}) for name in ("z toy", "a toy")]
    opts = sweep.SweepOptions(methods=["sd", "mcsd", "prompt_lookup"], space={"budget": 8}, rescore=0)
    executor = LocalExecutor(workers=1, progress=False)
    hardware = {p.name: p.hardware for p in profiles}
    _, best_at = sweep._score_tables(profiles, opts, executor, 1, [], (1, 4))
    whole, _ = sweep._score_tables(profiles, opts, executor, 4, [])
    assert set(best_at) == {4}
    expected = deployments.candidates(whole, hardware).drop(columns="rank")   # a whole table's rank within it
    assert len(expected) > 4
    pd.testing.assert_frame_equal(deployments.candidates_of(best_at[4], hardware), expected)


def test_hardware_move_through_the_roofline(toy):
    moved = toy.on_hardware("H100")
    assert moved.hardware == "H100"
    slow, fast = (m.latency_model("vicuna-7b").predict(1, 512) for m in (toy, moved))
    assert fast < slow
    with pytest.raises(Exception, match="unknown hardware 'B300'.*H100"):
        toy.on_hardware("B300")
    with pytest.raises(Exception, match="only a roofline"):
        toy_profile(latency_kind="table").on_hardware("H100")


def test_every_method_plots_from_its_plot_spec(tmp_path, small_sweep):
    from sweep.plots import plot_method

    for method, table in small_sweep.tables.items():
        path = plot_method(methods.get(method), table, tmp_path / f"{method}.png")
        assert path is not None and path.stat().st_size > 0, method
    assert plot_method(methods.get("sd"), small_sweep.tables["sd"].iloc[:0], tmp_path / "none.png") is None


def test_cli_writes_tables_plots_and_report(tmp_path, toy, capsys):
    path = toy.save(tmp_path / "toy.json")
    out = tmp_path / "out"
    code = cli.main(["--profile", str(path), "--methods", "sd,coral", "--rescore", "1", "--sim-repeats", "2",
                       "--sim-tokens", "128", "--out", str(out), "--workers", "1", "--no-progress"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "coral" in printed and "sd" in printed
    for name in ("tables/sd_top50.csv", "tables/sd.parquet", "tables/coral_top50.csv", "best.csv", "plots/sd.png",
                 "plots/coral.png", "deployments.csv", "report.md", "run.json"):
        assert (out / name).exists(), name
    report = (out / "report.md").read_text()
    assert "![sd](plots/sd.png)" in report and "## Answer per deployment" in report
    sd = pd.read_csv(out / "tables/sd_top50.csv")
    assert len(sd) == 12 and set(sd.config) == {f"sd g{g}" for g in range(1, 13)}
    assert pd.read_parquet(out / "tables/coral.parquet").speedup.notna().all()


def test_rescore_0_keeps_the_closed_forms_best_without_simulating(tmp_path, capsys):
    out = tmp_path / "out"
    code = cli.main(["--profile", "data/profiles/glide-vicuna-7b-h800.json", "--methods", "sd,glide", "--rescore", "0",
                     "--out", str(out), "--workers", "1", "--no-progress"])
    printed = capsys.readouterr().out
    assert code == 0 and "Empty DataFrame" not in printed
    best = pd.read_csv(out / "best.csv")
    assert sorted(best["method"]) == ["glide", "sd"] and not any(c.startswith("sim_") for c in best.columns)
    for method, frame in best.groupby("method"):        # each the top of its table
        table = pd.read_parquet(out / f"tables/{method}.parquet")
        assert frame["speedup"].iat[0] == table["speedup"].max()
        assert frame["config"].iat[0] in printed


@pytest.mark.parametrize("args,message", [
    (["--methods", "sd,medusa"], "unknown method 'medusa'"),
    (["--methods", "ar"], "method 'ar' has no search space"),
    (["--profile", "/nonexistent/p.json"], "profile file not found"),
    (["--hardware", "B300"], "unknown hardware 'B300' (known: V100"),
    (["--budget", "0"], "--budget must be at least 1"),
])
def test_bad_input_is_one_line_exit_2(args, message, capsys):
    assert cli.main(args + ["--out", "/tmp/never-written"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and message in err and "\n" not in err


def test_wrong_schema_profile(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema_version": 1, "name": "x"}))
    assert cli.main(["--profile", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert "missing field 'hardware'" in capsys.readouterr().err


def test_papers_choices_beside_the_sweep():
    profile = Profile.load(sweep.BUNDLED_PROFILES / "mcsd-vicuna-33b-a6000.json")
    opts = sweep.SweepOptions(methods=["mcsd"], space={"budget": 16}, rescore=0, temperature=0.0, dataset="alpaca")
    from papers.choices import compare

    result = sweep.run_sweep([profile], opts, LocalExecutor(workers=1, progress=False), choices=compare)
    row = result.paper_choices[result.paper_choices.setting == "llama-68m / alpaca / T=0"].iloc[0]
    assert row.paper_choice == "mcsd k8x2x1x1 repl" and row.paper_speedup == pytest.approx(2.06)
    assert row.sweep_rank_of_paper_choice >= 1 and row.predicted_best >= row.predicted_for_paper_choice
    assert row.why


@pytest.mark.cluster
def test_dask_cluster_gives_the_local_results(toy):
    pytest.importorskip("distributed")
    from sweep.executor import DaskExecutor

    opts = sweep.SweepOptions(methods=["sd", "mcsd", "lookahead"], space={"budget": 8}, rescore=1, sim_tokens=128, sim_repeats=2)
    local = sweep.run_sweep([toy], opts, LocalExecutor(workers=1, progress=False))
    with DaskExecutor(workers=2, processes=False, progress=False) as ex:
        dask = sweep.run_sweep([toy], opts, ex)
    for method in local.tables:
        pd.testing.assert_frame_equal(local.tables[method], dask.tables[method])
    pd.testing.assert_frame_equal(local.best, dask.best)


def test_token_trace_of_another_target_drafter_or_dataset_is_refused(tmp_path, toy):
    from traces.schema import RunMetadata, write_trace

    frame = pd.DataFrame({"run_id": "r", "prompt_id": "a", "pos": np.arange(4), "token": [1, 2, 3, 4],
                          "draft_rank": 0, "draft_conf": 0.5, "draft_q_token": 0.5, "alpha": 0.5, "target_entropy": 1.0})

    def trace(name, **meta):
        return str(write_trace(tmp_path / name, frame, RunMetadata(kind="token", **meta)))

    ok = trace("ok.parquet", models={"target": "random:vicuna-7b", "drafter": "llama-68m"}, dataset="mtbench")
    assert scoring.check_token_trace(ok, [toy], None) == "mt-bench"          # the trace's dataset labels the rows
    for path, message in [
        (trace("smol.parquet", models={"target": "smollm2", "drafter": "llama-68m"}), "recorded on target 'smollm2'"),
        (trace("who.parquet", models={"target": "random:vicuna-7b", "drafter": "other"}), "drafter 'other'"),
        (trace("anon.parquet"), "drafter 'None'"),
    ]:
        with pytest.raises(InputError, match=message):
            scoring.check_token_trace(path, [toy], None)
    with pytest.raises(InputError, match="not --dataset 'humaneval'"):
        scoring.check_token_trace(ok, [toy], "humaneval")
    wide = frame.assign(token=[1, 2, 3, 40000])                 # no architecture named: the vocabulary decides
    path = str(write_trace(tmp_path / "wide.parquet", wide, RunMetadata(kind="token", models={"target": "tiny", "drafter": "llama-68m"})))
    with pytest.raises(InputError, match="token id 40000, outside the 32000-token vocabulary"):
        scoring.check_token_trace(path, [toy], None)


def test_token_trace_switches_to_exact_replay(tmp_path, toy):
    from traces.schema import RunMetadata, write_trace

    rng = np.random.default_rng(0)
    n = 200
    frame = pd.DataFrame({"run_id": "r", "prompt_id": np.repeat(["a", "b"], n // 2), "pos": np.tile(np.arange(n // 2), 2),
                          "token": rng.integers(0, 100, n), "draft_rank": rng.choice([0, 0, 0, 1, 3], n),
                          "draft_conf": rng.uniform(0, 1, n), "draft_q_token": rng.uniform(0, 1, n),
                          "alpha": rng.uniform(0, 1, n), "target_entropy": rng.uniform(0, 2, n)})
    meta = RunMetadata(kind="token", models={"target": "random:vicuna-7b", "drafter": "llama-68m"}, dataset="mtbench")
    path = write_trace(tmp_path / "tokens.parquet", frame, meta)
    opts = sweep.SweepOptions(methods=["sd", "mcsd", "cape", "kangaroo"], space={"budget": 4}, rescore=0, token_trace=str(path))
    result = sweep.run_sweep([toy], opts, LocalExecutor(workers=1, progress=False))
    for method in ("sd", "mcsd", "cape"):
        assert (result.tables[method].scored_by == "trace replay").all(), method
    # the trace's drafter is llama-68m: Kangaroo's own drafter is priced in closed form, not replayed onto it
    assert (result.tables["kangaroo"].scored_by == "closed form").all()
    assert result.tables["mcsd"].monotone.all()                 # replay keeps MCSD's monotonic rule
    sd = result.tables["sd"].set_index("gamma")
    from traces.replay import TokenTable, replay_summary
    want = replay_summary(TokenTable.from_frame(frame), "sd", [{"gamma": 3}])["mean_accepted"].iloc[0]
    assert sd.loc[3, "tokens_per_step"] == pytest.approx(want)
    raw = copy.deepcopy(toy.to_dict())
    raw["acceptance"]["llama-68m"] = {**raw["acceptance"]["llama-68m"], "temperature": 1.0}
    hot = sweep.SweepOptions(methods=["sd"], rescore=0, temperature=1.0, token_trace=str(path))
    with pytest.raises(Exception, match="greedy only"):
        sweep.run_sweep([Profile.from_dict(raw)], hot, LocalExecutor(workers=1, progress=False))


def test_a_profile_named_twice_is_swept_once_and_two_files_of_one_name_are_refused(tmp_path, monkeypatch, capsys):
    """`--profile P --profile P` (or ./P and P) would sweep P twice: its rows and ties counted twice."""
    path = "data/profiles/glide-vicuna-7b-h800.json"
    got = sweep.load_profiles([path, path, f"./{path}"])
    assert [p.name for p in got] == ["glide-vicuna-7b-h800"]
    assert capsys.readouterr().err == (f"note: --profile {path}, ./{path} (= {path}) named a file already given: "
                                       "each file is swept once\n")
    copy_of = tmp_path / "copy.json"
    copy_of.write_text(open(path).read())
    with pytest.raises(InputError, match=rf"--profile {copy_of} and {path} both hold a profile named "
                                         r"'glide-vicuna-7b-h800' \(the sweep's tables key rows by it\)"):
        sweep.load_profiles([path, str(copy_of)])
