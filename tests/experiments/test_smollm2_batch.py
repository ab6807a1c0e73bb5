"""The batch campaign's choice of configurations (--runs): plain decoding always first, an unknown
label one line naming the ones there are, and only the drafters the chosen runs use timed and carried."""
from types import SimpleNamespace

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
