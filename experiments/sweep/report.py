"""The sweep's outputs: ranked tables, the best configurations, per-deployment answers, the report.

`write_outputs(result, out_dir)` writes, atomically:

    out/tables/<method>.parquet        every configuration scored, ranked (zstd-compressed parquet)
    out/tables/<method>_top<N>.csv     the top N (--top) per profile of the same table
    out/best.csv                       the best configuration per (profile, method), simulator spread
    out/deployments.csv                per deployment and batch size: the served best, throughput,
                                       latency, plain decoding's throughput, where speculation stops paying
    out/deployments_served.csv         every configuration served per deployment and batch size
    out/paper_choices.csv              the sweep's choice beside the papers' own, where they give one
    out/plots/<method>.png             one figure per method (experiments.sweep.plots, from `spec.plot`)
    out/plots/deployments.png          with several batch sizes: throughput over plain decoding per batch
    out/<engine>_*.json|.txt, exports.md  with --export (experiments.sweep.export)
    out/report.md                      links the plots, explains the differences with the papers
    out/run.json                       options, profiles, timings

and `stdout_table(result)` is the short table the command prints.
"""
from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import methods
from common import atomic
from experiments.sweep.deployments import DEPLOYMENT
from experiments.sweep.plots import no_figure_note, plot_deployments, plot_method

SHOWN_COLUMNS = ["profile", "method", "drafter", "dataset", "config", "speedup", "tokens_per_step",
                 "verified_per_step", "draft_cost"]


def _fmt_table(frame: pd.DataFrame, columns: list[str], floatfmt: str = ".3g") -> str:
    """A markdown table of `columns` (no tabulate dependency)."""
    cols = [c for c in columns if c in frame.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join(" --- " for _ in cols) + "|"]
    for row in frame[cols].itertuples(index=False):
        cells = []
        for v in row:
            if isinstance(v, float):
                cells.append(format(v, floatfmt))
            else:
                cells.append(str(v))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


DEPLOYMENT_COLUMNS = ["batch", "answer", "config", "throughput_tok_s", "ar_throughput_tok_s", "throughput_ratio",
                      "tpot_ms", "e2e_s_p50", "serving_verdict"]


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
    out = frame.copy()
    for col in out.columns:
        if out[col].dtype == object and any(isinstance(v, tuple) for v in out[col].dropna().iloc[:1]):
            codes, uniques = pd.factorize(out[col])
            texts = np.asarray([_joined(v) for v in uniques] + [None], dtype=object)
            out[col] = texts[codes]     # code -1 (missing) -> None
    return out


def _joined(value):
    return "x".join(map(str, value)) if isinstance(value, tuple) else value


def write_outputs(result: Any, out_dir: Path, progress: bool = False) -> dict[str, Path]:
    """Write every table, plot and the report of a SweepResult into `out_dir`; return the paths
    (a progress bar over the tables and plots when `progress` and it takes over a second)."""
    from experiments.sweep.executor import progress_bar

    out_dir = Path(out_dir)
    written: dict[str, Path] = {}
    started = time.perf_counter()
    top = int(result.options.get("top", 50))
    bar = progress_bar(3 * len(result.tables), "writing tables and plots", progress, unit="file")
    for method, frame in result.tables.items():
        plain = _plain_columns(frame)
        written[f"parquet:{method}"] = _write_parquet(out_dir / "tables" / f"{method}.parquet", plain,
                                                      {"specsim": json.dumps(result.options)})
        bar.update()
        written[f"csv:{method}"] = _write_csv(out_dir / "tables" / f"{method}_top{top}.csv", plain[plain["rank"] <= top])
        bar.update()
        plot = plot_method(methods.get(method), frame, out_dir / "plots" / f"{method}.png")
        if plot is not None:
            written[f"plot:{method}"] = plot
        bar.update()
    bar.close()
    written["best"] = _write_csv(out_dir / "best.csv", _plain_columns(result.best))
    if not result.deployments.empty:
        answers = result.deployments.merge(result.stops_paying, on=DEPLOYMENT, how="left")
        written["deployments"] = _write_csv(out_dir / "deployments.csv", answers)
        written["served"] = _write_csv(out_dir / "deployments_served.csv", result.served)
        plot = plot_deployments(result.deployments, out_dir / "plots" / "deployments.png")
        if plot is not None:
            written["plot:deployments"] = plot
    if result.options.get("export"):
        from experiments.sweep.export import plan, write_exports

        written.update(write_exports(plan(result.served, result.profiles, result.options["export"]), out_dir))
    if result.paper_choices is not None and not result.paper_choices.empty:
        written["paper_choices"] = atomic.write_csv(out_dir / "paper_choices.csv", result.paper_choices)
    result.timings["write"] = time.perf_counter() - started
    written["run"] = atomic.write_json(out_dir / "run.json", {"options": result.options, "timings_s": result.timings,
                                                              "skipped": result.skipped})
    written["report"] = atomic.write_text(out_dir / "report.md", markdown_report(result, written, out_dir))
    return written


def markdown_report(result: Any, written: dict[str, Path], out_dir: Path) -> str:
    opts = result.options
    lines = [
        "# specsim sweep",
        "",
        f"Profiles: {', '.join(result.profile_names)}. Methods: {', '.join(result.tables)}. "
        f"Temperature {'lowest recorded per profile' if opts['temperature'] is None else opts['temperature']}, batch {opts['batch']}, hardware {opts['hardware'] or 'as profiled'}, "
        f"{''.join(f'--{k} {v}, ' for k, v in opts['space'].items())}seed {opts['seed']}.",
        f"{sum(len(t) for t in result.tables.values())} configurations scored by the closed forms in "
        f"{result.timings.get('score', 0):.2f} s; the best {opts['rescore']} per method and profile re-scored "
        f"in the simulator ({opts['sim_tokens']} tokens x {opts['sim_repeats']} seeds) in "
        f"{result.timings.get('simulate', 0):.2f} s; deployments served at batch "
        f"{', '.join(map(str, opts.get('batch_sizes') or [opts['batch']]))} in {result.timings.get('deployments', 0):.2f} s.",
        "",
    ]
    lines += deployment_section(result, written, out_dir)
    if "exports_md" in written:
        lines += [f"Engine configurations ({', '.join(opts['export'])}): [exports.md](exports.md).", ""]
    best = result.best.sort_values(["profile", "speedup"], ascending=[True, False])
    lines += ["## Best configuration per method and profile", "",
              "`sim_*`: the simulator's speedup over repeated seeded runs (mean, 5th and 95th percentile of "
              "per-run speedup).", "",
              "`heldout_error`: the Profile's held-out error of a predicted speedup (its engine calibration, "
              "leave one configuration out, 90th percentile); `verdict`: speculate only when the predicted gain "
              "exceeds it, tie within it.", "",
              _fmt_table(best, SHOWN_COLUMNS + ["ctx_len", "heldout_error", "verdict", "sim_speedup", "sim_p05",
                                                "sim_p95"]), ""]
    if result.paper_choices is not None and not result.paper_choices.empty:
        lines += ["## The sweep's choices beside the papers'", "",
                  _fmt_table(result.paper_choices, list(result.paper_choices.columns)), ""]
        lines += [f"- {n}" for n in result.paper_choices.get("why", []) if isinstance(n, str) and n]
        lines.append("")
    for method, frame in result.tables.items():
        lines += [f"## {method}", ""]
        plot = written.get(f"plot:{method}")
        if plot is not None:
            lines += [f"![{method}]({plot.relative_to(out_dir).as_posix()})", ""]
        else:
            lines += [f"No figure: {no_figure_note(methods.get(method), frame)}.", ""]
        csv = written[f"csv:{method}"].relative_to(out_dir).as_posix()
        lines += [f"Tables: [{csv}]({csv}) (top {opts.get('top', 50)} per profile), "
                  f"[tables/{method}.parquet](tables/{method}.parquet) (all {len(frame)} rows). Top 5 per profile:", ""]
        top = frame.sort_values(["profile", "rank"]).groupby("profile").head(5)
        lines += [_fmt_table(top, SHOWN_COLUMNS), ""]
    if result.skipped:
        lines += ["## Not scored", "", "(profile, method) pairs the profile lacks what the method needs for; the full "
                  "list is in run.json (`skipped`).", ""] + [f"- {line}" for line in not_scored(result.skipped)] + [""]
    return "\n".join(lines)


def not_scored(skipped: list[str]) -> list[str]:
    """The skipped pairs collapsed to one line per reason: the reason, how many profiles, which."""
    by_reason: dict[str, list[str]] = {}
    for line in skipped:
        found = re.match(r"profile '(?P<name>[^']*)' (?P<reason>.*)", line)
        name, reason = (found["name"], found["reason"]) if found else ("", line)
        by_reason.setdefault(reason, []).append(name)
    return [f"{reason}: {len(names)} profile(s)" + (f" ({', '.join(n for n in names if n)})" if any(names) else "")
            for reason, names in sorted(by_reason.items(), key=lambda item: -len(item[1]))]


def deployment_section(result: Any, written: dict[str, Path], out_dir: Path) -> list[str]:
    """The answer per deployment (model, hardware, dataset, temperature): the best configuration the
    simulator serves at each batch size, and where speculation stops paying."""
    answers = result.deployments
    if answers.empty:
        return []
    lines = ["## Answer per deployment", "",
             "A deployment is one target on one hardware for one dataset at one temperature; methods and drafters "
             "compete only inside it. At each batch size B the closed forms' best configuration of every (method, "
             "drafter), scored at B, is served by the discrete-event simulator (B sequences decoding together, "
             f"{int(result.options['sim_tokens'])} new tokens each) beside plain decoding. `answer`: the fastest "
             "speculative configuration that fits in memory where it serves more tokens/s than plain decoding, else "
             "ar; `serving_verdict`: its gain against the Profile's held-out error (speculate, tie, don't). All "
             "served rows: [deployments_served.csv](deployments_served.csv).", ""]
    if "plot:deployments" in written:
        lines += [f"![deployments]({written['plot:deployments'].relative_to(out_dir).as_posix()})", ""]
    stops = result.stops_paying.set_index(DEPLOYMENT)
    for key, group in answers.groupby(DEPLOYMENT, sort=False):
        d = dict(zip(DEPLOYMENT, key))
        lines += [f"### {d['profile']} ({d['hardware']}, {d['dataset']}, T={float(d['temperature']):g})", "",
                  _fmt_table(group, DEPLOYMENT_COLUMNS), ""]
        stop = stops.loc[key]
        if pd.notna(stop["stops_paying_at"]):
            lines += [f"Speculation stops paying at batch **{int(stop['stops_paying_at'])}**.", ""]
        else:
            lines += [f"Speculation pays at every batch simulated (up to {int(stop['largest_batch'])}).", ""]
    return lines


def stdout_table(result: Any) -> str:
    """The short table printed at the end of a sweep: best configuration per method and profile."""
    best = result.best.sort_values(["profile", "speedup"], ascending=[True, False])
    cols = [c for c in ["profile", "method", "drafter", "config", "speedup", "tokens_per_step", "sim_speedup"]
            if c in best]
    view = best[cols].copy()
    view["profile"] = view.profile.str.slice(0, 40)
    return view.to_string(index=False, float_format=lambda v: f"{v:.2f}")
