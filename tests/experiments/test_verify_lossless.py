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


def test_a_statistical_run_past_the_memory_is_refused_before_any_case_is_built(tmp_path, capsys, monkeypatch):
    """--vocab 32000 built 32,000 x 32,000 bigram tables (~65 GB at their peak) and was killed."""
    monkeypatch.setattr(verify_lossless, "available_memory", lambda: 16 * 10 ** 9)
    assert verify_lossless.main(["--mode", "statistical", "--vocab", "32000", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("error: --vocab 32000: the sequence checks' 32,000 x 32,000 tables would hold ~65.5 GB at their "
                   "peak, but 16.0 GB of memory is available; lower --vocab")
    assert not (tmp_path / "o").exists()


def test_a_statistical_run_past_max_minutes_is_refused_with_its_estimate(tmp_path, capsys):
    assert verify_lossless.main(["--mode", "statistical", "--vocab", "200", "--max-minutes", "0.001",
                                 "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --vocab 200 --delta 0.01: the statistical checks would draw up to ") and "\n" not in err
    assert " samples each, ~" in err and "past --max-minutes 0.001; raise --delta" in err
    assert not (tmp_path / "o").exists()


def test_progress_says_the_estimate_and_each_check_only_when_asked(tmp_path, capsys):
    argv = ["--mode", "statistical", "--vocab", "40", "--alpha", "1e-3", "--beta", "1e-3", "--delta", "0.1"]
    assert verify_lossless.main([*argv, "--out", str(tmp_path / "quiet")]) == 0
    assert capsys.readouterr().err == ""                           # pytest's stderr is no terminal
    assert verify_lossless.main([*argv, "--progress", "--out", str(tmp_path / "asked")]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("estimate: 11 statistical checks, up to ") and len(lines) == 12
    assert lines[1].startswith("statistical 1/11: rule single_draft, ")
    assert lines[-1].startswith("statistical 11/11: mutant ")
