"""The verify_lossless CLI: exit codes, report files, one-line errors."""
import subprocess
import sys


from experiments import verify_lossless


def test_exact_run_writes_report_and_exits_zero(tmp_path, capsys):
    assert verify_lossless.main(["--mode", "exact", "--cases", "12", "--max-length", "2", "--workers", "1",
                                 "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "paths/s" in out and "all mutants caught" in out
    assert (tmp_path / "report.md").read_text().startswith("# verify_lossless report")
    assert "q_not_updated" in (tmp_path / "results.csv").read_text()


def test_bad_option_is_one_line_exit_2():
    proc = subprocess.run([sys.executable, "-m", "experiments.verify_lossless", "--alpha", "2"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.strip().startswith("error: --alpha") and "Traceback" not in proc.stderr


def test_statistical_run_catches_every_mutant_small_vocab(tmp_path, capsys):
    assert verify_lossless.main(["--mode", "statistical", "--vocab", "40", "--alpha", "1e-3", "--beta", "1e-3",
                                 "--delta", "0.05", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "statistical sample size per check" in out and "s CPU" in out
    frame = __import__("pandas").read_csv(tmp_path / "results.csv")
    mutants = frame[frame["kind"] == "mutant"]
    assert len(mutants) == 7 and (mutants["true_tv"] >= 0.05).all() and (mutants["verdict"] == "ok").all()


def test_memo_run_passes_and_max_paths_refuses_in_one_line(tmp_path, capsys):
    assert verify_lossless.main(["--mode", "exact", "--cases", "4", "--max-length", "2", "--workers", "1", "--memo",
                                 "--out", str(tmp_path)]) == 0
    assert "all mutants caught" in capsys.readouterr().out
    assert verify_lossless.main(["--mode", "exact", "--cases", "4", "--max-length", "2", "--workers", "1",
                                 "--max-paths", "3", "--out", str(tmp_path / "second")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: exact mode: ") and "max_paths = 3" in err and "\n" not in err
