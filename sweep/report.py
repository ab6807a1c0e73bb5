"""The sweep's outputs: ranked tables, the best configurations, per-deployment answers, the report.

`write_outputs(result, out_dir)` writes, atomically:

    out/tables/<method>.parquet        every configuration scored, ranked (zstd-compressed parquet)
    out/tables/<method>_top<N>.csv     the top N (--top) per profile of the same table
    out/best.csv                       the best configuration per (profile, method), simulator spread
    out/deployments.csv                per deployment and batch size: the served best, throughput,
                                       latency, plain decoding's throughput, where speculation stops paying
    out/deployments_served.csv         every configuration served per deployment and batch size
    out/paper_choices.csv              the sweep's choice beside the papers' own, where they give one
    out/plots/<method>.png             one figure per method (sweep.plots, from `spec.plot`)
                                       (these three per method written by forked workers while the
                                       sweep simulates: `writing_methods`)
    out/plots/deployments.png          with several batch sizes: throughput over plain decoding per batch
    out/<engine>_*.json|.txt, exports.md  with --export (sweep.export)
    out/report.md                      what to run per deployment and why, then the rest (sweep.markdown)
    out/run.json                       options, profiles, timings

and `stdout_table(result)` is the short table the command prints.
"""
from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import pandas as pd

import methods
from common import atomic
from sweep import ranking
from sweep.deployments import DEPLOYMENT
from sweep.markdown import markdown_report, measured_line, measured_rows, what_to_run_rows
from sweep.plots import plot_deployments, plot_method
from common.plotting import pyplot
from sweep.executor import forked, worker_count
from sweep.export import write_exports


def _write_parquet(path: Path, frame: pd.DataFrame, metadata: dict[str, str]) -> Path:
    """zstd-compressed parquet with the run's options in the footer, atomically."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(frame, preserve_index=False)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}),
                                           **{k.encode(): v.encode() for k, v in metadata.items()}})
    with atomic.atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd")
    return Path(path)


def _write_csv(path: Path, frame: pd.DataFrame) -> Path:
    """CSV through pyarrow's writer (several times faster than pandas' on 100 000 rows), atomically."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    with atomic.atomic_path(path) as tmp:
        pacsv.write_csv(pa.Table.from_pandas(frame, preserve_index=False), tmp)
    return Path(path)


def _plain_columns(frame: pd.DataFrame) -> pd.DataFrame:
    """Tuples (k-configurations, bin arrays) become 'x'-joined text so CSV and parquet agree
    (each distinct tuple joined once: a k column holds few distinct values in many rows)."""
    out = frame.copy(deep=False)        # copy-on-write: the columns replaced below are new, the rest shared
    for col in out.columns:
        first = out[col].first_valid_index() if out[col].dtype == object else None
        if first is not None and isinstance(out[col].at[first], tuple):
            codes, uniques = pd.factorize(out[col])
            texts = np.asarray([_joined(v) for v in uniques] + [None], dtype=object)
            out[col] = texts[codes]     # code -1 (missing) -> None
    return out


def _joined(value):
    return "x".join(map(str, value)) if isinstance(value, tuple) else value


def method_files(spec, frame: pd.DataFrame, out_dir: Path, options: dict[str, Any]) -> dict[str, Path | None]:
    """One method's files: its scored table (parquet, the run's options in its footer), the top
    --top rows per profile (CSV) and its figure (`sweep.plots.plot_method`; None where nothing is
    drawn), keyed as `write_outputs` returns them."""
    plain = _plain_columns(frame)
    top = int(options.get("top", 50))
    return {f"parquet:{spec.name}": _write_parquet(out_dir / "tables" / f"{spec.name}.parquet", plain,
                                                   {"specsim": json.dumps(options)}),
            f"csv:{spec.name}": _write_csv(out_dir / "tables" / f"{spec.name}_top{top}.csv",
                                           ranking.top_of_table(plain, top)),
            f"plot:{spec.name}": plot_method(spec, frame, out_dir / "plots" / f"{spec.name}.png")}


@contextlib.contextmanager
def writing_methods(tables: dict[str, pd.DataFrame], out_dir: Path, options: dict[str, Any],
                    workers: int | None = None) -> Iterator[Callable[[], dict[str, Path | None]]]:
    """Each method's files (`method_files`) written in `workers` forked processes (default one per
    core) while the caller goes on; the context yields the function that waits for them and returns
    their paths. The sweep starts them as soon as its tables are ranked, so that tables and figures
    are written while the simulator re-scores and serves (written after it, they were a second and a
    half on one core at the end of every sweep)."""
    jobs = {method: (method_files, (methods.get(method), frame, Path(out_dir), options))
            for method, frame in sorted(tables.items(), key=lambda item: -len(item[1]))}
    pyplot()            # the plotting libraries imported once, before the workers fork
    with forked(jobs, worker_count(workers)) as written:
        yield lambda: {key: path for files in written().values() for key, path in files.items()}


def write_outputs(result: Any, out_dir: Path, workers: int | None = None,
                  method_paths: Callable[[], dict[str, Path | None]] | None = None) -> dict[str, Path]:
    """Write every table, plot and the report of a SweepResult into `out_dir`; return the paths.
    Each method's table and figure come from `method_paths` (`writing_methods`, started earlier), or
    else are written in `workers` processes while the rest is."""
    if method_paths is None:
        with writing_methods(result.tables, out_dir, result.options, workers) as paths:
            return write_outputs(result, out_dir, workers, paths)
    out_dir = Path(out_dir)
    started = time.perf_counter()
    paths = method_paths()
    written = {f"{kind}:{method}": paths[f"{kind}:{method}"] for method in result.tables for kind in ("parquet", "csv")}
    written.update({key: path for key, path in paths.items() if key.startswith("plot:") and path is not None})
    if len(result.deployments):
        deployed = plot_deployments(result.deployments, out_dir / "plots" / "deployments.png")
        if deployed is not None:
            written["plot:deployments"] = deployed
    written["best"] = _write_csv(out_dir / "best.csv", _plain_columns(result.best))
    if not result.deployments.empty:
        answers = result.deployments.merge(result.stops_paying, on=DEPLOYMENT, how="left")
        written["deployments"] = _write_csv(out_dir / "deployments.csv", answers)
        written["served"] = _write_csv(out_dir / "deployments_served.csv", result.served)
    if result.options.get("export"):
        written.update(write_exports(result.exports, out_dir))
    if result.paper_choices is not None and not result.paper_choices.empty:
        written["paper_choices"] = atomic.write_csv(out_dir / "paper_choices.csv", result.paper_choices)
    result.timings["write"] = time.perf_counter() - started
    written["run"] = atomic.write_json(out_dir / "run.json", {"options": result.options, "timings_s": result.timings,
                                                              "skipped": result.skipped})
    written["report"] = atomic.write_text(out_dir / "report.md", markdown_report(result, written, out_dir))
    return written


def stdout_table(result: Any) -> str:
    """What the command prints: the report's answer per deployment (`what_to_run_rows`, the same
    numbers), then the best configuration per method and profile, each number named for what made it."""
    answers = what_to_run_rows(result)
    lines = [measured_line(r) for r in measured_rows(result)]
    if not answers.empty:
        view = answers[["deployment", "batch", "run", "tok/s", "x plain"]].copy()
        view["deployment"] = view["deployment"].str.slice(0, 60)
        lines += ["What to run (served by the simulator beside plain decoding; report.md says why):",
                  view.to_string(index=False, float_format=lambda v: f"{v:.3g}", na_rep="–"), ""]
    best = result.best.sort_values(["profile", "speedup"], ascending=[True, False])
    cols = [c for c in ["profile", "method", "drafter", "config", "speedup", "verdict", "tokens_per_step",
                        "sim_speedup"] if c in best]
    view = best[cols].copy()
    view["profile"] = view.profile.str.slice(0, 40)
    lines += ["Best per method (speedup: the closed form's, one request; sim_speedup: the simulator's check of it, "
              f"{int(result.options.get('sim_tokens', 0))} tokens x {int(result.options.get('sim_repeats', 0))} seeds):",
              view.to_string(index=False, float_format=lambda v: f"{v:.2f}")]
    return "\n".join(lines)
