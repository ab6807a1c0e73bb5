"""Every command line's --help: exits 0, every option says what it does and states its default
where it has one (the value the parser really uses), and no internal jargon (issue numbers).
argparse's own errors are one `error:` line through common.errors.CliParser, which every CLI uses."""
import argparse
import importlib
import importlib.util
import re
import subprocess
from pathlib import Path

import pytest

from common.cli import CliParser, parse_stages, run_stages

ROOT = Path(__file__).resolve().parents[2]

# (module whose main parses the arguments, argv that reaches --help)
CLIS = [
    ("experiments.sweep", []), ("experiments.capacity", []), ("experiments.reproduce", []),
    ("experiments.verify_lossless", []), ("experiments.fidelity", []), ("experiments.gpu_campaign", []),
    ("experiments.smollm2_cpu", []), ("experiments.transformers_peer", []), ("experiments.bench.costmodel", []), ("experiments.bench.simulator", []),
    ("experiments.bench.sweep", []), ("experiments.bench.kernels", []), ("experiments.bench.lookup_chain", []),
    ("experiments.bench.quick_repeat", []), ("experiments.bench.intervals", []),
    ("experiments.bench.served_spread", []),
    ("experiments.simulate", []), ("experiments.simulate", ["stream"]),
    ("experiments.simulate", ["serve"]), ("experiments.simulate", ["crossover"]),
    ("calibrate.fit", []), ("calibrate.ingest.__main__", []), ("experiments.paper_profiles", []), ("calibrate.transfer", []),
    ("calibrate.vllm.__main__", []), ("experiments.vllm_h100", []),
    ("profiles.migrate", []), ("traces.batch_bench", []), ("calibrate.quick", []),
    ("experiments.serve_load", []), ("experiments.smollm2_batch", []), ("calibrate.spread", []),
    ("experiments.acceptance_length", []), ("calibrate.answers", []),
    ("traces.record", []), ("traces.check_replay", []), ("traces.timing", []),
    ("runtime.engine.__main__", []), ("training.__main__", []), ("experiments.examples", []),
]
JARGON = re.compile(r"\bissue\s*#?\d+|\bitem \d+\b", re.IGNORECASE)


def _help_of(module: str, argv: list[str], monkeypatch, capsys) -> tuple[CliParser, str]:
    """The parser that printed --help, and what it printed."""
    seen: list[CliParser] = []
    original = CliParser.format_help

    def recording(self):
        seen.append(self)
        return original(self)

    monkeypatch.setattr(CliParser, "format_help", recording)
    with pytest.raises(SystemExit) as stop:
        importlib.import_module(module).main([*argv, "--help"])
    assert stop.value.code in (0, None), f"{module} {argv} --help exited {stop.value.code}"
    assert seen, f"{module} does not build its parser with common.errors.CliParser"
    return seen[-1], capsys.readouterr().out


def _default_texts(default) -> set[str]:
    """How a default may be written in a help text."""
    if isinstance(default, (list, tuple)):
        return {", ".join(map(str, default)), ",".join(map(str, default)), str(default), str(list(default))}
    texts = {str(default)}
    if isinstance(default, (str, Path)) and "/" in str(default):
        texts.add(Path(default).name)        # a bundled file, named by its file name
    if isinstance(default, float):
        texts |= {f"{default:g}", f"{default:,g}", f"{default:g}".replace("e-0", "e-")}
    if isinstance(default, int) and not isinstance(default, bool):
        texts |= {f"{default:,}", f"{default:_}"}
    return texts


def undocumented_defaults(parser: argparse.ArgumentParser) -> list[str]:
    """Options whose help does not state their default (or states another value)."""
    formatter = parser._get_formatter()
    wrong = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)) or action.nargs == 0:
            continue
        name = "/".join(action.option_strings) or action.dest
        text = formatter._expand_help(action) if action.help else ""
        if not text:
            wrong.append(f"{name}: no help")
        elif action.required or not action.option_strings:
            continue
        elif "default" not in text.lower():
            wrong.append(f"{name}: default {action.default!r} not stated: {text!r}")
        elif action.default is not None and not any(t in text for t in _default_texts(action.default)):
            wrong.append(f"{name}: help does not show the default {action.default!r}: {text!r}")
    return wrong


@pytest.mark.parametrize("module, argv", CLIS, ids=[" ".join([m, *a]) for m, a in CLIS])
def test_help_states_every_default(module, argv, monkeypatch, capsys):
    parser, text = _help_of(module, argv, monkeypatch, capsys)
    assert "usage:" in text
    assert undocumented_defaults(parser) == []
    assert not JARGON.search(text), JARGON.search(text).group(0)


def test_the_check_catches_a_wrong_or_missing_default():
    p = CliParser(prog="x")
    p.add_argument("--repeats", type=int, default=5, help="runs per point (default 8)")
    p.add_argument("--minutes", type=float, default=None, help="training budget")
    p.add_argument("--seed", type=int, default=0, help="seed")       # the formatter appends the default
    assert [w.split(":")[0] for w in undocumented_defaults(p)] == ["--repeats", "--minutes"]


def test_every_cli_in_the_tree_is_listed_and_uses_the_one_parser():
    found = subprocess.run(["git", "grep", "--untracked", "-l", "-e", "CliParser(", "-e", "ArgumentParser(", "--",
                            "*.py"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    modules = {f[:-3].replace("/", ".") for f in found if not f.startswith(("tests/", "common/"))}
    assert modules - {m for m, _ in CLIS} == set()
    direct = [f for f in found if "argparse.ArgumentParser(" in (ROOT / f).read_text()
              and not f.startswith(("tests/", "common/"))]
    assert direct == []


@pytest.mark.parametrize("argv, expected", [(["--nope"], "--nope"), (["--batch", "abc"], "abc")])
def test_argparse_errors_are_one_line(argv, expected, capsys):
    code = importlib.import_module("experiments.sweep").main(argv)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0]


def test_simulates_help_examples_run_on_every_bundled_paper_profile(tmp_path, capsys):
    from experiments import simulate

    examples = simulate.bundled_examples()
    assert len({e[e.index("--method") + 1] for e in examples}) >= 5     # every paper's method has one
    for example in examples:
        argv = [a if not a.startswith("out/sim/") else str(tmp_path / Path(a).name) for a in example]
        code = simulate.main([*argv, "--repeats", "2", "--n-tokens", "32"])
        assert code == 0, f"{' '.join(example)}: {capsys.readouterr().err[-300:]}"


def test_every_documented_command_exists():
    """Every `python -m NAME` the README, docs and examples' READMEs give is a module with a `main`
    (`python -m experiments.measure` is gone; nothing may point at it)."""
    texts = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "examples").glob("*/README.md"))]
    named = {m for path in texts for m in re.findall(r"python -m ([A-Za-z_][\w.]*)", path.read_text())}
    assert "experiments.sweep" in named and "experiments.examples" in named
    missing = []
    ours = {"common", "costmodel", "verification", "methods", "profiles", "runtime", "traces", "training", "calibrate",
            "simulator", "sweep", "campaigns", "capacity", "papers", "fidelity", "experiments"}
    for name in sorted(n for n in named if n.split(".")[0] in ours):
        try:
            module = importlib.import_module(name)
        except ImportError:
            missing.append(name)
            continue
        runs = hasattr(module, "main") or importlib.util.find_spec(f"{name}.__main__") is not None
        if not runs:
            missing.append(name)
    assert missing == []


def test_commands_serving_a_workload_share_its_options_and_defaults():
    """capacity and simulate serve name the arrival trace and the lengths alike, with one default."""
    from experiments.capacity import build_parser
    from experiments.simulate import _parser

    serve = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction)).choices["serve"]
    options = ("--arrival", "--cv", "--arrival-trace", "--prompt-len", "--output-len")

    def defaults(parser):
        return {s: a.default for a in parser._actions for s in a.option_strings if s in options}

    assert defaults(build_parser()) == defaults(serve) and len(defaults(serve)) == len(options)
    assert "--trace" not in {s for a in build_parser()._actions for s in a.option_strings}


def test_paper_profiles_never_write_the_bundled_profiles_by_default(tmp_path, monkeypatch):
    from experiments import paper_profiles
    from papers.build import DEFAULT_OUT

    written = {}
    monkeypatch.setattr(paper_profiles, "build_all", lambda out, only, progress, overwrite: written.setdefault("out", out) and [])
    assert paper_profiles.main(["--only", "glide"]) == 0
    assert written["out"] == Path("out/profiles") and written["out"].resolve() != DEFAULT_OUT


def test_progress_bars_stay_out_of_logs(tmp_path, capfd):
    """stderr is not a terminal here: no bar is drawn unless --progress asks for one."""
    from common.progress import progress_bar, progress_enabled

    assert not progress_enabled(None) and progress_enabled(True)
    with progress_bar(100, "work", progress_enabled(None)) as bar:
        for _ in range(100):
            bar.update()
    assert capfd.readouterr().err == ""


def test_sweep_top_says_what_the_report_shows():
    """--top sets the CSV tables' rows; the report lists at most 5 per (profile, method)."""
    from experiments.sweep import build_parser
    from sweep.markdown import REPORT_ROWS

    top = next(a for a in build_parser()._actions if "--top" in a.option_strings)
    assert f"the report lists the first {REPORT_ROWS}" in top.help


def test_a_campaigns_stages_run_in_its_own_order_each_timed():
    """`--stages profile,latency` runs latency first (the campaign's order), skips the rest, logs each."""
    ran, logged = [], []
    functions = {name: (lambda args, log, name=name: ran.append(name)) for name in ("latency", "steps", "profile")}
    run_stages(parse_stages("profile,latency", functions), functions, None, logged.append)
    assert ran == ["latency", "profile"]
    assert [line.split(":")[0] for line in logged] == ["stage latency", "stage profile"]
