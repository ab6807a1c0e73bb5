"""One run per output directory: a manifest, refusal to mix runs, and no temp files left behind.

Every command line with an output directory opens it with `open_run`:

- it writes `manifest.json` (the command, its arguments, the checkout's commit, start and end time,
  status and the files written) at the start and again after every file the run writes, so even a
  run killed with `kill -9` leaves a list of what is its own;
- a directory holding another run's files is refused (`InputError`, exit 2) unless `--overwrite`,
  which first removes the files the previous manifest lists and the manifest itself, never
  anything else; files there without a manifest are refused too, and with `--overwrite` kept (the
  note says so: nothing tells them apart from the user's own);
- temp files of `common.atomic` left by a killed run are removed before the new run writes, and
  SIGTERM ends the process through its `finally` blocks, so a stopped run removes its own.

A command whose output is one file uses `claim_file`: the same refusal and `--overwrite` for that
file, stale temp files of that name removed. `PointLog` is an append-only journal of finished
work items (one JSON line each, flushed and fsynced) that a resumed run reads back.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import functools
import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Iterator, Sequence

from common import atomic
from common.errors import InputError

MANIFEST = "manifest.json"
OVERWRITE_HELP = ("replace the previous run in --out: remove the files its manifest.json lists (other files are "
                  "kept) before writing")


def add_overwrite_option(parser, help: str = OVERWRITE_HELP) -> None:
    parser.add_argument("--overwrite", action="store_true", help=help)


@functools.lru_cache(maxsize=1)
def git_commit() -> str:
    """The checkout's commit (short), or '' outside a git checkout."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).resolve().parent,
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def stale_temps(root: Path, name: str | None = None) -> list[Path]:
    """`common.atomic` temp files under `root` (of target `name` only, if given)."""
    if not root.is_dir():
        return []
    found = root.rglob(".*.tmp") if name is None else root.glob(f".{name}.*.tmp")
    return sorted(p for p in found if p.is_file() and atomic.is_temp_name(p.name)
                  and (name is None or atomic.temp_target(p.name) == name))


def _remove_stale(root: Path, name: str | None = None) -> None:
    stale = stale_temps(root, name)
    for path in stale:
        path.unlink(missing_ok=True)
    if stale:
        print(f"note: removed {len(stale)} temp file(s) left by an interrupted run in {root} "
              f"({', '.join(p.name for p in stale[:3])}{', ...' if len(stale) > 3 else ''})", file=sys.stderr)


def _files(root: Path) -> dict[str, tuple[int, int]]:
    """Regular files under root (relative path -> (mtime_ns, size)), without the manifest and temps."""
    found = {}
    for path in root.rglob("*"):
        if path.is_file() and path.name != MANIFEST and not atomic.is_temp_name(path.name):
            stat = path.stat()
            found[path.relative_to(root).as_posix()] = (stat.st_mtime_ns, stat.st_size)
    return found


def _alive(manifest: dict) -> bool:
    """The manifest's run is still going: status running, same host, its process exists."""
    pid = manifest.get("pid")
    if manifest.get("status") != "running" or manifest.get("host") != socket.gethostname() or not pid:
        return False
    if pid == os.getpid():
        return False
    try:
        os.kill(int(pid), 0)
    except (OSError, ValueError):
        return False
    return True


def read_manifest(root: Path) -> dict | None:
    path = Path(root) / MANIFEST
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {"cli": "?", "status": "unreadable", "files": []}
    return manifest if isinstance(manifest, dict) else {"cli": "?", "status": "unreadable", "files": []}


class RunDir:
    """The open run of one command in one output directory (see the module docstring)."""

    def __init__(self, root: Path, cli: str, argv: Sequence[str], extra: dict | None = None):
        self.root = root
        self.manifest: dict[str, Any] = {
            "cli": cli, "argv": list(argv), "commit": git_commit(), "started": _now(), "ended": None,
            "status": "running", "pid": os.getpid(), "host": socket.gethostname(), **(extra or {}), "files": []}
        self._files: set[str] = set()
        self._lock = threading.Lock()
        self._before: dict[str, tuple[int, int]] = {}
        self._unwatch: Any = lambda: None

    # -- writing the manifest
    def _save(self) -> None:
        self.manifest["files"] = sorted(self._files)
        atomic.write_json(self.root / MANIFEST, self.manifest, notify=False)

    def record(self, path: str | os.PathLike) -> None:
        """Count `path` as this run's file (atomic writes under the directory are counted by themselves)."""
        try:
            rel = Path(path).resolve().relative_to(self.root.resolve()).as_posix()
        except ValueError:
            return  # written outside this directory
        if rel == MANIFEST or atomic.is_temp_name(Path(rel).name):
            return
        with self._lock:
            if rel not in self._files:
                self._files.add(rel)
                self._save()

    def _finish(self, status: str, error: str | None = None) -> None:
        now = _files(self.root) if self.root.is_dir() else {}
        self._files |= {rel for rel, sig in now.items() if self._before.get(rel) != sig}
        self.manifest.update(status=status, ended=_now())
        if error:
            self.manifest["error"] = error
        self._save()


def _previous_run(root: Path, overwrite: bool) -> None:
    """Refuse a directory holding another run's files, or clear that run's files (--overwrite)."""
    if root.exists() and not root.is_dir():
        raise InputError(f"--out {root} is a file, not a directory")
    if not root.is_dir():
        return
    manifest = read_manifest(root)
    files = _files(root)
    if manifest is None:
        if not files:
            return
        listed = ", ".join(sorted(files)[:3]) + (", ..." if len(files) > 3 else "")
        if not overwrite:
            raise InputError(f"--out {root} already holds {len(files)} file(s) of no recorded run ({listed}); "
                             f"use --overwrite to write there anyway, or another --out")
        print(f"note: {root} has no {MANIFEST}: --overwrite removes nothing there; {len(files)} file(s) kept "
              f"({listed}), those this run writes are replaced", file=sys.stderr)
        return
    if _alive(manifest):
        raise InputError(f"--out {root} is in use by a running {manifest.get('cli')} (pid {manifest.get('pid')}); "
                         f"wait for it or choose another --out")
    what = f"{manifest.get('cli', '?')}, {manifest.get('status', '?')}, started {manifest.get('started', '?')}"
    if not any((root / rel).is_file() for rel in manifest.get("files") or []):
        (root / MANIFEST).unlink()  # a run that wrote nothing (refused, failed early): nothing to mix with
        return _previous_run(root, overwrite)
    if not overwrite:
        raise InputError(f"--out {root} holds another run's files ({what}); use --overwrite to replace them, "
                         f"or another --out")
    removed = 0
    for rel in manifest.get("files") or []:
        path = (root / rel).resolve()
        if root.resolve() not in path.parents or not path.is_file():
            continue  # never outside the directory; already gone
        path.unlink()
        removed += 1
        for parent in path.parents:  # folders the run made and left empty
            if parent == root.resolve() or any(parent.iterdir()):
                break
            parent.rmdir()
    (root / MANIFEST).unlink()
    print(f"note: --overwrite removed {removed} file(s) of the previous run in {root} ({what})", file=sys.stderr)


_open: list[RunDir] = []   # runs started and not finished (cli_entry finishes them: `closing_runs`)


def start_run(out: str | os.PathLike, cli: str, argv: Sequence[str] | None, overwrite: bool = False,
              extra: dict | None = None) -> RunDir:
    """Claim `out` for this run (see the module docstring). A command line calls it after checking
    its options and before any heavy work; `cli_entry` finishes the run when its main returns."""
    root = Path(out)
    _previous_run(root, overwrite)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"--out {root}: cannot create the directory ({exc.strerror})") from None
    if not os.access(root, os.W_OK):
        raise InputError(f"--out {root}: directory is not writable")
    _remove_stale(root)
    run = RunDir(root, cli, sys.argv[1:] if argv is None else argv, extra)
    run._before = _files(root)
    atomic.terminate_cleanly()
    run._save()
    run._unwatch = atomic.watch(run.record)
    _open.append(run)
    return run


def add_to_run(out: str | os.PathLike, path: str | os.PathLike) -> None:
    """List `path` in the finished run's manifest in `out`: a later command that adds a file to a
    run (fidelity's --report-only --repredict) makes it that run's, so --overwrite clears it too."""
    root = Path(out)
    manifest = read_manifest(root)
    if manifest is None or manifest.get("status") == "unreadable":
        return
    rel = Path(path).resolve().relative_to(root.resolve()).as_posix()
    files = set(manifest.get("files") or [])
    if rel not in files:
        manifest["files"] = sorted(files | {rel})
        atomic.write_json(root / MANIFEST, manifest, notify=False)


def finish_run(run: RunDir, exc: BaseException | None = None) -> None:
    """Record how the run ended (ok; interrupted: Ctrl-C, SIGTERM; failed: the error's first line)
    and every file it wrote."""
    if run not in _open:
        return
    _open.remove(run)
    run._unwatch()
    if exc is None or (isinstance(exc, SystemExit) and exc.code in (0, None)):
        run._finish("ok")
    elif isinstance(exc, (KeyboardInterrupt, SystemExit)):
        run._finish("interrupted")
    else:
        run._finish("failed", (str(exc).strip().splitlines() or [type(exc).__name__])[0])


@contextlib.contextmanager
def open_run(out: str | os.PathLike, cli: str, argv: Sequence[str] | None, overwrite: bool = False,
             extra: dict | None = None) -> Iterator[RunDir]:
    """`start_run` for a block: finished when the block ends."""
    run = start_run(out, cli, argv, overwrite, extra)
    try:
        yield run
    except BaseException as exc:
        finish_run(run, exc)
        raise
    finish_run(run)


@contextlib.contextmanager
def closing_runs() -> Iterator[None]:
    """Finish every run started inside the block (`common.errors.cli_entry` wraps each main in it)."""
    depth = len(_open)
    try:
        yield
    except BaseException as exc:
        for run in reversed(_open[depth:]):
            finish_run(run, exc)
        raise
    for run in reversed(_open[depth:]):
        finish_run(run)


def claim_file(out: str | os.PathLike, overwrite: bool, resumable: bool = False) -> Path:
    """Claim a single output file: refuse an existing one unless `overwrite` (or `resumable`: the
    caller resumes from it), and remove temp files of that name left by a killed run."""
    path = Path(out)
    if path.is_dir():
        raise InputError(f"--out {path} is a directory; give a file name")
    if path.exists() and not (overwrite or resumable):
        raise InputError(f"--out {path} already exists (another run's output); use --overwrite to replace it, "
                         f"or another --out")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"--out {path}: cannot create its folder ({exc.strerror})") from None
    _remove_stale(path.parent, path.name)
    atomic.terminate_cleanly()
    return path


class PointLog:
    """Append-only journal of finished work items: a header line (the settings that make two runs
    the same) and one JSON line per item, flushed and fsynced, so a kill loses the item in flight only."""

    def __init__(self, path: str | os.PathLike, header: dict):
        self.path, self.header = Path(path), json.loads(json.dumps(header))
        self.items: list[dict] = []

    def stored_header(self) -> dict | None:
        """The header of a journal already on disk (None: none, or unreadable)."""
        if not self.path.is_file():
            return None
        try:
            with open(self.path, encoding="utf-8") as fh:
                return json.loads(fh.readline())
        except ValueError:
            return None

    def differences(self, other: dict) -> list[str]:
        keys = sorted(set(self.header) | set(other))
        return [k for k in keys if self.header.get(k) != other.get(k)]

    def load(self) -> list[dict]:
        """Items of the journal on disk; a last line cut by a kill is dropped (and truncated away)."""
        items, good = [], 0
        with open(self.path, "rb") as fh:
            lines = fh.read().split(b"\n")
        for i, line in enumerate(lines[:-1]):  # the part after the last newline is unfinished
            try:
                record = json.loads(line)
            except ValueError:
                break
            if i:
                items.append(record)
            good += len(line) + 1
        with open(self.path, "rb+") as fh:
            fh.truncate(good)
        self.items = items
        return items

    def start(self) -> None:
        """Start afresh: the journal on disk is removed; the first `append` writes the header."""
        self.remove()
        self.items = []

    def append(self, item: dict) -> None:
        header = "" if self.path.is_file() else json.dumps(self.header) + "\n"
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(header + json.dumps(item) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        self.items.append(item)

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def resumable_output(out: str | os.PathLike, header: dict, overwrite: bool, resume: bool) -> PointLog:
    """Claim the single output `out` of a run that journals its finished items beside it
    (`<out>.partial.jsonl`): the same settings (`header`) resume from the journal, other settings
    are refused unless `overwrite` (which starts afresh); `resume` insists that there is a journal."""
    path = Path(out)
    log = PointLog(path.with_name(path.name + ".partial.jsonl"), header)
    stored = log.stored_header()
    differ = log.differences(stored) if stored is not None else []
    if resume and stored is None:
        raise InputError(f"--resume: no interrupted run of {path} to resume ({log.path.name} not found)")
    if stored is not None and differ and not overwrite:
        named = ", ".join(f"--{k.replace('_', '-')}" for k in differ)
        raise InputError(f"{log.path} holds an interrupted run with other settings ({named} differ); give the same "
                         f"options to resume it, or --overwrite to discard it")
    same = stored is not None and not differ
    claim_file(path, overwrite, resumable=same)
    if same:
        print(f"note: resuming the interrupted run of {path}: {len(log.load())} item(s) already done", file=sys.stderr)
    else:
        log.start()
    return log
