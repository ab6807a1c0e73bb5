"""`python -m calibrate.ingest FORMAT FILE... [--json] [--out FILE [--overwrite]] [--profile BASE]`.

Reads what a deployed engine or benchmark wrote and prints what it measured: per-position
acceptance, mean accepted tokens per step, alpha, latency observations, and one line per thing
the file could not give and how it was filled (or, with --json, one JSON object with those).

`--out FILE.parquet` writes the StepTrace of a step format; `--out FILE.json` writes the result
object, or with `--profile BASE` a copy of BASE with the ingested acceptance entry and its
provenance (refused when the source's target or drafter is not BASE's). An existing --out is
replaced only with --overwrite; every write is atomic. Bad input: one line, exit 2, nothing written.
"""
from __future__ import annotations

import argparse
import importlib
import json
import re
import sys
from pathlib import Path

import methods
from calibrate.ingest import FORMATS, IngestOptions, Ingested, ingest
from calibrate.ingest.result import merge_into_profile
from calibrate.ingest.sglang_bench import ACCEPT_LENGTH
from common.rundir import claim_file, git_commit
from profiles.profile import Profile
from common import atomic
from common.errors import InputError
from common.cli import CliParser, cli_entry
from traces.schema import write_trace


def describe(result: Ingested) -> list[str]:
    lines = [f"{result.format}: {', '.join(result.sources)}"]
    if result.models:
        lines.append("models: " + ", ".join(f"{k} {v}" for k, v in result.models.items()))
    s = result.summary
    if "mean_accepted_tokens" in s:
        lines.append(f"mean accepted tokens per step: {s['mean_accepted_tokens']:.3f}")
    if s.get("per_position_acceptance"):
        lines.append("per-position acceptance: " + " ".join(f"{a:.3f}" for a in s["per_position_acceptance"]))
    if "alpha" in s:
        lines.append(f"alpha: {s['alpha']:.4f}")
    if result.steps is not None:
        lines.append(f"StepTrace: {len(result.steps)} steps over {result.steps['prompt_id'].nunique()} prompts")
    for name, stats in result.latency.items():
        lines.append(f"latency {name}: " + ", ".join(
            f"{k} {v * 1000:.2f} ms" if k != "count" else f"{k} {v:g}" for k, v in stats.items()))
    for name, value in result.throughput.items():
        lines.append(f"{name}: {value:g}")
    lines += result.report
    lines += [f"not provided: {line}" for line in result.not_provided]
    return lines


NUMBER_LIST = re.compile(r"\[[-+.\deEnul,\s]*\]")     # a JSON list of numbers and nulls, as indent=2 spreads it


def json_text(obj) -> str:
    """Indented JSON with each list of numbers on one line (per-position lists stay a few KB, not pages)."""
    text = json.dumps(obj, indent=2, default=str, allow_nan=False)
    def one_line(match: re.Match) -> str:   # only the newlines indent= put there (a JSON string holds none)
        return re.sub(r"\n\s*\]", "]", re.sub(r"\[\n\s*", "[", re.sub(r",\n\s*", ", ", match.group(0))))

    return NUMBER_LIST.sub(one_line, text)


def write_out(result: Ingested, out: Path, profile: Path | None, options: IngestOptions) -> str:
    sources = ", ".join(result.sources)
    if out.suffix == ".parquet":
        if profile is not None:
            raise InputError("--profile writes a Profile: give --out FILE.json")
        if result.replay is not None:
            result.replay.write(out)
            return f"wrote span replay {out} ({len(result.replay.requests)} requests)"
        if result.steps is None:
            raise InputError(f"{result.format} gives no StepTrace; --out takes a .json file for it")
        if result.missing:
            raise InputError(f"{sources}: no StepTrace written: {result.missing}")
        write_trace(out, result.steps, result.step_metadata)
        return f"wrote StepTrace {out}"
    if out.suffix != ".json":
        raise InputError(f"--out {out}: expected a .json or .parquet file")
    if profile is None:
        atomic.write_text(out, json_text(result.to_json()) + "\n")
        return f"wrote {out}"
    if result.acceptance is None:
        raise InputError(f"{sources}: no acceptance to merge into a Profile: {result.missing or 'none in the source'}")
    merged = merge_into_profile(Profile.load(profile), result, options, result.acceptance, commit=git_commit())
    merged.save(out)
    return f"wrote Profile {out} ({profile} + {result.format})"


def draft_lengths(text: str) -> tuple[int, ...]:
    """--k: "1-20" or "1,3,5" -> the draft lengths, each an integer >= 1."""
    try:
        found = []
        for part in text.split(","):
            low, _, high = part.partition("-")
            found += list(range(int(low), int(high or low) + 1))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected integers like 1-20 or 1,3,5") from None
    if not found or min(found) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected draft lengths >= 1, like 1-20 or 1,3,5")
    return tuple(sorted(set(found)))


def ngram_window(text: str) -> tuple[int, int] | None:
    """--ngram-window: "3:7" -> (3, 7); "none" -> None (no replay)."""
    if text.strip().lower() == "none":
        return None
    try:
        low, high = (int(v) for v in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected NMIN:NMAX like 3:7, or none") from None
    if not 1 <= low <= high:
        raise argparse.ArgumentTypeError(f"{text!r}: needs 1 <= NMIN <= NMAX")
    return low, high


def formats_epilog() -> str:
    lines = ["formats (each module's docstring in calibrate/ingest/ documents its fields and what it cannot "
             "provide):", ""]
    width = max(len(name) for name in FORMATS)
    for name, module in FORMATS.items():
        doc = importlib.import_module(f"calibrate.ingest.{module}").__doc__ or ""
        lines.append(f"  {name:<{width}} {doc.strip().splitlines()[0].split(': ', 1)[-1]}")
    return lines[0] + "\n\n" + "\n".join(lines[2:]) + "\n\nexit status: 0 on success, 2 on bad input (one line on stderr, nothing written)"


@cli_entry
def main(argv: list[str] | None = None) -> int:
    parser = CliParser(prog="python -m calibrate.ingest", description="\n\n".join(__doc__.split("\n\n")[1:3]),
                       epilog=formats_epilog)
    parser.add_argument("format", metavar="FORMAT", help=f"one of: {', '.join(FORMATS)}")
    parser.add_argument("files", metavar="FILE", nargs="+", type=Path,
                        help="input files (vllm-metrics: one scrape, or two: before and after)")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")
    parser.add_argument("--out", type=Path, help="FILE.parquet: the StepTrace; FILE.json: the result or a Profile "
                                                 "(default: print only)")
    parser.add_argument("--overwrite", action="store_true", help="replace --out when it exists (default: refuse)")
    parser.add_argument("--profile", type=Path, help="a base Profile: --out gets a copy with the ingested acceptance "
                                                     "(default: none)")
    parser.add_argument("--drafter", help="the drafter's name when the source does not state it (default: the source's)")
    parser.add_argument("--target", help="the target's name, over the source's (a served model name, say) "
                                         "(default: the source's)")
    parser.add_argument("--dataset", help="the dataset the measurements ran on (default: the source's, where it "
                                          "states one)")
    parser.add_argument("--temperature", type=float,
                        help="sampling temperature of the run; needed for a Profile entry or StepTrace when the file "
                             "does not record it (default: the file's; never assumed 0)")
    parser.add_argument("--gamma", type=int, help="draft length when the source does not state it (default: the "
                                                  "source's)")
    parser.add_argument("--method", default=methods.CHAIN,
                        help=f"StepTrace method of imported chain steps (default {methods.CHAIN})")
    parser.add_argument("--k", dest="draft_lengths", type=draft_lengths, metavar="LIST",
                        help="specdecode-bench: the draft lengths to replay, e.g. 1-20 or 1,3,5 (default: 1 to the "
                             "recorded proposer's k)")
    parser.add_argument("--ngram-window", dest="ngram_windows", action="append", type=ngram_window,
                        metavar="NMIN:NMAX", help="specdecode-bench: replay vLLM's n-gram proposer with "
                        "prompt_lookup_min:max against the recorded n-gram spans; repeat for several, 'none' for none "
                        "(default: 3:7, the window that reproduces the published files)")
    parser.add_argument("--accept-length", default="cumulative", choices=ACCEPT_LENGTH,
                        help="sglang-bench: bench_serving accept lengths are the server's running mean since its "
                             "start (cumulative, SGLang's default) or each run's own (per-run: --flush-cache)")
    args = parser.parse_args(argv)
    if args.gamma is not None and args.gamma < 1:
        raise InputError(f"--gamma must be >= 1, got {args.gamma}")
    if args.profile is not None and args.out is None:
        raise InputError("--profile needs --out FILE.json (the merged Profile)")
    if args.out is not None:      # refused when it is a folder or another run's file; a killed run leaves no temp
        claim_file(args.out, args.overwrite)
    windows = None if args.ngram_windows is None else tuple(w for w in args.ngram_windows if w is not None)
    options = IngestOptions(drafter=args.drafter, target=args.target, dataset=args.dataset,
                            temperature=args.temperature, gamma=args.gamma, method=args.method,
                            accept_length=args.accept_length, draft_lengths=args.draft_lengths,
                            ngram_windows=windows)
    result = ingest(args.format, args.files, options)
    message = write_out(result, args.out, args.profile, options) if args.out else None
    for line in result.warnings:
        print(f"warning: {line}", file=sys.stderr)
    if args.json:
        print(json_text(result.to_json()))
    else:
        print("\n".join(describe(result)))
    if message:
        print(message, file=sys.stderr if args.json else sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
