"""The study's four request streams, ready to replay: each request's lengths and spans
(`calibrate.ingest.specdecode_bench.read_file`) and what vLLM's n-gram proposer proposed at every
generated position (`traces.lookup_replay.lookup_spans` over its token ids, window 3-7, up to 20
tokens: the rule that reproduces the recorded spans), which the spans alone do not say where nothing
was accepted. The files themselves are not the project's to commit; a folder holding them is an
argument of every command that reads them (README: where to get them). Replaying the proposer takes
~20 s of Python over the four files; its result is kept in a cache folder (`CACHE`), one file per
input file named by the input's sha256, so a later run reads it back.
"""
from __future__ import annotations

import hashlib
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from calibrate.ingest.result import json_lines
from calibrate.ingest.specdecode_bench import read_file
from calibrate.vllm.facts import NGRAM_WINDOW
from common import atomic
from common.errors import InputError
from traces.lookup_replay import lookup_spans
from traces.span_replay import ReplayRequest

DATASETS = ("gsm8k", "cnn", "sharegpt", "instructcoder")
PROPOSAL_K = 20                    # the recorded n-gram proposer's k: proposals at any k <= 20 are min(this, k)
CACHE = Path.home() / ".cache" / "specsim" / "ngram_proposals"


@dataclass(frozen=True)
class Stream:
    """One dataset's requests in file order, their n-gram proposals and the file's sha256."""

    dataset: str
    requests: list[ReplayRequest]
    proposed: list[np.ndarray]
    sha256: str
    file: str


def data_files(folder: str | Path, datasets: tuple[str, ...] = DATASETS) -> dict[str, Path]:
    """The file of each dataset in `folder` (combined_<dataset>.jsonl); one line naming what is missing."""
    root = Path(folder)
    if not root.is_dir():
        raise InputError(f"data folder not found: {root} (it must hold combined_<dataset>.jsonl for "
                         f"{', '.join(datasets)})")
    files = {d: root / f"combined_{d}.jsonl" for d in datasets}
    missing = [p.name for p in files.values() if not p.is_file()]
    if missing:
        raise InputError(f"data folder {root} lacks {', '.join(missing)} (SpecDecode-Bench/simulator "
                         f"data/llama3.1-8B/; README says where to get them)")
    return files


def _cache_file(cache: Path | None, path: str) -> Path | None:
    if cache is None:
        return None
    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    return cache / f"{digest}_n{NGRAM_WINDOW[0]}-{NGRAM_WINDOW[1]}_k{PROPOSAL_K}.npz"


def _read(dataset: str, path: str, cache: Path | None = None) -> Stream:
    requests, drafters, sha = read_file(path, dataset)
    if "ngram" not in drafters:
        raise InputError(f"{path}: no n-gram spans (acc_ngram)")
    kept = _cache_file(cache, path)
    if kept is not None and kept.is_file():
        with np.load(kept) as saved:
            proposed = np.split(saved["values"], np.cumsum(saved["lengths"])[:-1])
        if [p.size for p in proposed] == [r.output_len for r in requests]:
            return Stream(dataset, requests, proposed, sha, Path(path).name)
    proposed = []
    for (_, record), request in zip(json_lines(path), requests):
        _, counts = lookup_spans(record["prompt_token_ids"], record["generated_token_ids"], PROPOSAL_K, *NGRAM_WINDOW)
        proposed.append(counts.astype(np.int16))
    if kept is not None:
        try:
            kept.parent.mkdir(parents=True, exist_ok=True)
            with atomic.atomic_path(kept, notify=False) as tmp, open(tmp, "wb") as handle:
                np.savez(handle, values=np.concatenate(proposed), lengths=np.array([p.size for p in proposed]))
        except OSError:
            pass                          # a cache that cannot be written is only a slower next run
    return Stream(dataset, requests, proposed, sha, Path(path).name)


def read_streams(folder: str | Path, datasets: tuple[str, ...] = DATASETS, workers: int | None = None,
                 cache: str | Path | None = CACHE) -> dict[str, Stream]:
    """Every dataset's `Stream`, the files read side by side on up to `workers` processes (default:
    the cores this process may use, at most one per file); `cache` None: the proposals replayed anew."""
    files = data_files(folder, datasets)
    cache = None if cache is None else Path(cache)
    workers = min(len(files), workers or len(os.sched_getaffinity(0)))
    if workers <= 1:
        return {d: _read(d, str(p), cache) for d, p in files.items()}
    order = sorted(files, key=lambda d: -files[d].stat().st_size)        # the largest first
    with ProcessPoolExecutor(workers) as pool:
        done = {d: pool.submit(_read, d, str(files[d]), cache) for d in order}
        return {d: done[d].result() for d in datasets}
