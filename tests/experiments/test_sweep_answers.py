"""The sweep's answers as a person reads them: numbers that depend on their own task only, deployments
that do not fit said so, plain decoding's own numbers, ties marked, latencies with their load."""
from __future__ import annotations

import pandas as pd
import pytest

from common.bundled import bundled
from papers.choices import compare
from profiles.profile import Profile
from sweep import deployments, run as sweep
from sweep.executor import LocalExecutor

CORAL = bundled("profiles", "coral-llama-3-8b-a6000.json")
GLIDE = bundled("profiles", "glide-vicuna-7b-h800.json")


def _sweep(paths, **options):
    opts = sweep.SweepOptions(**{"methods": ["sd", "glide", "coral"], "sim_repeats": 3, "sim_tokens": 128,
                                 "batch_sizes": [1, 4], **options})
    return sweep.run_sweep([Profile.load(p) for p in paths], opts, LocalExecutor(workers=1, progress=False))


def _rows(frame: pd.DataFrame, profile: str) -> pd.DataFrame:
    rows = frame[frame["profile"] == profile].reset_index(drop=True).dropna(axis=1, how="all")
    return rows[sorted(rows.columns)]     # without the columns only another profile's methods fill


def test_a_profile_swept_alone_or_among_others_gets_the_same_rows():
    """Every simulated number is a function of its own (profile, configuration, load, seed): the
    simulator's re-score and the served deployments of coral-llama-3-8b do not move when another
    profile is swept beside it, before or after it."""
    alone = _sweep([CORAL])
    among = _sweep([GLIDE, CORAL])
    name = Profile.load(CORAL).name
    for part in ("best", "served", "deployments"):
        pd.testing.assert_frame_equal(_rows(getattr(alone, part), name), _rows(getattr(among, part), name),
                                      check_exact=True, check_dtype=False, obj=part)


MCSD33 = bundled("profiles", "mcsd-llama-33b-a6000.json")
KANGAROO13 = bundled("profiles", "kangaroo-vicuna-13b-v100.json")
SMOLLM2 = bundled("profiles", "smollm2-135m-cpu.json")
GLIDE33 = bundled("profiles", "glide-vicuna-33b-h800.json")


def _run(profiles, methods_, **options):
    opts = sweep.SweepOptions(**{"methods": methods_, "space": {"budget": 8}, "sim_repeats": 2, "sim_tokens": 64,
                                 **options})
    return sweep.run_sweep(profiles, opts, LocalExecutor(workers=1, progress=False), choices=compare)


def test_a_deployment_where_nothing_fits_says_so_everywhere(tmp_path):
    """mcsd-llama-33b-a6000: 65 GB of weights on one 48 GB A6000. No answer row, best table, plot
    or 'stops paying' line may recommend anything; the answer gives the memory arithmetic."""
    from sweep.report import write_outputs

    result = _run([Profile.load(MCSD33)], ["sd", "mcsd"])
    answer = result.deployments.iloc[0]
    assert answer["answer"] == "nothing fits" and pd.isna(answer["throughput_tok_s"])
    assert "plain decoding does not fit: weights 65.1 GB of 43.2 GB usable on 1 x 48 GB A6000" in answer["why"]
    assert (result.best["verdict"] == "does not fit").all()
    assert not result.stops_paying["runs"].iat[0] and pd.isna(result.stops_paying["stops_paying_at"].iat[0])
    written = write_outputs(result, tmp_path)
    assert "plot:sd" not in written and "plot:mcsd" not in written      # nothing that runs to draw
    report = (tmp_path / "report.md").read_text()
    assert "Speculation stops paying at batch" not in report and "| speculate |" not in report
    assert "Nothing runs at any batch simulated" in report
    assert "Neither configuration fits in one GPU" in report        # beside the paper's MCSD choice
    assert "no configuration scored fits in memory" in report
    assert "mcsd-llama-33b-a6000 / llama-68m: weights 65.2 GB (llama-33b 65.1 + llama-68m 0.1)" in report


def test_a_drafter_that_does_not_fit_leaves_plain_decodings_own_numbers():
    """Kangaroo whose adapter (made 4 GB here) leaves no KV memory on a V100: the answer is plain
    decoding, with plain decoding's throughput and latency, and why says what did not fit."""
    raw = Profile.load(KANGAROO13).to_dict()
    raw["models"]["kangaroo-vicuna-13b"]["extra_params"] = 2e9
    result = _run([Profile.from_dict(raw)], ["kangaroo"])
    answer = result.deployments.iloc[0]
    plain = result.served[result.served["method"] == "ar"].iloc[0]
    assert answer["answer"] == "ar" and answer["throughput_tok_s"] == plain["throughput_tok_s"]
    assert answer["tpot_ms"] == plain["tpot_ms"] and answer["latency_s_p50"] == plain["latency_s_p50"]
    assert answer["why"].startswith("no speculative configuration runs: kangaroo L3 g2 eta0 (drafter kangaroo) does "
                                    "not fit: weights 30.0 GB (vicuna-13b 26.0 + kangaroo-vicuna-13b 4.0)")
    assert (result.best["verdict"] == "does not fit").all()


def test_when_plain_decoding_wins_its_row_shows_its_own_numbers():
    """SmolLM2's GLIDE drafter on MT-Bench (predicted about 0.9x): plain decoding is the answer."""
    result = _run([Profile.load(SMOLLM2)], ["glide"])
    answer = result.deployments[result.deployments["dataset"] == "mt-bench"].iloc[0]
    served = result.served[result.served["dataset"] == "mt-bench"]
    plain = served[served["method"] == "ar"].iloc[0]
    assert answer["answer"] == "ar"
    assert answer["throughput_tok_s"] == answer["ar_throughput_tok_s"] == plain["throughput_tok_s"]
    assert answer["tpot_ms"] == plain["tpot_ms"] and answer["throughput_ratio"] == 1.0
    assert answer["best_speculative"].startswith("glide") and answer["best_speculative_ratio"] < 1.0


def test_latencies_say_which_load_they_were_served_under():
    """At batch 1 three requests arrive together: TTFT and end-to-end include the wait; the own
    latency (admission to last token) is one request served alone."""
    result = _run([Profile.load(CORAL)], ["coral"], sim_tokens=128, batch_sizes=[1, 8])
    served = result.served
    at = {b: served[(served["batch"] == b) & (served["method"] == "ar")].iloc[0] for b in (1, 8)}
    assert at[8]["alone_s"] == at[1]["alone_s"]                                # one request alone, whatever B
    assert at[8]["latency_s_p50"] > at[8]["alone_s"]                           # B decoding together
    assert result.deployments["alone_s"].notna().all()
    for _, row in served[served["batch"] == 1].iterrows():
        assert row["arrivals"].startswith("3 requests (prompt ")
        assert "output 128 tokens) arrive together at t = 0, batch limit 1" in row["arrivals"]
        assert row["queue_s_p50"] > 0.5 * row["latency_s_p50"]       # the median request waited for one
        assert row["e2e_s_p50"] > 1.5 * row["latency_s_p50"]
        # one request alone: its prefill, then 127 decode steps of TPOT
        assert 127 * row["tpot_ms"] / 1000 < row["latency_s_p50"] < 1.25 * 127 * row["tpot_ms"] / 1000


def test_a_configuration_served_at_several_batches_is_served_alone_once_and_shows_one_number():
    """`alone_s` is the configuration's batch-1 load whatever batch its row is at: the same number at
    every batch size (a request served alone at batch 8 drew other tokens than at batch 1: 41 of 253
    configurations of the default sweep at --batch-sizes 1,8,32,128 showed two), and one serving task
    per configuration runs it (`deployments.alone_once`)."""
    result = _run([Profile.load(SMOLLM2)], ["sd", "prompt_lookup"], sim_tokens=96, batch_sizes=[1, 2, 4])
    served = result.served[result.served["not_served"] == ""]
    key = ["profile", "method", "drafter", "config"]
    several = served.groupby(key).filter(lambda g: g["batch"].nunique() > 1)
    assert (several["batch"] > 1).any() and several.groupby(key)["alone_s"].nunique().eq(1).all()
    profile = Profile.load(CORAL)        # latency at any batch (the CPU recording's tables stop at 2)
    load = deployments.loads_of([profile], 96, lambda p: sweep.setting_of(p, sweep.SweepOptions()).ctx_len)
    tasks = [deployments.ServeTask(profile, "ar", {}, batch, load[profile.name], 0) for batch in (1, 8, 32)]
    once = deployments.alone_once(tasks, {})
    assert [t.alone for t in once] == [True, False, False]
    assert [t.alone for t in deployments.alone_once(tasks[1:], {})] == [True, False]
    rows = deployments.alone_of(once, [deployments.serve_task(t) for t in once], {})
    assert rows[0]["alone_s"] == rows[1]["alone_s"] == rows[2]["alone_s"] > 0


def test_ties_are_marked_and_one_configuration_is_named_everywhere(tmp_path):
    """glide-vicuna-33b: several bin arrays predict the same speedup; the tables, the best table,
    the served answer and the plot name the same one (the cheaper step, then the first label), and
    the best table says how many tie with it within the held-out error."""
    from sweep import plots
    import methods

    result = _run([Profile.load(GLIDE33)], ["glide"])
    table = result.tables["glide"]
    top = table.iloc[0]
    equal = table[(table["speedup"] - top["speedup"]).abs() < 1e-9]
    assert len(equal) > 1 and top["config"] == sorted(equal["config"])[0]
    best = result.best.iloc[0]
    assert best["config"] == top["config"] and best["ties"] >= len(equal) - 1
    assert result.deployments["config"].iat[0] == top["config"]
    drawn = {}
    original = plots._save
    plots._save = lambda fig, path: drawn.setdefault("fig", fig) and path
    try:
        plots.plot_method(methods.get("glide"), table, tmp_path / "glide.png")
    finally:
        plots._save = original
    labels = [t.get_text() for ax in drawn["fig"].axes for t in ax.texts]
    assert any(t.startswith(f"best: {top['config']} (") for t in labels), labels


def test_a_batch_past_the_measured_latency_tables_is_not_priced():
    """The SmolLM2 Profile's latency tables were measured at batch 1 and 2 (its drafters' at 1): at batch 16
    the deployment answers 'not priced', naming the table and the batches it measured, and the pair is among
    the skipped; nothing is extrapolated. Batch 1 is priced; a Profile measured at 1-32 prices batch 16."""
    from sweep.deployments import NOT_PRICED

    result = _run([Profile.load(SMOLLM2)], ["sd"], batch_sizes=[1, 16])
    answers = result.deployments.set_index("batch")
    assert answers.loc[1, "answer"] != NOT_PRICED and answers.loc[1, "throughput_ratio"] > 0
    assert answers.loc[16, "answer"] == NOT_PRICED and pd.isna(answers.loc[16, "throughput_ratio"])
    assert "(a measured table) was measured at batch 1" in answers.loc[16, "why"]
    assert "not extrapolated" in answers.loc[16, "why"]
    assert "profile 'smollm2-135m on this CPU (project recordings)' at batch 16: not priced, latency model " \
           "'vanilla-1l' measured at batch 1-2 only (a batch is not extrapolated)" in result.skipped
    assert result.stops_paying["largest_batch"].tolist() == [1]
    recorded = _run([Profile.load(bundled("profiles", "batch/smollm2-135m-cpu-batch-drafters.json"))], ["sd"],
                    batch_sizes=[1, 16])
    assert (recorded.deployments["answer"] != NOT_PRICED).all()


def test_a_report_served_at_one_batch_does_not_claim_speculation_pays_at_every_batch(tmp_path):
    """Served at batch 1 alone, the answer says where speculation stops paying is not known and how
    to find it, not that it 'pays at every batch simulated (up to 1)'."""
    from sweep.markdown import deployment_section

    text = "\n".join(deployment_section(_sweep([CORAL, GLIDE], batch_sizes=None), {}, tmp_path))
    assert text.count("Served at batch 1 only") == 1 and "--batch-sizes" in text     # once, not per deployment
    assert text.count("### ") >= 2 and "pays at every batch" not in text


def test_a_profile_moved_to_other_hardware_says_where_its_error_was_measured():
    moved = Profile.load(CORAL).on_hardware("H100")
    assert moved.provenance.moved_from == "A6000" and moved.on_hardware("A100-80G").provenance.moved_from == "A6000"
    result = _run([moved], ["coral"], sim_tokens=64)
    why = result.deployments["why"].iat[0]
    assert "(the held-out error of its A6000 fit, 6.0%: not measured on H100)" in why, why
    assert "heldout_fitted_on" not in _run([Profile.load(CORAL)], ["coral"], sim_tokens=64).served
