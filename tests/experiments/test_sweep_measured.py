"""A measured deployment is the sweep's subject: a Profile that merged an engine file answers for
that file's dataset and temperature where none is asked, the report and the terminal name the
source, and the engine's ITL stands beside the predicted step time of the configuration it ran."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from calibrate.ingest.__main__ import main as ingest
from experiments import sweep as sweep_cli

ROOT = Path(__file__).resolve().parents[2]
SCRAPES = [str(ROOT / "examples" / "ingest" / f"vllm_metrics_{w}.prom") for w in ("before", "after")]
CORAL8B = ROOT / "data" / "profiles" / "coral-llama-3-8b-a6000.json"


def _merged(tmp_path: Path, dataset: str) -> Path:
    out = tmp_path / "measured.json"
    assert ingest(["vllm-metrics", *SCRAPES, "--drafter", "eagle", "--target", "llama-3-8b", "--dataset", dataset,
                   "--temperature", "0", "--profile", str(CORAL8B), "--out", str(out)]) == 0
    return out


def test_the_measured_deployment_is_answered_first_with_measured_beside_predicted(tmp_path, capsys):
    profile = _merged(tmp_path, "humaneval")      # not the dataset a sweep takes first (MT-Bench)
    capsys.readouterr()
    out = tmp_path / "sweep"
    assert sweep_cli.main(["--profile", str(profile), "--methods", "coral", "--out", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("measured deployment: coral-llama-3-8b-a6000 answers for eagle-chain on humaneval "
                                 "at T=0 (vllm-metrics: vllm_metrics_before.prom, vllm_metrics_after.prom); coral g3: "
                                 "ITL p50 measured 15.0 ms, predicted ")
    answers = pd.read_csv(out / "deployments.csv")
    assert set(answers["dataset"]) == {"humaneval"}
    table = pd.read_parquet(out / "tables" / "coral.parquet")
    ran = table[(table["acceptance"] == "eagle-chain/humaneval/T0/vllm-metrics") & (table["gamma"] == 3)].iloc[0]
    assert ran["verified_per_step"] == 4          # the chain vLLM ran, not the drafter's 61-token tree
    report = (out / "report.md").read_text()
    assert report.index("## Measured deployment: coral-llama-3-8b-a6000") < report.index("## What to run")
    assert "| measured by the engine | 15.0 | 15.9 | – | – |" in report
    assert f"| predicted, batch 1 | {1000 * ran['step_s']:.1f} |" in report


def test_an_asked_dataset_still_wins_over_the_measured_one(tmp_path, capsys):
    profile = _merged(tmp_path, "humaneval")
    out = tmp_path / "sweep"
    assert sweep_cli.main(["--profile", str(profile), "--methods", "coral", "--dataset", "mt-bench",
                           "--out", str(out), "--no-progress"]) == 0
    assert set(pd.read_csv(out / "deployments.csv")["dataset"]) == {"mt-bench"}
    assert "No scored configuration used `eagle-chain/humaneval/T0/vllm-metrics`" in (out / "report.md").read_text()
