"""The sweep's report.md, in the order a person decides from it.

First what to run per deployment: the answer, its own throughput and latency, plain decoding's,
and why (the memory arithmetic where something does not fit, the Profile's held-out error where a
gain is a tie); then, per deployment and batch size, every latency with the load it was served
under; then the best configuration per method and profile with the configurations that tie with
it, the papers' choices beside the sweep's, and one section per method with its figure.
`md_table` is the project's markdown table (cells escaped, missing values as a dash).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import methods
from calibrate.assumed import ASSUMED
from sweep import ranking, scoring
from simulator.batch_load import WAVES
from sweep.deployments import DEPLOYMENT, NO_RUN, NOT_PRICED, NOTHING_FITS
from sweep.plots import no_figure_note, not_drawn

REPORT_ROWS = 5            # rows per (profile, method) in a method's section (at most --top)
SHOWN_COLUMNS = ["profile", "method", "drafter", "dataset", "config", "speedup", "verdict", "tokens_per_step",
                 "verified_per_step", "draft_cost"]
BEST_COLUMNS = ["profile", "method", "drafter", "dataset", "acceptance_source", "config", "speedup", "speedup_lo", "speedup_hi",
                "prompts_to_confirm", "ties", "verdict", "tokens_per_step",
                "verified_per_step", "draft_cost", "ctx_len", "heldout_error", "sim_speedup", "sim_p05", "sim_p95"]
# the answer table of one deployment: column -> header
ANSWER_TABLE = {"batch": "batch", "answer": "run", "throughput_tok_s": "tok/s", "ar_throughput_tok_s": "plain tok/s",
                "throughput_ratio": "x plain", "serving_verdict": "verdict", "tpot_ms": "TPOT ms",
                "latency_s_p50": "own latency s", "ttft_ms": "TTFT ms (load)", "e2e_s_p50": "end-to-end s (load)",
                "queue_s_p50": "wait s (load)", "alone_s": "alone s (batch 1)"}


def md_table(frame: pd.DataFrame, columns: list[str], floatfmt: str = ".3g",
             headers: dict[str, str] | None = None) -> str:
    """A markdown table of `columns` (no tabulate dependency): '|' in a cell is escaped, a missing
    value is a dash, a float is written with `floatfmt`."""
    cols = [c for c in columns if c in frame.columns]
    names = [(headers or {}).get(c, c) for c in cols]
    lines = ["| " + " | ".join(names) + " |", "|" + "|".join(" --- " for _ in cols) + "|"]
    for row in frame[cols].itertuples(index=False):
        lines.append("| " + " | ".join(_cell(v, floatfmt) for v in row) + " |")
    return "\n".join(lines)


def _cell(value, floatfmt: str) -> str:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "–"
    if isinstance(value, (float, np.floating)):
        return f"{float(value):,.0f}" if abs(value) >= 1000 else format(float(value), floatfmt)
    return str(value).replace("|", "\\|").replace("\n", " ")


def _deployment_name(d: dict[str, Any]) -> str:
    return f"{d['profile']} ({d['hardware']}, {d['dataset']}, T={float(d['temperature']):g})"


def _stage_times(result: Any) -> str:
    """What the sweep computed and how long each stage took (`sweep.run.run_sweep`'s timings)."""
    opts, took = result.options, result.timings
    batches = opts.get("batch_sizes") or [opts["batch"]]
    served_first = opts["batch"] in batches
    others = [b for b in batches if b != opts["batch"]]
    line = (f"{sum(len(t) for t in result.tables.values())} configurations scored by the closed forms in "
            f"{took.get('score', 0):.2f} s; the best {opts['rescore']} per method and profile re-scored in the "
            f"simulator ({opts['sim_tokens']} tokens x {opts['sim_repeats']} seeds)"
            + (f" and the deployments served at batch {opts['batch']}" if served_first else "")
            + f" in {took.get('simulate_and_serve', 0):.2f} s")
    if others:
        line += f"; served at batch {', '.join(map(str, others))} in {took.get('other_batches', 0):.2f} s"
    return line + "."


def markdown_report(result: Any, written: dict[str, Path], out_dir: Path) -> str:
    opts = result.options
    lines = [
        "# specsim sweep",
        "",
        f"Profiles: {', '.join(result.profile_names)}. Methods: {', '.join(result.tables)}. "
        f"Temperature {'lowest recorded per profile' if opts['temperature'] is None else opts['temperature']}, "
        f"batch {opts['batch']}, hardware {opts['hardware'] or 'as profiled'}, "
        f"{''.join(f'--{k} {v}, ' for k, v in opts['space'].items())}seed {opts['seed']}.",
        _stage_times(result),
        "",
    ]
    lines += measured_section(result)
    lines += what_to_run(result)
    lines += deployment_section(result, written, out_dir)
    if "exports_md" in written:
        lines += [f"Engine configurations ({', '.join(opts['export'])}): [exports.md](exports.md).", ""]
    lines += best_section(result)
    lines += choices_section(result.paper_choices)
    lines += method_sections(result, written, out_dir)
    if result.skipped:
        lines += ["## Not scored", "", "(profile, method) pairs the profile lacks what the method needs for, and "
                  "batches past what a profile's latency tables measured; the full list is in run.json (`skipped`).",
                  ""] + [f"- {line}" for line in not_scored(result.skipped)] + [""]
    return "\n".join(lines)


def what_to_run_rows(result: Any) -> pd.DataFrame:
    """One row per deployment at its smallest batch: what to run, how fast, and why (the report's
    first table and the command's printed answer: one frame, so one number)."""
    answers = result.deployments
    if answers.empty:
        return pd.DataFrame()
    first = answers.sort_values("batch", kind="stable").groupby(DEPLOYMENT, sort=False).head(1)
    stops = result.stops_paying.set_index(DEPLOYMENT) if not result.stops_paying.empty else None
    rows = []
    for row in first.itertuples(index=False):
        d = row._asdict()
        run = d["answer"] if d["drafter"] in ("", "-") or d["answer"] in (methods.BASELINE, *NO_RUN) \
            else f"{d['answer']} (drafter {d['drafter']})"
        why = d["why"]
        if stops is not None and len(answers["batch"].unique()) > 1 and d["answer"] not in NO_RUN:
            stop = stops.loc[tuple(d[k] for k in DEPLOYMENT)]
            why += (f"; speculation stops paying at batch {int(stop['stops_paying_at'])}{_again(stop)}"
                    if pd.notna(stop["stops_paying_at"]) else f"; it pays up to batch {int(stop['largest_batch'])}")
        rows.append({"deployment": _deployment_name(d), "batch": d["batch"], "run": run,
                     "tok/s": d["throughput_tok_s"], "x plain": d["throughput_ratio"],
                     "latency s, one request alone": d["alone_s"], "why": why})
    return pd.DataFrame(rows)


def what_to_run(result: Any) -> list[str]:
    rows = what_to_run_rows(result)
    if rows.empty:
        return []
    batch = int(rows["batch"].min())
    return ["## What to run", "",
            f"Per deployment at batch {batch}: the configuration to run, its simulated tokens/s and its gain over "
            f"plain decoding (x plain), the latency of a {int(result.options['sim_tokens'])}-token answer to one "
            f"request served alone (no queue, batch 1), and why. A run named `ar` is plain decoding; "
            f"`{NOTHING_FITS}` means not even plain decoding runs that batch's sequences at once in one GPU's KV "
            "memory (none at all, or fewer than the batch: `why` says which); "
            f"`{NOT_PRICED}` that the Profile's latency tables were measured at smaller batches only.", "",
            md_table(rows, ["deployment", "batch", "run", "tok/s", "x plain", "latency s, one request alone", "why"]),
            ""]


def measured_rows(result: Any) -> list[dict[str, Any]]:
    """Per Profile that merged an engine's measurement (`Profile.measured`): the source, and the
    Profile's prediction for the configuration it measured (its draft length K where the entry has
    per-position acceptance, else the best of that entry), beside what the engine observed."""
    rows = []
    for name, profile in result.profiles.items():
        measured = profile.measured()
        if measured is None:
            continue
        entry, k = measured.entry, None if measured.entry.alpha_by_position is None else len(measured.entry.alpha_by_position)
        # each method's rows on the entry, in the sweep's rank order; the first method's best, and the best at K
        scored = [t[(t["profile"] == name) & (t["acceptance"] == measured.key)] for t in result.tables.values()]
        scored = [t for t in scored if len(t)]
        at_k = [t[t["gamma"] == k] if k is not None and "gamma" in t else t for t in scored]
        best_of_entry = scored[0].head(1) if scored else pd.DataFrame()
        found = next((t.head(1) for t in at_k if len(t)), pd.DataFrame())
        observed = {metric: measured.latency_s.get(metric, {}) for metric in ("itl", "tpot", "ttft")}
        row = {"profile": name, "hardware": profile.hardware, "key": measured.key, "format": measured.format,
               "sources": ", ".join(Path(s).name for s in measured.sources), "drafter": entry.drafter,
               "dataset": entry.dataset, "temperature": entry.temperature, "k": k, "batch": int(result.options["batch"]),
               **{f"measured_{m}_{q}_ms": 1000 * float(v[q]) if q in v else np.nan
                  for m, v in observed.items() for q in ("p50", "mean")}}
        if len(best_of_entry):
            row.update(best_config=best_of_entry["config"].iat[0], best_speedup=float(best_of_entry["speedup"].iat[0]))
        if len(found):
            best = found.iloc[0]
            row.update(config=best["config"], method=best["method"], tokens_per_step=float(best["tokens_per_step"]),
                       predicted_itl_ms=1000 * float(best["step_s"]),
                       predicted_tpot_ms=1000 * float(best["step_s"]) / float(best["tokens_per_step"]))
        rows.append(row)
    return rows


def measured_section(result: Any) -> list[str]:
    """The measured deployment first: what the engine file was, and predicted beside measured."""
    lines = []
    for r in measured_rows(result):
        lines += [f"## Measured deployment: {r['profile']}", "",
                  f"This Profile merged `{r['format']}` ({r['sources']}): acceptance entry `{r['key']}` (drafter "
                  f"{r['drafter']}, dataset {r['dataset']}, T={r['temperature']:g}). Where no `--dataset` or "
                  "`--temperature` is asked, the sweep answers for this deployment, with this measured acceptance.", ""]
        if "config" not in r:
            at = f" at K = {r['k']}" if r["k"] else ""
            lines += [f"No scored configuration used `{r['key']}`{at}: nothing here predicts the measured deployment.", ""]
            continue
        lines += [f"Best with this drafter and acceptance: `{r['best_config']}`, {r['best_speedup']:.2f}x plain decoding "
                  "(closed form, one request). "
                  f"Predicted for `{r['config']}` ({r['method']}, the draft length measured) at batch "
                  f"{r['batch']} on {r['hardware']}: {r['tokens_per_step']:.2f} tokens per step (from "
                  "this file's acceptance), a step (one output chunk) every "
                  f"{r['predicted_itl_ms']:.1f} ms, TPOT {r['predicted_tpot_ms']:.1f} ms.", "",
                  "| | ITL p50 ms | ITL mean ms | TPOT p50 ms | TPOT mean ms |", "| --- | --- | --- | --- | --- |",
                  f"| measured by the engine | {_ms(r['measured_itl_p50_ms'])} | {_ms(r['measured_itl_mean_ms'])} | "
                  f"{_ms(r['measured_tpot_p50_ms'])} | {_ms(r['measured_tpot_mean_ms'])} |",
                  f"| predicted, batch {r['batch']} | {r['predicted_itl_ms']:.1f} | "
                  f"{r['predicted_itl_ms']:.1f} | {r['predicted_tpot_ms']:.1f} | {r['predicted_tpot_ms']:.1f} |", "",
                  "The engine's figures are over whatever batch it served and on the machine it ran on; the prediction "
                  f"is this Profile's {r['hardware']} at the batch above. A gap larger than the Profile's held-out error "
                  "says one of the two differs from the deployment: re-profile on its machine or sweep at its batch "
                  "(`--batch-sizes`).", ""]
    return lines


def measured_line(r: dict[str, Any]) -> str:
    """A measured deployment in one printed line (`measured_rows`)."""
    line = (f"measured deployment: {r['profile']} answers for {r['drafter']} on {r['dataset']} at "
            f"T={r['temperature']:g} ({r['format']}: {r['sources']})")
    if "config" in r:
        line += (f"; {r['config']}: ITL p50 measured {_ms(r['measured_itl_p50_ms'])} ms, predicted "
                 f"{r['predicted_itl_ms']:.1f} ms at batch {r['batch']} on {r['hardware']}")
    return line


def _ms(value: float) -> str:
    return "–" if value is None or not np.isfinite(value) else f"{value:.1f}"


def deployment_section(result: Any, written: dict[str, Path], out_dir: Path) -> list[str]:
    """The answer per deployment (model, hardware, dataset, temperature) at each batch size, with the
    load behind every latency, why, and where speculation stops paying."""
    answers = result.deployments
    if answers.empty:
        return []
    lines = ["## Answer per deployment", "",
             "A deployment is one target on one hardware for one dataset at one temperature; methods and drafters "
             "compete only inside it. At each batch size B the closed forms' best configuration of every (method, "
             "drafter) that fits in memory, scored at B, is served by the discrete-event simulator beside plain "
             f"decoding, each request generating {int(result.options['sim_tokens'])} tokens. `run`: the fastest "
             "speculative configuration where it serves more tokens/s than plain decoding, else `ar` (plain "
             "decoding), with its own numbers; `verdict`: its gain against the Profile's held-out error (speculate, "
             "tie). All served rows: [deployments_served.csv](deployments_served.csv).", "",
             f"**The load behind the latencies.** At batch B, {WAVES} x B requests arrive together at t = 0 and B "
             "decode at once; the others wait for a slot (the `arrivals` column of the CSVs states each deployment's "
             "prompt and answer lengths; `simulate crossover` and capacity planning's crossover serve a batch size "
             "under this same load, `simulator.batch_load`). TPOT (time per output token), TTFT and end-to-end latency "
             "are for that load and include the wait (`wait s`, median). `own latency s` is a request's median time "
             "from admission to its last token, without the wait, B sequences decoding together; `alone s` is the "
             "latency of one request served alone at batch 1, without queueing.", ""]
    one_batch = answers["batch"].nunique() == 1          # said once, not once per deployment
    if one_batch:
        lines += [_stop_unknown(answers["batch"].iloc[0]), ""]
    if "plot:deployments" in written:
        lines += [f"![deployments]({written['plot:deployments'].relative_to(out_dir).as_posix()})", ""]
    stops = result.stops_paying.set_index(DEPLOYMENT)
    for key, group in answers.groupby(DEPLOYMENT, sort=False):
        d = dict(zip(DEPLOYMENT, key))
        lines += [f"### {_deployment_name(d)}", "", md_table(group, list(ANSWER_TABLE), headers=ANSWER_TABLE), ""]
        if len(group) > 1:       # one batch size: its why is in "What to run"
            lines += [f"- batch {int(r.batch)}: **{r.answer}**: {r.why}." for r in group.itertuples()] + [""]
        stop = stops.loc[key]
        if not stop["runs"]:
            lines += ["Nothing runs at any batch simulated: the target needs more memory than one GPU has "
                      "(tensor parallelism over several GPUs, or a smaller dtype).", ""]
        elif pd.notna(stop["stops_paying_at"]):
            lines += [f"Speculation stops paying at batch **{int(stop['stops_paying_at'])}**{_again(stop)}.", ""]
        elif group["batch"].nunique() > 1:
            lines += [f"Speculation pays at every batch simulated (up to {int(stop['largest_batch'])}).", ""]
        elif not one_batch:
            lines += [_stop_unknown(stop["largest_batch"]), ""]
    return lines


def _again(stop) -> str:
    """', and pays again at batch B' where the served curve turns back above plain decoding."""
    again = stop.get("pays_again_at", float("nan"))
    return f", and pays again at batch {int(again)}" if pd.notna(again) else ""


def _stop_unknown(batch) -> str:
    return (f"Served at batch {int(batch)} only: where speculation stops paying is not known "
            "(`--batch-sizes 1,8,32,128` serves each).")


def best_section(result: Any) -> list[str]:
    """The best configuration per (profile, method) that fits, the ties beside it, and the memory
    arithmetic of every setup that does not fit."""
    best = result.best.sort_values(["profile", "speedup"], ascending=[True, False], kind="stable")
    lines = ["## Best configuration per method and profile", "",
             "Ranked by the closed form's predicted speedup, configurations that fit in memory first. `ties`: how "
             "many other configurations of the same method are predicted within the Profile's held-out error "
             "(`heldout_error`: its engine calibration, leave one configuration out, 90th percentile) of the one "
             "shown: the model cannot tell them apart. Among equal predictions the one shown is the cheaper step "
             "(fewer tokens verified, then less draft cost), then the first label in alphabetical order: the same "
             "rule in every table and plot. `verdict`: speculate only when the predicted gain exceeds the held-out "
             f"error, tie within it, `{scoring.DOES_NOT_FIT}` when its sequences do not fit in one GPU's memory. "
             "`sim_*`: the simulator's speedup over repeated seeded runs (pooled, 5th and 95th percentile of "
             "per-run speedup). `speedup_lo`-`speedup_hi`: the 90% interval of the long-run speedup (the held-out "
             "error and, where the Profile records it, how far one prompt's acceptance strays, over its calibration "
             "prompts); `prompts_to_confirm`: prompts a benchmark needs before the gain over plain decoding stands "
             "clear of the prompt-to-prompt spread at 90% (blank where the Profile records no spread; "
             "`costmodel.uncertainty`). `acceptance_source`: ASSUMED where no one measured the method's drafter on this "
             "target (next section).", "",
             md_table(best, BEST_COLUMNS), ""]
    lines += _memory_notes(result, best)
    return lines + assumed_section(result)


def assumed_section(result: Any) -> list[str]:
    """One line per (profile, method, drafter) scored on an ASSUMED acceptance entry, with its source."""
    rows = [frame[frame["acceptance_source"] == ASSUMED].drop_duplicates(["profile", "drafter"])
            for frame in result.tables.values() if "acceptance_source" in frame]
    rows = [r for r in rows if len(r)]
    if not rows:
        return []
    lines = ["## Assumed acceptance", "",
             "These methods are offered by serving engines but the Profile did not measure them: their drafter is "
             "priced from its architecture on the Profile's hardware terms and their acceptance is carried from "
             "another target's measurement (`calibrate.assumed`; `--assumed none` leaves them out). Their speedups "
             "are as good as that assumption; a measurement (`python -m calibrate.ingest ... --profile`) replaces it.", ""]
    for row in pd.concat(rows, ignore_index=True).itertuples(index=False):
        source = result.profiles[row.profile].acceptance_model(row.acceptance).source if row.profile in result.profiles \
            else ASSUMED
        lines.append(f"- {row.profile}, {row.method} (drafter {row.drafter}): {source}")
    return lines + [""]


def _memory_notes(result: Any, frame: pd.DataFrame) -> list[str]:
    """One line per (profile, drafter) of `frame` whose configurations do not fit: the arithmetic."""
    if "verdict" not in frame:
        return []
    bad = frame[frame["verdict"] == scoring.DOES_NOT_FIT][["profile", "drafter"]].drop_duplicates()
    notes = []
    for row in bad.itertuples(index=False):
        profile = result.profiles.get(row.profile)
        if profile is not None:
            drafter = None if row.drafter in ("-", "") else row.drafter
            notes.append(f"- {row.profile}{'' if drafter is None else ' / ' + drafter}: "
                         f"{scoring.memory_note(profile, drafter)}.")
    return ([f"`{scoring.DOES_NOT_FIT}`:", ""] + notes + [""]) if notes else []


def choices_section(choices: pd.DataFrame | None) -> list[str]:
    """The papers' choices beside the sweep's; each reason written once, referenced by number."""
    if choices is None or choices.empty:
        return []
    notes: list[str] = []
    refs = []
    for why in choices.get("why", pd.Series([""] * len(choices))):
        why = why if isinstance(why, str) else ""
        if why and why not in notes:
            notes.append(why)
        refs.append(f"[{notes.index(why) + 1}]" if why else "")
    table = choices.drop(columns=["why"], errors="ignore").assign(why=refs)
    return (["## The sweep's choices beside the papers'", "", md_table(table, list(table.columns)), ""]
            + [f"{i}. {note}" for i, note in enumerate(notes, 1)] + [""])


def method_sections(result: Any, written: dict[str, Path], out_dir: Path) -> list[str]:
    opts = result.options
    rows = min(REPORT_ROWS, int(opts.get("top", 50)))
    lines = []
    for method, frame in result.tables.items():
        lines += [f"## {method}", ""]
        plot = written.get(f"plot:{method}")
        if plot is not None:
            lines += [f"![{method}]({plot.relative_to(out_dir).as_posix()})", ""]
            left_out = not_drawn(frame)
            if left_out:
                lines += [f"Not drawn (no configuration fits in memory): {', '.join(left_out)}.", ""]
        else:
            lines += [f"No figure: {no_figure_note(methods.get(method), frame)}.", ""]
        csv = written[f"csv:{method}"].relative_to(out_dir).as_posix()
        lines += [f"Tables: [{csv}]({csv}) (top {opts.get('top', 50)} per profile), "
                  f"[tables/{method}.parquet](tables/{method}.parquet) (all {len(frame)} rows). Top {rows} per "
                  "profile:", ""]
        top = ranking.top_of_table(frame, rows).sort_values(["profile", "rank"])
        lines += [md_table(top, SHOWN_COLUMNS), ""]
    return lines


def not_scored(skipped: list[str]) -> list[str]:
    """The skipped pairs collapsed to one line per reason: the reason, how many profiles, which."""
    by_reason: dict[str, list[str]] = {}
    for line in skipped:
        found = re.match(r"profile '(?P<name>[^']*)' (?P<reason>.*)", line)
        name, reason = (found["name"], found["reason"]) if found else ("", line)
        by_reason.setdefault(reason, []).append(name)
    return [f"{reason}: {len(names)} profile(s)" + (f" ({', '.join(n for n in names if n)})" if any(names) else "")
            for reason, names in sorted(by_reason.items(), key=lambda item: -len(item[1]))]
