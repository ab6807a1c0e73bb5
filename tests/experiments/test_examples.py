"""The bundled examples are what their commands print today (`experiments.examples`, `make
examples`): the cheap parts of each run again here and their numbers are compared with the
committed files. (examples/smollm2_cpu: tests/experiments/test_smollm2_cpu.py rebuilds its tables.)"""
from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from profiles.profile import Profile
from experiments import examples
from experiments import capacity as capacity_cli
from capacity import deploy
from capacity import plan as capacity
from sweep import scoring
from sweep.executor import LocalExecutor

ROOT = Path(__file__).resolve().parents[2]


def _argv(name: str, out: Path) -> list[str]:
    """The example's arguments writing to `out` instead of examples/<name>."""
    argv = list(examples.EXAMPLES[name][1])
    argv[argv.index("--out") + 1] = str(out)
    return argv


def _table_rows(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("|")]


def test_every_example_names_a_folder_and_a_command():
    for name, (module, argv) in examples.EXAMPLES.items():
        assert (ROOT / "examples" / name).is_dir(), name
        assert f"examples/{name}" in argv, name
        assert examples.command(name).startswith(f"python -m {module.removesuffix('.cli')} ")
    assert examples.main(["nope"]) == 2


def test_batch_crossover_example_is_what_its_command_prints(tmp_path):
    import importlib

    module, _ = examples.EXAMPLES["batch_crossover"]
    assert importlib.import_module(module).main(_argv("batch_crossover", tmp_path)) == 0
    bundled = ROOT / "examples" / "batch_crossover"
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "crossover.csv"), pd.read_csv(bundled / "crossover.csv"),
                                  check_exact=False, rtol=1e-9)
    text = (bundled / "README.md").read_text()
    assert _table_rows((tmp_path / "README.md").read_text()) == _table_rows(text)
    assert examples.command("batch_crossover") in text


@pytest.fixture(scope="module")
def capacity_run():
    """The capacity example's options and profile, as its command builds them."""
    argv = _argv("capacity_vicuna7b_h100", Path("unused"))
    opts = capacity_cli.options_from_args(capacity_cli.build_parser().parse_args(argv))
    profile = Profile.load(capacity.DEFAULT_PROFILE).on_hardware(opts.hardware)
    return opts, profile, ROOT / "examples" / "capacity_vicuna7b_h100"


def test_capacity_example_names_the_candidates_the_command_finds(capacity_run):
    """Its candidates (the closed forms' best per method) and their configurations, tried at every TP."""
    opts, profile, bundled = capacity_run
    found = capacity.candidates(profile, opts, LocalExecutor(workers=1))
    table = pd.read_csv(bundled / "candidates.csv")
    assert sorted(set(table["tp"])) == list(opts.tp)
    table = table[table["tp"] == min(opts.tp)]                  # each candidate once per TP tried
    assert [label for label, *_ in found] == list(table["label"])
    assert [config for _, _, config, _ in found] == [json.loads(c) for c in table["config"]]


def test_capacity_example_crossover_and_plain_load_are_what_the_command_prints(capacity_run):
    """The crossover of its best configurations and plain decoding's highest load per GPU (the
    cheapest of the load searches) run again give the committed numbers; its README's table
    states capacity.csv's numbers and the command that made them."""
    opts, profile, bundled = capacity_run
    best = pd.read_csv(bundled / "capacity.csv").assign(config=lambda f: f["config"].map(json.loads))
    crossover = capacity._crossover(profile, best, opts, opts.load.batch_load(opts.seed))
    pd.testing.assert_frame_equal(crossover, pd.read_csv(bundled / "crossover" / "crossover.csv"),
                                  check_exact=False, rtol=1e-9, check_dtype=False)
    label, method, config, start = capacity.candidates(profile, opts, LocalExecutor(workers=1))[0]
    assert method == "ar"
    row = best.set_index("method").loc["ar"]
    tp = int(row["tp"])
    cap, _ = deploy.batch_cap(profile, method, config, opts.load, tp, opts.seed)
    assert cap == row["batch_cap"]
    plain = capacity.max_load_task(capacity.LoadTask(profile.to_dict(), label, method, config,
                                                     replace(opts.load, max_batch=cap), opts.slo, opts.seed,
                                                     start_rate=start * tp, tp=tp))
    assert plain["max_rate"] == pytest.approx(row["max_rate"], rel=1e-9)
    text = (bundled / "README.md").read_text()
    assert examples.command("capacity_vicuna7b_h100") in text
    for r in best.itertuples():
        assert re.search(rf"\| {r.method} \| {re.escape(r.label)} \| {r.tp} \| {r.replicas:.0f} \| {r.gpus:.0f} "
                         rf"\({r.gpus_lo:.0f}-{r.gpus_hi:.0f}\) \| {r.max_rate:.2f} \({r.max_rate_lo:.2f}-{r.max_rate_hi:.2f}\); "
                         rf"{r.rate_per_gpu:.2f} \| {r.usd_per_m_tok:.3f} \|", text), r.label
