"""The executors: local processes and Dask give the same ordered results as a plain loop."""
from __future__ import annotations

import numpy as np
import pytest

from sweep.executor import DaskExecutor, LocalExecutor, cpu_cores, forked, make_executor
from common.errors import InputError


def _seeded_sum(task):
    seed, n = task
    return float(np.random.default_rng(seed).standard_normal(n).sum())


TASKS = [(seed, 1000 + seed) for seed in range(7)]
EXPECTED = [_seeded_sum(t) for t in TASKS]


def test_local_inline_and_processes_keep_order():
    assert LocalExecutor(workers=1, progress=False).map(_seeded_sum, TASKS) == EXPECTED
    with LocalExecutor(workers=2, progress=False) as ex:
        assert ex.map(_seeded_sum, TASKS) == EXPECTED


def _fails(message):
    raise ValueError(message)


@pytest.mark.parametrize("workers", [1, 2])
def test_forked_jobs_return_by_key_while_the_caller_goes_on(workers):
    """`forked` hands each job's result back under its key, the same in forked workers as in this
    process, and a job's error reaches the caller."""
    big = np.arange(10 ** 6)          # reaches the workers by fork, not by pickling
    jobs = {f"job{i}": (_seeded_sum, ((seed, n),)) for i, (seed, n) in enumerate(TASKS)}
    jobs["sum"] = (np.sum, (big,))
    with forked(jobs, workers) as results:
        answers = results()
    assert [answers[f"job{i}"] for i in range(len(TASKS))] == EXPECTED and answers["sum"] == big.sum()
    with pytest.raises(ValueError, match="a job failed"):
        with forked({"ok": (_seeded_sum, ((1, 10),)), "bad": (_fails, ("a job failed",))}, workers) as results:
            results()


def test_unknown_executor_is_one_line_input_error():
    with pytest.raises(InputError, match="unknown executor 'ray'"):
        make_executor("ray")
    with pytest.raises(InputError, match="--scheduler"):
        make_executor("local", address="tcp://x:1")


@pytest.mark.cluster
def test_dask_local_cluster_equals_local_run():
    pytest.importorskip("distributed")
    with DaskExecutor(workers=2, processes=False, progress=False) as ex:
        assert ex.map(_seeded_sum, TASKS) == EXPECTED


@pytest.mark.cluster
def test_dask_worker_processes_start_and_match():
    pytest.importorskip("distributed")
    with make_executor("dask", workers=1, progress=False) as ex:   # what `--executor dask` starts
        assert ex.map(_seeded_sum, TASKS[:3]) == EXPECTED[:3]


def test_workers_are_capped_at_the_cores_in_one_line(monkeypatch, capsys):
    from sweep import executor

    monkeypatch.setattr(executor, "cpu_cores", lambda: 2)
    assert executor.worker_count(None) == 2 and executor.worker_count(1) == 1
    assert capsys.readouterr().err == ""
    assert LocalExecutor(workers=12, progress=False).workers == 2
    assert capsys.readouterr().err == "note: --workers 12 capped at the 2 CPU core(s) of this machine\n"


PARENT = """
import os, sys, time
sys.path.insert(0, {root!r})
from sweep.executor import LocalExecutor

def pid(_):
    return os.getpid()

def sleep(_):
    time.sleep(120)

with LocalExecutor(workers=2, progress=False) as ex:
    print(" ".join(map(str, sorted(set(ex.map(pid, range(8)))))), flush=True)
    ex.map(sleep, range(2))
"""


@pytest.mark.skipif(cpu_cores() < 2, reason="one core: the executor runs its tasks in-process, no pool to kill")
def test_pool_workers_die_with_a_killed_parent(tmp_path):
    """A sweep killed with SIGKILL runs no `finally`: its pool workers must notice and end themselves."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    script = tmp_path / "parent.py"
    script.write_text(PARENT.format(root=str(Path(__file__).resolve().parents[2])))
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    workers = [int(p) for p in parent.stdout.readline().split()]
    assert workers and parent.pid not in workers
    time.sleep(0.5)                                   # both workers are inside their two-minute task
    parent.send_signal(signal.SIGKILL)
    parent.wait(timeout=10)
    deadline = time.monotonic() + 10
    alive = workers
    while alive and time.monotonic() < deadline:
        time.sleep(0.2)
        alive = [w for w in alive if _running(w)]
    for w in alive:                                   # never leave them behind, even when the test fails
        os.kill(w, signal.SIGKILL)
    assert not alive, f"pool workers {alive} outlived their killed parent"


def _running(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:                                              # a zombie waiting for init to reap it is gone
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False
