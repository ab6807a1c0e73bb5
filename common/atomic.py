"""Atomic file writes: a reader sees either the old file or the complete new one.

Everything the project writes that takes longer than an instant (traces, profiles, reports,
plots) goes through these helpers: write to a temporary file in the same directory, flush and
fsync, then `os.replace` onto the target name. A temp file is named `.<target name>.<8 random>.tmp`
(`is_temp_name`); it is removed on every exit path Python sees (an exception, Ctrl-C, SIGTERM once
`terminate_cleanly` ran, interpreter exit), and `common.rundir` removes those a `kill -9` left.
Callbacks given to `watch` hear of every file landed, so a run's manifest lists what it wrote.
"""
from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import signal
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable, Iterator

TEMP_NAME = re.compile(r"^\.(?P<target>.+)\.[a-z0-9_]{8}\.tmp$")   # tempfile.mkstemp's 8 random characters
_live: set[Path] = set()                                        # temp files not yet renamed
_watchers: list[Callable[[Path], None]] = []


def is_temp_name(name: str) -> bool:
    return TEMP_NAME.match(name) is not None


def temp_target(name: str) -> str | None:
    """The target file name a temp file was written for."""
    match = TEMP_NAME.match(name)
    return match.group("target") if match else None


def watch(callback: Callable[[Path], None]) -> Callable[[], None]:
    """Call `callback(path)` after every file landed; returns the function that stops it."""
    _watchers.append(callback)
    return lambda: _watchers.remove(callback) if callback in _watchers else None


@atexit.register
def _remove_live() -> None:
    for tmp in list(_live):
        tmp.unlink(missing_ok=True)


def terminate_cleanly() -> None:
    """Make SIGTERM exit through `finally` blocks (SystemExit 143) in this process, so temp files
    are removed; forked children keep the default (they die at once, as before). Main thread only."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return
    owner = os.getpid()

    def handler(signum, frame):
        if os.getpid() != owner:  # a forked worker: behave as without a handler
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, notify: bool = True) -> Iterator[Path]:
    """Yield a temporary path next to `path`; on success it replaces `path` atomically (and the
    `watch` callbacks hear of it, unless `notify` is False)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    _live.add(tmp)
    try:
        os.chmod(tmp, 0o666 & ~_current_umask())  # mkstemp creates 0600; give the usual file mode
        yield tmp
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    finally:
        _live.discard(tmp)
        if tmp.exists():
            tmp.unlink()
    if notify:
        for callback in list(_watchers):
            callback(target)


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text(path: str | os.PathLike, text: str, notify: bool = True) -> Path:
    with atomic_path(path, notify) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def write_json(path: str | os.PathLike, obj: Any, notify: bool = True) -> Path:
    return write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=_json_default) + "\n", notify)


def write_csv(path: str | os.PathLike, frame) -> Path:
    """Write a pandas DataFrame as CSV (no index)."""
    with atomic_path(path) as tmp:
        frame.to_csv(tmp, index=False)
    return Path(path)


def write_parquet(path: str | os.PathLike, frame, metadata: dict[str, str] | None = None) -> Path:
    """Write a pandas DataFrame as parquet, with optional key/value metadata in the file footer."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(frame, preserve_index=False)
    if metadata:
        merged = dict(table.schema.metadata or {})
        merged.update({k.encode(): v.encode() for k, v in metadata.items()})
        table = table.replace_schema_metadata(merged)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)
    return Path(path)


def save_figure(path: str | os.PathLike, fig, tight: bool = True) -> Path:
    """Save a matplotlib figure atomically (format from the suffix); `tight` crops it to what is
    drawn (one more drawing of the figure: a figure laid out to its edges saves without it)."""
    target = Path(path)
    with atomic_path(target) as tmp:
        fig.savefig(tmp, format=target.suffix.lstrip(".") or "png", dpi=120, bbox_inches="tight" if tight else None)
    return target


def _json_default(obj: Any):
    try:
        import numpy as np

        if isinstance(obj, np.generic):
            return obj.item()
        if isinstance(obj, np.ndarray):
            return obj.tolist()
    except ImportError:  # pragma: no cover
        pass
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")
