"""experiments.reproduce end to end: GLIDE Table 1 within 1% (bar the one cell the paper's own rounding
rules out), every section present, files written, bad --out rejected in one line; and the benchmark CLI."""
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd

from experiments import reproduce as reproduce_cli
from experiments.bench import costmodel as bench_costmodel
from papers import heldout, reproduce


def test_reproduce_writes_report_and_meets_glide_target(tmp_path, capsys):
    from papers import MODELS

    assert reproduce_cli.main(["--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "worst (paper inputs)" in printed and "leave one table out: speedup cells median" in printed
    assert "leave one model size out: speedup cells median" in printed and "sweep's MCSD pick within 2%" in printed
    comparisons = pd.read_csv(tmp_path / "comparisons.csv")
    profile_sections = {heldout.profile_section(paper, c.kind) for paper, m in MODELS.items() for c in m.cells()}
    assert set(reproduce.SECTIONS) | profile_sections == set(comparisons["section"])
    main = comparisons[comparisons["variant"] == reproduce.MAIN]
    for paper in ("MCSD", "CORAL"):      # the target: median |error| of the speedups <= 3%
        assert main.loc[main["section"] == f"{paper} speedups (bundled profiles)", "rel_error"].abs().median() <= 0.03
    loto = pd.read_csv(tmp_path / "leave_one_table_out.csv")
    held_out = set(zip(loto["paper"], loto["scheme"], loto["held_out"].astype(str)))
    assert {("mcsd", reproduce.LOTO, "4"), ("coral", reproduce.LOTO, "2"), ("mcsd", reproduce.LOMSO, "13B"),
            ("coral", reproduce.LOMSO, "Q2.5-14B")} <= held_out
    held = comparisons[comparisons["variant"] == reproduce.LOTO]
    assert len(held) == len(main[main["section"].str.endswith("(bundled profiles)")])
    assert comparisons["role"].notna().all()
    glide = comparisons[comparisons["section"] == "GLIDE Table 1 E(Spd)"]
    assert len(glide) == 44
    explained = glide["assumption"].fillna("").str.contains("outside the printed rounding")
    assert (glide.loc[~explained, "rel_error"].abs() <= 0.01).all()
    assert explained.sum() <= 1
    for section, grp in comparisons.groupby("section"):
        assert (grp["variant"] == reproduce.MAIN).any(), section
    choices = pd.read_csv(tmp_path / "sweep_vs_paper.csv")
    assert len(choices) == 17 and (choices["predicted_pick"] >= choices["predicted_paper_best"].fillna(0) - 1e-9).all()
    targets = pd.read_csv(tmp_path / "targets.csv")
    assert {"speedup", "tau"} <= set(targets["kind"]) and set(targets["met"]) <= {"yes", "no"}
    families = pd.read_csv(tmp_path / "acceptance_families.csv")
    traces = len(list(Path("data/traces/smollm2-cpu").glob("tokens_*.parquet")))   # every bundled TokenTrace
    assert traces >= 4 and len(families) == traces * len(reproduce.heldout.FAMILIES)
    report = (tmp_path / "report.md").read_text()
    for heading in ("## Findings", "## Held out", "## Targets", "## Warnings of the fits",
                    "## The sweep against MCSD's best configurations", "## Acceptance curve family"):
        assert heading in report, heading
    assert "sensitivity" in report and "validation (its model size held out)" in report
    assert (tmp_path / "summary.csv").exists()


def _cells(line: str) -> int:
    """Cells of a markdown table line: '|' not escaped as '\\|' separates them."""
    return len(re.findall(r"(?<!\\)\|", line)) - 1


def test_report_tables_keep_their_columns_when_a_cell_holds_a_bar():
    """The worst row is written 'row | column': escaped, so the summary table keeps its columns."""
    comparisons = pd.DataFrame({"section": ["S"] * 2, "paper": ["p"] * 2, "table": ["1"] * 2,
                                "row": ["a | b", "c"], "column": ["x", "y"], "variant": [reproduce.MAIN] * 2,
                                "published": [1.0, 2.0], "predicted": [1.1, 2.0], "rel_error": [0.1, 0.0],
                                "assumption": ["", ""], "role": ["prediction", "prediction"]})
    text = reproduce.markdown_report(comparisons, reproduce.summarise(comparisons), pd.DataFrame(), 0.1)
    assert "a \\| b" in text
    tables, current = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|") and _cells(line) > 0:
            current.append(line)
        elif current:
            tables.append(current)
            current = []
    assert len(tables) >= 2
    for table in tables:                   # every row as wide as its header
        assert {_cells(line) for line in table} == {_cells(table[0])}, table


def test_reproduce_rejects_a_file_as_out_dir(tmp_path):
    target = tmp_path / "file.txt"
    target.write_text("x")
    proc = subprocess.run([sys.executable, "-m", "experiments.reproduce", "--out", str(target)],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.strip().startswith("error:") and "Traceback" not in proc.stderr


def test_bench_costmodel_runs_small(capsys):
    assert bench_costmodel.main(["--n", "2000", "--repeats", "2"]) == 0
    assert "configs/s" in capsys.readouterr().out
    assert bench_costmodel.main(["--n", "0"]) == 2
