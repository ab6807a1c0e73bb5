"""Where the sweep's evaluations run: local processes by default, a Dask cluster on demand.

Both executors have one method, `map(fn, tasks, desc)`, which applies a picklable top-level
function to every task and returns the results in task order, with a tqdm progress bar when the
work lasts more than a moment, and calls a `deadline`'s `check(desc)` as each task completes (the
sweep's `--max-hours`, `sweep.estimate.Deadline`). The sweep and the capacity search build their task lists once
and hand them to whichever executor the user chose, so that the local run and the cluster run
are the same code path and give the same numbers (every task carries its own seed).

Why Dask distributed rather than Ray: it is pure Python, installs from PyPI in seconds with no
daemon or object store to run, its `LocalCluster` starts in-process for tests, and the same
`Client(address)` call reaches a real cluster (`dask scheduler` + `dask worker` on each node).
It is the optional extra `cluster`; it is imported only when `--executor dask` is asked for.
"""
from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Callable, Iterator, Sequence

from common.errors import InputError
from common.progress import progress_bar

EXECUTORS = ("local", "dask")
PARENT_POLL_S = 0.5              # how often a worker checks that the process that started it is alive


def cpu_cores() -> int:
    """CPU cores this process may run on (its affinity, else the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:           # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def worker_count(asked: int | None, option: str = "--workers") -> int:
    """Worker processes: one per core by default, and never more than the cores (more only
    time-share them and hold more memory); a capped request is said in one line on stderr."""
    cores = cpu_cores()
    if asked is None:
        return cores
    if asked > cores:
        print(f"note: {option} {asked} capped at the {cores} CPU core(s) of this machine", file=sys.stderr)
        return cores
    return max(1, int(asked))


def die_with_parent(parent: int) -> None:
    """Worker initializer: end this worker as soon as `parent` (the process that started it) is
    gone, so a sweep killed with SIGKILL leaves no pool worker behind (a pool's worker otherwise
    waits on its task queue for as long as any sibling holds it open)."""
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(1)

    threading.Thread(target=watch, name="die-with-parent", daemon=True).start()


_FORKED_JOBS: dict[str, tuple[Callable, tuple]] = {}     # what `forked`'s workers run, inherited by fork


def _run_forked(key: str) -> Any:
    fn, args = _FORKED_JOBS[key]
    return fn(*args)


@contextlib.contextmanager
def forked(jobs: dict[str, tuple[Callable, tuple]], workers: int) -> Iterator[Callable[[], dict[str, Any]]]:
    """Run `jobs` ({key: (fn, args)}) in `workers` forked processes while the caller goes on; the
    context yields a function that waits for them and returns {key: result}. The arguments reach
    the workers by fork, not by pickling (the sweep's figures read tables of 10^6 rows). With one
    worker, one job or no fork on this platform, the jobs run in this process when their results
    are asked for."""
    global _FORKED_JOBS
    if workers <= 1 or len(jobs) <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        yield lambda: {key: fn(*args) for key, (fn, args) in jobs.items()}
        return
    _FORKED_JOBS = jobs
    try:
        with ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=multiprocessing.get_context("fork"),
                                 initializer=die_with_parent, initargs=(os.getpid(),)) as pool:
            futures = {key: pool.submit(_run_forked, key) for key in jobs}
            yield lambda: {key: future.result() for key, future in futures.items()}
    finally:
        _FORKED_JOBS = {}


class LocalExecutor:
    """Run tasks in local worker processes (or in this process when workers == 1)."""

    kind = "local"

    def __init__(self, workers: int | None = None, progress: bool = False, deadline: Any = None):
        self.workers = worker_count(workers)
        self.progress = progress
        self.deadline = deadline
        self._pool: ProcessPoolExecutor | None = None

    def map(self, fn: Callable[[Any], Any], tasks: Sequence[Any], desc: str = "scoring") -> list[Any]:
        tasks = list(tasks)
        results: list[Any] = [None] * len(tasks)
        with progress_bar(len(tasks), desc, self.progress) as bar:
            if self.workers == 1 or len(tasks) <= 1:
                for i, task in enumerate(tasks):
                    results[i] = fn(task)
                    bar.update(1)
                    _check(self.deadline, desc)
                return results
            pool = self._ensure_pool()
            futures = {pool.submit(fn, task): i for i, task in enumerate(tasks)}
            from concurrent.futures import as_completed

            for fut in as_completed(futures):
                results[futures[fut]] = fut.result()
                bar.update(1)
                _check(self.deadline, desc)
        return results

    def _ensure_pool(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(max_workers=self.workers, initializer=die_with_parent,
                                             initargs=(os.getpid(),))
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class DaskExecutor:
    """Run tasks on a Dask distributed cluster: an existing scheduler, or a local one.

    `address` (e.g. "tcp://10.0.0.5:8786") connects to a running scheduler; without it a
    `LocalCluster` of `workers` single-threaded worker processes is started and closed with
    the executor. `client` lets a caller (a test) pass a Client it already holds.
    """

    kind = "dask"

    def __init__(self, workers: int | None = None, address: str | None = None, progress: bool = False,
                 client: Any = None, processes: bool = True, deadline: Any = None):
        try:
            import distributed
        except ImportError:  # pragma: no cover - depends on the install
            raise InputError(
                "--executor dask needs the optional extra 'cluster': pip install 'specsim[cluster]'"
            ) from None
        self.progress = progress
        self.deadline = deadline
        self._own_cluster = None
        self._own_client = False
        if client is not None:
            self.client = client
        elif address:
            try:
                self.client = distributed.Client(address, timeout="10s")
            except OSError as exc:
                raise InputError(f"cannot reach the Dask scheduler at {address}: {exc}") from None
            self._own_client = True
        else:
            n = worker_count(workers)
            self._own_cluster = distributed.LocalCluster(
                n_workers=n, threads_per_worker=1, processes=processes, dashboard_address=None,
                silence_logs=logging.ERROR,
            )
            self.client = distributed.Client(self._own_cluster)
            self._own_client = True

    def map(self, fn: Callable[[Any], Any], tasks: Sequence[Any], desc: str = "scoring") -> list[Any]:
        from distributed import as_completed

        tasks = list(tasks)
        if not tasks:
            return []
        futures = self.client.map(fn, tasks, pure=False)
        index = {f.key: i for i, f in enumerate(futures)}
        results: list[Any] = [None] * len(tasks)
        with progress_bar(len(tasks), desc, self.progress) as bar:
            for fut in as_completed(futures):
                results[index[fut.key]] = fut.result()
                bar.update(1)
                _check(self.deadline, desc)
        return results

    def close(self) -> None:
        if self._own_client:
            self.client.close()
        if self._own_cluster is not None:
            self._own_cluster.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _check(deadline: Any, desc: str) -> None:
    if deadline is not None:
        deadline.check(desc)


def make_executor(kind: str = "local", workers: int | None = None, address: str | None = None,
                  progress: bool = False, deadline: Any = None):
    """The executor named `kind` ('local' or 'dask'); InputError for anything else."""
    if kind == "local":
        if address:
            raise InputError("--scheduler is only meaningful with --executor dask")
        return LocalExecutor(workers=workers, progress=progress, deadline=deadline)
    if kind == "dask":
        return DaskExecutor(workers=workers, address=address, progress=progress, deadline=deadline)
    raise InputError(f"unknown executor '{kind}' (known: {', '.join(EXECUTORS)})")
