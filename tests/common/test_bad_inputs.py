"""Table-driven bad inputs across the CLIs: each is refused with exit code 2 and one line on stderr
naming the bad value, before any heavy work (every row runs the CLI's main in-process; none loads
a real model)."""
import importlib
from pathlib import Path

import pytest

P = "data/profiles/glide-vicuna-7b-h800.json"
SMALL_SWEEP = ["--methods", "sd", "--budget", "1", "--rescore", "0", "--profile", P, "--no-progress"]
TINY_GRID = ["--tokens", "1", "--ctx", "16", "--batch", "1", "--repeats", "1", "--min-repeats", "1", "--warmup", "0",
             "--quiet"]
ENGINE = "runtime.engine.__main__"
RECORD = ["--target", "tiny", "--prompts", "mtbench"]


# (CLI module, argv ({out}: a fresh folder), substring the one-line message must hold)
ROWS = [
    ("experiments.sweep", ["--methods", "nope", "--out", "{out}"], "nope"),
    ("experiments.sweep", ["--temperature", "-1", "--out", "{out}"], "-1"),
    ("experiments.sweep", ["--batch", "0", "--out", "{out}"], "--batch"),
    ("experiments.sweep", ["--budget", "0", "--out", "{out}"], "--budget"),
    ("experiments.sweep", ["--hardware", "TPU9", "--out", "{out}"], "TPU9"),
    ("experiments.sweep", ["--profile", "missing.json", "--out", "{out}"], "missing.json"),
    ("experiments.sweep", ["--sim-repeats", "0", "--out", "{out}"], "--sim-repeats"),
    ("experiments.sweep", ["--rescore", "-1", "--out", "{out}"], "--rescore"),
    ("experiments.sweep", ["--token-trace", "missing.parquet", "--out", "{out}"], "missing.parquet"),
    # a SmolLM2 trace is not relabelled as a Vicuna-13B one
    ("experiments.sweep", ["--token-trace", "data/traces/smollm2-cpu/tokens_vanilla_mt-bench.parquet",
                           "--profile", "data/profiles/glide-vicuna-13b-h800.json", "--out", "{out}"], "smollm2"),
    ("experiments.sweep", ["--workers", "0", *SMALL_SWEEP, "--out", "{out}"], "--workers"),
    ("experiments.sweep", ["--workers", "-3", *SMALL_SWEEP, "--out", "{out}"], "--workers"),
    ("experiments.sweep", ["--ctx-len", "0", *SMALL_SWEEP, "--out", "{out}"], "--ctx-len"),
    ("experiments.simulate", ["stream", "--profile", P, "--out", "{out}", "--method", "sd", "--config", '{"gama": 8}'],
     "gama"),
    ("experiments.simulate", ["stream", "--profile", P, "--out", "{out}", "--method", "sd", "--repeats", "0"],
     "--repeats"),
    ("experiments.simulate", ["stream", "--profile", P, "--out", "{out}", "--method", "sd", "--n-tokens", "0"],
     "--n-tokens"),
    ("experiments.simulate", ["stream", "--profile", "missing.json", "--out", "{out}", "--method", "sd"], "missing.json"),
    ("experiments.simulate", ["serve", "--profile", P, "--out", "{out}", "--method", "sd", "--rates", "abc"], "abc"),
    ("experiments.simulate", ["serve", "--profile", P, "--out", "{out}", "--method", "sd", "--cv", "nan"], "--cv"),
    ("experiments.simulate", ["serve", "--profile", P, "--out", "{out}", "--method", "sd", "--replicas", "0"],
     "replicas"),
    ("experiments.simulate", ["crossover", "--profile", P, "--out", "{out}", "--batches", "0"], "--batches"),
    ("experiments.capacity", ["--cv", "nan", "--out", "{out}"], "--cv"),
    ("experiments.capacity", ["--duration", "inf", "--out", "{out}"], "--duration"),
    ("experiments.capacity", ["--workers", "0", "--out", "{out}"], "--workers"),
    ("experiments.capacity", ["--prompt-len", "fixed:abc", "--out", "{out}"], "fixed:abc"),
    ("experiments.capacity", ["--methods", "nope", "--out", "{out}"], "nope"),
    ("experiments.capacity", ["--hardware", "TPU9", "--out", "{out}"], "TPU9"),
    ("experiments.capacity", ["--slo-tpot-p99", "-5", "--out", "{out}"], "--slo-tpot-p99"),
    ("experiments.capacity", ["--profile", "README.md", "--out", "{out}"], "README.md"),
    # loads bounded before they run; a trace checked when read and never left unused
    ("experiments.simulate", ["serve", "--profile", P, "--out", "{out}", "--method", "sd", "--rates", "1000000"],
     "the offered loads: ~3e+08 requests, ~"),
    ("experiments.simulate", ["serve", "--profile", P, "--out", "{out}", "--method", "sd", "--max-hours", "nan"],
     "--max-hours must be a number of hours > 0, got nan"),
    ("experiments.capacity", ["--target-rate", "1e12", "--out", "{out}"], "--target-rate 1e+12 req/s for --duration 60 s"),
    ("experiments.capacity", ["--max-hours", "0", "--out", "{out}"], "--max-hours must be a number of hours > 0"),
    ("experiments.capacity", ["--arrival", "trace", "--out", "{out}"], "--arrival trace needs --arrival-trace CSV"),
    ("experiments.capacity", ["--arrival-trace", "README.md", "--out", "{out}"],
     "--arrival-trace README.md is replayed only with --arrival trace (--arrival is poisson)"),
    ("experiments.capacity", ["--arrival", "trace", "--arrival-trace", "README.md", "--out", "{out}"],
     "README.md: missing column(s) arrival_s"),
    ("experiments.capacity", ["--arrival", "trace", "--arrival-trace", "missing.csv", "--out", "{out}"],
     "arrival trace missing.csv: file not found"),
    ("calibrate.fit", ["--out", "{out}/p.json", "--gamma", "0"], "--gamma"),
    ("calibrate.fit", ["--out", "{out}/p.json", "--tokens", "missing.parquet"], "missing.parquet"),
    ("calibrate.fit", ["--out", "{out}/p.json", "--arch", "foo"], "foo"),
    ("calibrate.fit", ["--out", "{out}/p.json", "--target", "nope",
                       "--tokens", "data/traces/smollm2-cpu/tokens_vanilla_mt-bench.parquet"], "nope"),
    ("traces.check_replay", ["--min-agreement", "5", "--out", "{out}"], "--min-agreement"),
    ("traces.check_replay", ["--min-agreement", "nan", "--out", "{out}"], "--min-agreement"),
    ("traces.check_replay", ["--threads", "0", "--out", "{out}"], "--threads"),
    ("traces.check_replay", ["--methods", "nope", "--out", "{out}"], "nope"),
    ("traces.check_replay", ["--prompts", "mtbench:abc", "--out", "{out}"], "mtbench:abc"),
    ("traces.check_replay", ["--drafter", "layers:x", "--out", "{out}"], "layers:x"),
    ("traces.record", [*RECORD, "--method", "nope", "--out", "{out}/r.parquet"], "nope"),
    ("traces.record", [*RECORD, "--method", "sd", "--limit", "0", "--out", "{out}/r.parquet"], "got 0"),
    ("traces.record", [*RECORD, "--method", "sd", "--temperature", "-1", "--out", "{out}/r.parquet"], "-1"),
    ("traces.record", ["--target", "tiny", "--method", "sd", "--prompts", "nope.jsonl", "--out", "{out}/r.parquet"],
     "nope.jsonl"),
    ("traces.record", [*RECORD, "--method", "sd", "--config", '{"gama": 8}', "--out", "{out}/r.parquet"], "gama"),
    ("traces.record", [*RECORD, "--method", "ar", "--threads", "0", "--out", "{out}/r.parquet"], "--threads"),
    ("traces.record", [*RECORD, "--method", "ar", "--max-new-tokens", "0", "--out", "{out}/r.parquet"],
     "--max-new-tokens"),
    ("traces.timing", ["--model", "tiny", "--repeats", "0", "--out", "{out}/t.parquet"], "--repeats"),
    ("traces.timing", ["--model", "tiny", "--batch", "abc", "--out", "{out}/t.parquet"], "abc"),
    ("traces.timing", ["--model", "tiny", "--point-seconds", "-1", *TINY_GRID, "--out", "{out}/t.parquet"],
     "--point-seconds"),
    (ENGINE, ["--target", "tiny", "--prompts", "mtbench:abc"], "mtbench:abc"),
    (ENGINE, ["--target", "tiny", "--prompts", "missing.jsonl"], "missing.jsonl"),
    (ENGINE, ["--target", "tiny", "--drafter", "layers:x"], "layers:x"),
    (ENGINE, ["--target", "tiny", "--top-p", "0"], "--top-p"),
    (ENGINE, ["--target", "tiny", "--temperature", "nan"], "--temperature"),
    (ENGINE, ["--target", "nope"], "model 'nope'"),      # at once: no hub retries (one line, online or not)
    (ENGINE, ["--target", "tiny", "--methods", "nope"], "nope"),
    (ENGINE, ["--target", "tiny", "--max-new-tokens", "0"], "--max-new-tokens"),
    (ENGINE, ["--target", "tiny", "--threads", "0"], "--threads"),
    ("experiments.verify_lossless", ["--alpha", "2", "--out", "{out}"], "--alpha"),
    ("experiments.verify_lossless", ["--delta", "nan", "--out", "{out}"], "--delta"),
    ("experiments.verify_lossless", ["--max-paths", "0", "--out", "{out}"], "--max-paths"),
    ("experiments.verify_lossless", ["--cases", "0", "--out", "{out}"], "--cases"),
    ("experiments.verify_lossless", ["--workers", "0", "--out", "{out}"], "--workers"),
    ("experiments.verify_lossless", ["--max-minutes", "0", "--out", "{out}"], "--max-minutes is 0.0, must be"),
    ("experiments.verify_lossless", ["--max-minutes", "nan", "--out", "{out}"], "--max-minutes is nan, must be"),
    ("experiments.verify_lossless", ["--mode", "statistical", "--vocab", "100", "--max-minutes", "0.0001", "--out",
                                     "{out}"], "past --max-minutes 0.0001"),
    ("training.__main__", ["vanilla", "--target", "tiny", "--minutes", "0", "--out", "{out}"], "--minutes"),
    ("training.__main__", ["vanilla", "--target", "tiny", "--steps", "0", "--out", "{out}"], "--steps"),
    ("training.__main__", ["vanilla", "--target", "tiny", "--set", "foo=1", "--out", "{out}"], "foo"),
    ("training.__main__", ["vanilla", "--target", "tiny", "--lr", "-1", "--out", "{out}"], "-1"),
    # argparse's own errors: one line through common.errors.CliParser
    ("experiments.sweep", ["--nope", "--out", "{out}"], "--nope"),
    ("experiments.sweep", ["--batch", "abc", "--out", "{out}"], "abc"),
    ("experiments.capacity", ["--nope", "--out", "{out}"], "--nope"),
    ("experiments.simulate", ["stream", "--profile", P, "--out", "{out}", "--method", "sd", "--repeats", "abc"], "abc"),
    ("experiments.simulate", ["stream", "--profile", P, "--out", "{out}", "--method", "nope"], "nope"),
    ("experiments.simulate", ["nope"], "nope"),
    ("calibrate.fit", ["--out", "{out}/p.json", "--gamma", "x"], "'x'"),
    ("traces.record", [*RECORD, "--method", "sd", "--nope", "--out", "{out}/r.parquet"], "--nope"),
    ("traces.check_replay", ["--threads", "abc", "--out", "{out}"], "abc"),
    ("traces.timing", ["--model", "tiny", "--repeats", "abc", "--out", "{out}/t.parquet"], "abc"),
    (ENGINE, ["--target", "tiny", "--nope"], "--nope"),
    ("experiments.verify_lossless", ["--alpha", "abc", "--out", "{out}"], "abc"),
    ("training.__main__", ["nope", "--out", "{out}"], "nope"),
    # valid names listed; the option named, not an internal setting
    ("calibrate.fit", ["--out", "{out}/p.json", "--hardware", "TPU9", "--target", "smollm2-135m",
                       "--tokens", "data/traces/smollm2-cpu/tokens_vanilla_mt-bench.parquet"], "H100"),
    ("experiments.sweep", ["--dataset", "nope", *SMALL_SWEEP, "--out", "{out}"], "gsm8k"),
    ("experiments.sweep", ["--temperature", "0.3", *SMALL_SWEEP, "--out", "{out}"], "0.3"),
    ("experiments.capacity", ["--temperature", "0.3", "--out", "{out}"], "recorded: 1"),
    ("experiments.sweep", ["--budget", "100000000", "--methods", "mcsd", "--profile",
                           "data/profiles/mcsd-llama-13b-a6000.json", "--out", "{out}"], "GB of memory is available"),
    ("training.__main__", ["vanilla", "--target", "tiny", "--batch-size", "0", "--out", "{out}"], "--batch-size"),
    ("training.__main__", ["vanilla", "--target", "tiny", "--eval-every", "0", "--out", "{out}"], "--eval-every"),
    ("training.__main__", ["vanilla", "--target", "tiny", "--generated", "0", "--edit", "0", "--source", "1", "--out", "{out}"],
     "--generated"),
    ("training.__main__", ["vanilla", "--target", "tiny", "--seq-len", "0", "--out", "{out}"], "--seq-len"),
    # sizes bounded before allocation: refused by the sweep's estimate, nothing written
    ("experiments.sweep", ["--sim-tokens", "1000000000", "--methods", "sd", "--profile", P, "--out", "{out}"],
     "--sim-tokens 1000000000: each of"),
    ("experiments.sweep", ["--sim-repeats", "1000000000", "--methods", "sd", "--profile", P, "--out", "{out}"],
     "--sim-repeats 1000000000 --rescore 2: the sweep would run ~"),
    ("experiments.sweep", ["--max-hours", "0", *SMALL_SWEEP, "--out", "{out}"], "--max-hours must be a number of hours"),
    ("experiments.sweep", ["--max-hours", "nan", *SMALL_SWEEP, "--out", "{out}"], "--max-hours must be a number"),
    ("experiments.sweep", ["--methods", "", "--out", "{out}"], "no method named in ''"),
    ("experiments.sweep", ["--batch-sizes", "100000", *SMALL_SWEEP, "--out", "{out}"],
     "--batch-sizes: 100,000 sequences at once fit in no profile's KV memory (glide-vicuna-7b-h800: at most 289"),
    # a CAPE bin outside 1..35 is refused by every layer that runs one (not run as S=1)
    ("experiments.simulate", ["stream", "--profile", P, "--out", "{out}", "--method", "cape", "--config",
                              "cape g4 S88886666440"], "1..35"),
    ("experiments.simulate", ["stream", "--profile", P, "--out", "{out}", "--method", "cape", "--config",
                              '{"bins": [36, 8, 8, 8, 6, 6, 6, 6, 4, 4, 2]}'], "36"),
    ("traces.record", [*RECORD, "--method", "cape", "--config", "cape g4 S88886666440", "--out", "{out}/r.parquet"],
     "1..35"),
    (ENGINE, ["--target", "tiny", "--methods", '{"bins": [0, 8, 8, 8, 6, 6, 6, 6, 4, 4, 2]}'.join(["cape:", ""])], "0"),
]


def _id(row) -> str:
    values = row.values if hasattr(row, "values") else row
    module, argv, _ = values
    return f"{module.split('.')[-1] if module != ENGINE else 'engine'}:{' '.join(a for a in argv if '{out}' not in a)}"



def cli_main(module: str):
    """The `main` of `python -m <module>`: the module's own, or its package's command line (`<module>.cli`)."""
    found = importlib.import_module(module)
    return found.main if hasattr(found, "main") else importlib.import_module(f"{module}.cli").main


@pytest.mark.parametrize("module, argv, expected", ROWS, ids=[_id(r) for r in ROWS])
def test_bad_input_is_refused_in_one_line(module, argv, expected, tmp_path, capsys):
    main = cli_main(module)
    code = main([a.replace("{out}", str(tmp_path / "out")) for a in argv])
    err = capsys.readouterr().err.strip()
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, f"exit code {code}; stderr: {err[-300:]}"
    assert len(lines) == 1 and lines[0].startswith("error: "), err[-300:]
    assert expected in lines[0], lines[0]
    assert not [p for p in tmp_path.rglob("*") if p.is_file()], "a refused run wrote files"


# A Profile with one bad field, run by each command line that reads Profiles: (edit, the one line's
# words after "error: <file>: "). Every field is checked where the file is read, in its physical range.
def _first(entries: dict) -> dict:
    return next(iter(entries.values()))


BAD_PROFILES = [
    (lambda d: _first(d["latency"])["params"].update(bw_eff=50),
     "latency model 'vicuna-7b': bw_eff must be an efficiency in (0, 1]"),
    (lambda d: _first(d["latency"])["params"].update(overhead_s="abc"),
     "latency model 'vicuna-7b': overhead_s must be a number of seconds >= 0, got 'abc'"),
    (lambda d: d.update(drafters=[]), "profile field 'drafters' must be an object (name -> entry), got list"),
    (lambda d: d.update(engine={"methods": []}), "engine.methods must be an object (method -> calibration), got list"),
    (lambda d: d.update(workload={"mt-bench": {"prompt_tokens": -50, "new_tokens": 64}}),
     "workload.mt-bench.prompt_tokens must be a number of tokens >= 0, got -50"),
    (lambda d: d.update(engine={"pooled": {"verify_scale": 0}}), "engine.pooled.verify_scale is 0"),
]
PROFILE_CLIS = [
    ("experiments.sweep", ["--methods", "sd", "--profile", "{profile}", "--out", "{out}"]),
    ("experiments.simulate", ["stream", "--profile", "{profile}", "--method", "sd", "--out", "{out}"]),
    ("experiments.capacity", ["--profile", "{profile}", "--methods", "sd", "--out", "{out}"]),
]


@pytest.mark.parametrize("edit, expected", BAD_PROFILES, ids=[m.split(":")[0][:40] for _, m in BAD_PROFILES])
@pytest.mark.parametrize("module, argv", PROFILE_CLIS, ids=[m.split(".")[-1] for m, _ in PROFILE_CLIS])
def test_a_bad_profile_field_is_refused_naming_file_and_field(module, argv, edit, expected, tmp_path, capsys):
    import json

    raw = json.loads(Path(P).read_text())
    edit(raw)
    profile = tmp_path / "bad.json"
    profile.write_text(json.dumps(raw))
    code = cli_main(module)([a.replace("{out}", str(tmp_path / "out")).replace("{profile}", str(profile))
                             for a in argv])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith(f"error: {profile}: {expected}"), lines
    assert not (tmp_path / "out").exists()


def test_the_table_covers_enough_bad_inputs_across_the_clis():
    plain = [r for r in ROWS if not hasattr(r, "marks")]
    assert len(plain) >= 25 and len({r[0] for r in plain}) >= 9


# A rerun into an --out holding another run's files: (CLI module, argv ({out}: the occupied folder),
# what occupies it: "run" = a previous run's manifest and file, "files" = files without a manifest,
# "file" = the single output file exists). Refused in one line naming the folder and --overwrite.
SMOLLM2 = "data/profiles/smollm2-135m-cpu.json"
RERUN_ROWS = [
    ("experiments.sweep", [*SMALL_SWEEP, "--out", "{out}"], "run"),
    ("experiments.sweep", [*SMALL_SWEEP, "--out", "{out}"], "files"),
    ("experiments.simulate", ["stream", "--profile", P, "--method", "sd", "--config", "sd g4", "--out", "{out}"], "run"),
    ("experiments.simulate", ["serve", "--profile", P, "--method", "sd", "--config", "sd g4", "--out", "{out}"], "run"),
    ("experiments.simulate", ["crossover", "--profile", P, "--batches", "1,2", "--out", "{out}"], "files"),
    ("experiments.capacity", ["--profile", P, "--out", "{out}"], "run"),
    ("experiments.verify_lossless", ["--mode", "exact", "--out", "{out}"], "run"),
    ("experiments.reproduce", ["--out", "{out}"], "run"),
    ("traces.check_replay", ["--target", "tiny", "--out", "{out}"], "run"),
    ("experiments.gpu_campaign", ["--tiny", "--out", "{out}"], "run"),
    ("experiments.fidelity", ["--profile", SMOLLM2, "--target", "smollm2", "--prompts", "mtbench:48-50", "--out", "{out}"],
     "files"),
    ("traces.timing", ["--model", "tiny", *TINY_GRID, "--out", "{out}/t.parquet"], "file"),
    # every other writer: refused before any model loads or any fit runs
    ("calibrate.fit", ["--out", "{out}/p.json"], "file:p.json"),
    ("experiments.paper_profiles", ["--only", "lookahead", "--out", "{out}"], "file:lookahead-llama-2-7b-a100.json"),
    (ENGINE, ["--target", "tiny", "--out", "{out}/r.csv"], "file:r.csv"),
    ("traces.record", [*RECORD, "--method", "ar", "--out", "{out}/r.parquet"], "file:r.parquet"),
    ("training.__main__", ["vanilla", "--target", "tiny", "--out", "{out}"], "file:vanilla.safetensors"),
    ("experiments.bench.sweep", ["--out", "{out}/b.json"], "file:b.json"),
    ("experiments.bench.simulator", ["--out", "{out}/b.json"], "file:b.json"),
]


def _occupy(out, kind: str) -> None:
    from common import atomic, rundir

    if kind == "run":
        with rundir.open_run(out, "a previous run", []):
            atomic.write_text(out / "report.md", "the previous run's report\n")
    elif kind == "files":
        out.mkdir(parents=True)
        (out / "report.md").write_text("a report of a run before manifests\n")
    else:
        out.mkdir(parents=True)
        (out / (kind.partition(":")[2] or "t.parquet")).write_bytes(b"a previous run's output")


@pytest.mark.parametrize("module, argv, kind", RERUN_ROWS,
                         ids=[f"{m.split('.')[-2 if m.endswith('__main__') else -1]}:{' '.join(a[:2])}:{k}"
                              for m, a, k in RERUN_ROWS])
def test_rerun_into_another_runs_out_is_refused_in_one_line(module, argv, kind, tmp_path, capsys):
    out = tmp_path / "out"
    _occupy(out, kind)
    before = sorted(p.relative_to(out).as_posix() for p in out.rglob("*"))
    capsys.readouterr()
    code = cli_main(module)([a.replace("{out}", str(out)) for a in argv])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), lines
    assert str(out) in lines[0] and "--overwrite" in lines[0], lines[0]
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == before   # nothing touched


def test_overwrite_replaces_another_recording_run(tmp_path, capsys):
    out = tmp_path / "r.parquet"
    argv = [*RECORD, "--limit", "1", "--max-new-tokens", "4", "--quiet", "--out", str(out)]
    main = cli_main("traces.record")
    assert main([*argv, "--method", "ar"]) == 0
    assert main([*argv, "--method", "sd", "--drafter", "layers:1"]) == 2 and "--overwrite" in capsys.readouterr().err
    assert main([*argv, "--method", "sd", "--drafter", "layers:1", "--overwrite"]) == 0
    from traces import schema

    assert schema.read_trace(out)[0]["method"].unique().tolist() == ["sd"]
