"""The verify_lossless CLI: exit codes, report files, one-line errors."""
import subprocess
import sys

import pytest

from experiments import verify_lossless


@pytest.mark.slow  # the fixed sequence cases take ~25 s on a busy 2-core machine
def test_exact_run_writes_report_and_exits_zero(tmp_path, capsys):
    assert verify_lossless.main(["--mode", "exact", "--cases", "12", "--workers", "1", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "paths/s" in out and "all mutants caught" in out
    assert (tmp_path / "report.md").read_text().startswith("# verify_lossless report")
    assert "q_not_updated" in (tmp_path / "results.csv").read_text()


def test_bad_option_is_one_line_exit_2():
    proc = subprocess.run([sys.executable, "-m", "experiments.verify_lossless", "--alpha", "2"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.strip().startswith("error: --alpha") and "Traceback" not in proc.stderr
