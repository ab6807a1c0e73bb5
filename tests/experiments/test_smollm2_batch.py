"""The batch campaign's choice of configurations (--runs): plain decoding always first, an unknown
label one line naming the ones there are, and only the drafters the chosen runs use timed and carried."""
import json
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from campaigns import smollm2_batch as campaign
from common.errors import InputError
from experiments import smollm2_batch as cli
from profiles.profile import Profile

LOOKUP = "prompt_lookup g5 nmin2 nmax3"


def test_all_is_every_run_and_a_subset_keeps_plain_decoding_first():
    assert campaign.selected_runs("all") == campaign.RUNS
    chosen = campaign.selected_runs(f"{LOOKUP}, glide g1 @glide,{LOOKUP}")
    assert [c.label for c in chosen] == ["ar", LOOKUP, "glide g1 @glide"]
    assert campaign.drafters_used(SimpleNamespace(runs=LOOKUP)) == set()
    assert campaign.drafters_used(SimpleNamespace(runs="sd g1 @vanilla")) == {"vanilla"}


def test_an_unknown_run_is_one_line_naming_the_campaigns_runs(capsys, tmp_path):
    with pytest.raises(InputError, match=r"--runs: 'sd g9' is none of the campaign's configurations \(ar, sd g1"):
        campaign.selected_runs("sd g9")
    assert cli.main(["--runs", "sd g9", "--out", str(tmp_path / "t")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --runs: 'sd g9'") and "\n" not in err
    assert not (tmp_path / "t").exists()


def test_only_the_drafters_the_runs_use_are_carried():
    base = Profile.load("data/profiles/smollm2-135m-cpu.json")
    _, drafters, keys = campaign.carried(base, set())
    assert set(drafters) == {"prompt_lookup"} and all(not k.startswith(("vanilla", "glide")) for k in keys)
    _, drafters, _ = campaign.carried(base)
    assert set(drafters) == {"prompt_lookup", "vanilla", "glide"}


def test_recorded_chains_count_each_prompts_steps_once():
    """The runs at batch 1, 2 and 4 decode the same prompts, each row as it decodes alone: the chains
    they add to a carried entry count each prompt's steps once; another drafter's entry is left alone."""
    base = Profile.load("data/profiles/smollm2-135m-cpu.json")
    acceptance, _, _ = campaign.carried(base, {"glide", "vanilla"})
    key = "glide/lib-edit/T0/steps"
    masks = [[True, False, False], [False, False, False], [True, True, True]]
    one_run = pd.DataFrame({"run_id": "glide B1#0", "request_id": "libedit/0", "config": json.dumps({"bins": None, "gamma": 3}),
                            "verify_tokens": 4, "accept_mask": masks})
    rows = pd.concat([one_run, one_run.assign(run_id="glide B2#0"), one_run.assign(run_id="glide B4#0")], ignore_index=True)
    out = campaign.with_recorded_chains(acceptance, [("glide", "lib-edit", rows, "steps_glide-g3--glide.parquet")])
    assert out[key]["fit"]["chains_added"] == {"3": 3}
    assert out[key]["alpha_by_position_at_gamma"]["3"] == [2 / 3, 1 / 2, 1.0]
    assert "steps_glide-g3--glide.parquet (1 prompts)" in out[key]["source"]
    assert all(out[k] == acceptance[k] for k in acceptance if k != key)


BUNDLED = "data/profiles/batch/smollm2-135m-cpu-batch-drafters.json"
RUNS = "sd g1 @vanilla,sd g3 @vanilla,mcsd k2x2 norepl @vanilla,cape g1 S44442222111 @vanilla,glide g1 @glide,glide g3 @glide"


def test_the_chains_to_record_are_the_draft_lengths_no_entry_or_run_holds():
    """GLIDE's base entries record chains of 1 and 4: lengths 2 and 3 are recorded on every dataset but
    the campaign's own, whose runs hold 3; the vanilla drafter's TokenTraces give every length."""
    base = Profile.load("data/profiles/smollm2-135m-cpu.json")
    args = SimpleNamespace(runs=RUNS, prompts="libedit:1-32", out=Path("t"))
    lacking = sorted((cand.label, dataset) for cand, dataset in campaign.lacking_chains(args, base))
    assert lacking == sorted([(f"glide g{g} @glide", d) for g in (2, 3) for d in ("mt-bench", "humaneval", "code-edit")]
                             + [("glide g2 @glide", "lib-edit")])
    assert campaign.lacking_chains(SimpleNamespace(runs="sd g1 @vanilla", prompts="libedit:1-32"), base) == []
    with pytest.raises(InputError, match="one prompt set"):
        campaign.lacking_chains(SimpleNamespace(runs=RUNS, prompts="libedit:1-4,mtbench:1-4"), base)


def test_untimed_chains_join_the_batch_runs_chains():
    """A chain StepTrace (rows keyed by prompt_id) adds its length beside the batch runs' (request_id)."""
    base = Profile.load("data/profiles/smollm2-135m-cpu.json")
    acceptance, _, _ = campaign.carried(base, {"glide"})
    batch = pd.DataFrame({"run_id": "glide B1#0", "request_id": "libedit/0", "config": json.dumps({"bins": None, "gamma": 3}),
                          "verify_tokens": 4, "accept_mask": [[True, False, False]]})
    chains = pd.DataFrame({"run_id": "r", "prompt_id": ["libedit/0", "libedit/1"], "verify_tokens": 3,
                           "config": json.dumps({"bins": None, "gamma": 2}), "accept_mask": [[True, True], [False, False]]})
    out = campaign.with_recorded_chains(acceptance, [("glide", "lib-edit", batch, "b"), ("glide", "lib-edit", chains, "c")])
    entry = out["glide/lib-edit/T0/steps"]
    assert entry["fit"]["chains_added"] == {"2": 2, "3": 1}
    assert entry["alpha_by_position_at_gamma"]["2"] == [0.5, 1.0]
    assert "b, c (2 prompts)" in entry["source"]


FIT_REL = 1e-3          # what a bounded least-squares fit resolves on another CPU, not its last digits


def test_the_bundled_batch_profile_follows_from_the_bundled_traces(tmp_path):
    """Rebuilt from its traces wherever the drafters are (its latency rows name the recording machine's
    path), the bundled batch Profile's acceptance, latency tables and engine terms come out again."""
    out = tmp_path / "p.json"
    assert cli.main(["--stages", "profile", "--batches", "1,2,4,8,16,32", "--min-prompts", "4", "--runs", RUNS,
                     "--drafters", str(tmp_path / "elsewhere"), "--out", "data/traces/smollm2-cpu-batch-drafters",
                     "--profile", str(out)]) == 0
    fresh, bundled = json.loads(out.read_text()), json.loads(open(BUNDLED).read())
    assert fresh["acceptance"] == bundled["acceptance"]          # counts and fractions: exact
    for model, table in bundled["latency"].items():
        assert fresh["latency"][model]["params"] == table["params"]           # measured medians, copied
    for method, terms in bundled["engine"]["methods"].items():
        assert fresh["engine"]["methods"][method] == pytest.approx(terms, rel=FIT_REL, abs=1e-9)


def test_batches_no_file_holds_are_recorded_and_files_that_disagree_are_refused(tmp_path):
    """A recording at batch 1-16 asked for 1-32 records 32 alone (every file gains it); a configuration
    whose file holds other batches than plain decoding's partners is one line, nothing recorded."""
    plain, sd = campaign.selected_runs("sd g1 @vanilla")
    held = {plain: {1, 2, 4, 8, 16}, sd: {1, 2, 4, 8, 16}}
    assert campaign.batches_to_record([1, 2, 4, 8, 16, 32], held, Path("steps_ar.parquet")) == [32]
    assert campaign.batches_to_record([4, 8], held, Path("steps_ar.parquet")) == []
    assert campaign.batches_to_record([1, 2], {plain: set(), sd: set()}, Path("steps_ar.parquet")) == [1, 2]
    with pytest.raises(InputError, match="steps_ar.parquet holds the partners of an earlier recording"):
        campaign.batches_to_record([1, 32], {plain: {1}, sd: set()}, Path("steps_ar.parquet"))
    assert campaign.recorded_batches(Path("data/traces/smollm2-cpu-batch-drafters/steps_ar.parquet")) >= {1, 2, 4, 8, 16}
    assert campaign.recorded_batches(tmp_path / "none.parquet") == set()


def test_the_latency_grid_times_every_batch_to_eight_and_the_recorded_ones_past_it():
    """A served load's steps visit every batch, and below ~8 rows this CPU's forward is not monotone in its rows."""
    assert campaign.latency_batches("1,2,4,8,16,32") == [1, 2, 3, 4, 5, 6, 7, 8, 16, 32]
    assert campaign.latency_batches("1,4") == [1, 2, 3, 4]
    assert campaign.latency_batches("16") == [1, 2, 3, 4, 5, 6, 7, 8, 16]
