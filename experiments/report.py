"""The sweep's outputs: ranked tables (CSV + parquet), the best configurations, the markdown report.

`write_outputs(result, out_dir)` writes, atomically:

    out/tables/<method>.csv|.parquet   every configuration scored, ranked (one row each)
    out/best.csv                       the best configuration per (profile, method), simulator spread
    out/paper_choices.csv              the sweep's choice beside the papers' own, where they give one
    out/plots/<method>.png             one figure per method (experiments.plots, from `spec.plot`)
    out/report.md                      links the plots, explains the differences with the papers
    out/run.json                       options, profiles, timings

and `stdout_table(result)` is the short table the command prints.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import methods
from common import atomic
from experiments.plots import plot_method

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


def write_outputs(result: Any, out_dir: Path) -> dict[str, Path]:
    """Write every table, plot and the report of a SweepResult into `out_dir`; return the paths."""
    out_dir = Path(out_dir)
    written: dict[str, Path] = {}
    started = time.perf_counter()
    for method, frame in result.tables.items():
        plain = _plain_columns(frame)
        written[f"csv:{method}"] = _write_csv(out_dir / "tables" / f"{method}.csv", plain)
        written[f"parquet:{method}"] = atomic.write_parquet(
            out_dir / "tables" / f"{method}.parquet", plain, metadata={"specsim": json.dumps(result.options)}
        )
        plot = plot_method(methods.get(method), frame, out_dir / "plots" / f"{method}.png")
        if plot is not None:
            written[f"plot:{method}"] = plot
    written["best"] = _write_csv(out_dir / "best.csv", _plain_columns(result.best))
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
        f"k-configuration budget {opts['budget']}, seed {opts['seed']}.",
        f"{sum(len(t) for t in result.tables.values())} configurations scored by the closed forms in "
        f"{result.timings.get('score', 0):.2f} s; the best {opts['rescore']} per method and profile re-scored "
        f"in the simulator ({opts['sim_tokens']} tokens x {opts['sim_repeats']} seeds) in "
        f"{result.timings.get('simulate', 0):.2f} s.",
        "",
        "## Best configuration overall",
        "",
    ]
    best = result.best.sort_values("speedup", ascending=False)
    if not best.empty:
        top = best.iloc[0]
        lines.append(f"**{top.method} `{top.config}`** on *{top.profile}*: predicted speedup "
                     f"{top.speedup:.2f}x ({top.tokens_per_step:.2f} tokens per step)"
                     + (f", simulated {top.sim_speedup:.2f}x [{top.sim_p05:.2f}, {top.sim_p95:.2f}]"
                        if "sim_speedup" in best and pd.notna(top.get("sim_speedup")) else "") + ".")
    lines += ["", "## Best configuration per method and profile", "",
              "`sim_*`: the simulator's speedup over repeated seeded runs (mean, 5th and 95th percentile of "
              "per-run speedup).", "",
              _fmt_table(best, SHOWN_COLUMNS + ["sim_speedup", "sim_p05", "sim_p95"]), ""]
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
        lines += [f"Table: [tables/{method}.csv](tables/{method}.csv) ({len(frame)} rows, "
                  f"[parquet](tables/{method}.parquet)). Top 5 per profile:", ""]
        top = frame.sort_values(["profile", "rank"]).groupby("profile").head(5)
        lines += [_fmt_table(top, SHOWN_COLUMNS), ""]
    if result.skipped:
        lines += ["## Not scored", ""] + [f"- {s}" for s in result.skipped] + [""]
    return "\n".join(lines)


def stdout_table(result: Any) -> str:
    """The short table printed at the end of a sweep: best configuration per method and profile."""
    best = result.best.sort_values(["profile", "speedup"], ascending=[True, False])
    cols = [c for c in ["profile", "method", "drafter", "config", "speedup", "tokens_per_step", "sim_speedup"]
            if c in best]
    view = best[cols].copy()
    view["profile"] = view.profile.str.slice(0, 40)
    return view.to_string(index=False, float_format=lambda v: f"{v:.2f}")
