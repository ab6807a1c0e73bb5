"""calibrate.transfer: a Profile for a target no Profile measured, priced from its architecture on the
hardware terms of a Profile that was calibrated; refused where it cannot be done."""
import json

import numpy as np
import pytest

from calibrate import transfer
from papers import build as paper_profiles
from profiles.profile import Profile
from common.errors import InputError
from costmodel.params import ARCHITECTURES

PROFILES = paper_profiles.DEFAULT_OUT
GRID = (np.array([1, 8, 61]), np.array([0, 300, 2000]))


def _load(name: str) -> Profile:
    return Profile.load(PROFILES / f"{name}.json")


def _same_latency(a: Profile, model_a: str, b: Profile, model_b: str) -> bool:
    return np.allclose(a.seconds(model_a, GRID[0][:, None], GRID[1][None, :]),
                       b.seconds(model_b, GRID[0][:, None], GRID[1][None, :]), rtol=1e-12)


def test_a_paper_size_transferred_from_another_is_the_paper_fits_own():
    """MCSD's 33B Profile moved to LLaMA-13B prices the 13B target and both draft models exactly as the
    paper fit's own 13B Profile does (one A6000 model prices all), and keeps its engine calibration."""
    moved = transfer.transfer_profile(_load("mcsd-llama-33b-a6000"), "llama-13b")
    own = _load("mcsd-llama-13b-a6000")
    assert moved.target == "llama-13b" and _same_latency(moved, "llama-13b", own, "llama-13b")
    for draft in ("llama-68m", "llama-160m"):
        assert _same_latency(moved, draft, own, draft)
    assert moved.engine.pooled == own.engine.pooled
    entry = moved.acceptance_model("llama-68m/alpaca/T0")
    assert entry.source.startswith("ASSUMED: measured on llama-33b")


def test_a_drafter_built_from_its_target_is_rebuilt_for_the_new_one():
    """CORAL's Llama3-8B Profile moved to Qwen2.5-14B: the EAGLE head and the router are rebuilt on the
    14B's dimensions and priced as the paper fit's own 14B Profile prices them."""
    moved = transfer.transfer_profile(_load("coral-llama-3-8b-a6000"), "qwen2.5-14b")
    own = _load("coral-qwen2.5-14b-a6000")
    assert _same_latency(moved, "qwen2.5-14b", own, "qwen2.5-14b")
    assert _same_latency(moved, moved.drafters["coral"].model, own, own.drafters["coral"].model)
    assert moved.arch(moved.drafters["coral"].model).hidden == 5120


def test_an_hf_config_acceptance_and_workload_from_the_user(tmp_path):
    config = {"num_hidden_layers": 40, "hidden_size": 5120, "intermediate_size": 13824,
              "num_attention_heads": 40, "vocab_size": 32000}
    path = tmp_path / "my-13b" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(config))
    entry = {"drafter": "llama-68m", "temperature": 0.0, "dataset": "cnn", "alpha": 0.6,
             "alpha_at_k": {"1": 0.6, "4": 0.8}, "source": "mine"}
    moved = transfer.transfer_profile(_load("mcsd-llama-33b-a6000"), str(path), acceptance={"llama-68m/cnn/T0": entry},
                                      workloads=dict([transfer.parse_workload("cnn")]))
    assert moved.target == "my-13b" and moved.arch("my-13b").n_layers == 40
    assert moved.acceptance_model("llama-68m/cnn/T0").alpha_at(4) == 0.8
    assert moved.workload_ctx("cnn") == pytest.approx(1041 + 75 / 2)
    assert _same_latency(moved, "my-13b", _load("mcsd-llama-13b-a6000"), "llama-13b")


def test_the_command_line_writes_a_profile_the_sweep_prices(tmp_path, capsys):
    out = tmp_path / "p.json"
    assert transfer.main(["--profile", str(PROFILES / "coral-llama-3-8b-a6000.json"), "--target", "llama-2-13b",
                          "--workload", "long=2000,256", "--out", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    import methods

    profile = Profile.load(out)
    assert profile.setups_for(methods.get("coral"), temperature=0.0) and profile.workload_ctx("long") == 2128


@pytest.mark.parametrize("args,message", [
    (["--target", "no-such-model"], "not a model of the profile, a registry architecture or a config.json"),
    (["--target", "llama-13b", "--workload", "x=1"], "lengths must be PROMPT_TOKENS,NEW_TOKENS"),
    (["--target", "llama-13b", "--workload", "nosuchset"], "no workload lengths for dataset 'nosuchset'"),
    (["--target", "llama-13b", "--acceptance", "missing.json"], "--acceptance file not found"),
])
def test_bad_input_is_one_line(args, message, tmp_path, capsys):
    code = transfer.main(["--profile", str(PROFILES / "mcsd-llama-33b-a6000.json"), "--out", str(tmp_path / "o.json"),
                          *args])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1


def test_out_and_acceptance_files_are_checked_before_anything_is_written(tmp_path, capsys):
    """An existing --out is replaced only with --overwrite; a folder is refused; a bad entry of the
    --acceptance file is named with the file (no temperature is not greedy)."""
    base = ["--profile", str(PROFILES / "mcsd-llama-33b-a6000.json"), "--target", "llama-13b"]
    mine = tmp_path / "mine.json"
    mine.write_text("mine\n")
    folder = tmp_path / "x.json"
    folder.mkdir()
    bad = tmp_path / "acc.json"
    bad.write_text(json.dumps({"llama-68m/cnn/T0": {"drafter": "llama-68m", "alpha": 0.8}}))
    for args, message in (
            (["--out", str(mine)], f"--out {mine} already exists (another run's output); use --overwrite"),
            (["--out", str(folder), "--overwrite"], f"--out {folder} is a directory; give a file name"),
            (["--out", str(tmp_path / "o.json"), "--acceptance", str(bad)],
             f"{bad}: acceptance model 'llama-68m/cnn/T0' states no temperature")):
        code = transfer.main(base + args)
        err = capsys.readouterr().err
        assert code == 2 and err.startswith(f"error: {message}") and err.count("\n") == 1, err
    assert mine.read_text() == "mine\n" and not (tmp_path / "o.json").exists()
    assert transfer.main(base + ["--out", str(mine), "--overwrite"]) == 0 and Profile.load(mine)


def test_a_measured_table_cannot_be_moved_to_another_architecture():
    with pytest.raises(InputError, match="measured 'table'"):
        transfer.transfer_profile(_load("smollm2-135m-cpu"), "llama-13b")
    with pytest.raises(InputError, match="names drafter 'nobody'"):
        transfer.transfer_profile(_load("mcsd-llama-33b-a6000"), "llama-13b",
                                  acceptance={"k": {"drafter": "nobody", "alpha": 0.5}})
    assert "llama-13b" in ARCHITECTURES
