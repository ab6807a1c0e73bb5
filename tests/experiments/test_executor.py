"""The executors: local processes and Dask give the same ordered results as a plain loop."""
from __future__ import annotations

import numpy as np
import pytest

from experiments.sweep.executor import DaskExecutor, LocalExecutor, make_executor
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
