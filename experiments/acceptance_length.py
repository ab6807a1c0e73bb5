"""`python -m experiments.acceptance_length`: prompt lookup's acceptance over answers of 32 to 256
tokens, predicted from a Profile and replayed on the target's greedy outputs.

    python -m experiments.acceptance_length --profile data/profiles/smollm2-135m-cpu.json --target smollm2 \\
        --calibration libedit:1-8,codeedit:1-8 --prompts libedit:67-69,libedit:100-104,codeedit:... \\
        --out out/acceptance_length

Generates one greedy answer of the longest `--lengths` per prompt with plain decoding (outputs.parquet;
`--outputs` reuses those earlier runs hold), replays every configuration on each answer's first L tokens (exact: a
greedy prompt lookup step follows from the context alone) and compares the replayed tokens per step on
the held-out `--prompts` with four predictions: the Profile's own entry (fitted on the answers its
recording generated, carried to each length by its chain), the same entry kept at the level its replay
read (`flat`: no carry), the entry fitted again on the long answers of `--calibration` (prompts the Profile was
calibrated on), and the entry kept but carried to each length by the shape of those long answers'
replays (`--write-profile` writes that Profile). Writes acceptance.csv and report.md;
`fidelity.lengths` is the library.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

import methods
from calibrate.answers import LENGTHS, answers_by_prompt, collect_answers, read_answers, refit, with_length_shape
from calibrate.checks import check_target, dataset_of
from campaigns.measure import Bench
from common import atomic
from common.cli import CliParser, cli_entry, log, require_positive
from common.errors import InputError
from common.rundir import add_overwrite_option, start_run
from fidelity.lengths import judge, one_method
from fidelity.run import check_held_out
from profiles.profile import Profile
from runtime.prompts import load_prompt_mix
from sweep.markdown import md_table
from traces.timing import int_list

PREDICTIONS = ("bundled", "flat", "refit", "shaped")
CONFIGS = ("prompt_lookup g2 nmin2 nmax3", "prompt_lookup g3 nmin2 nmax3", "prompt_lookup g5 nmin2 nmax4",
           "prompt_lookup g7 nmin2 nmax6", "prompt_lookup g10 nmin3 nmax5", "prompt_lookup g1 nmin1 nmax5")


def build_parser() -> argparse.ArgumentParser:
    p = CliParser(prog="python -m experiments.acceptance_length", description=__doc__.splitlines()[0])
    p.add_argument("--profile", required=True, type=Path, help="the Profile whose prompt lookup entries are judged")
    p.add_argument("--target", required=True, help="target model spec the Profile describes (e.g. smollm2)")
    p.add_argument("--calibration", required=True,
                   help="prompts whose long answers fit the entry again and give its length shape (set:A-B,...); "
                        "those the Profile was not calibrated on are left out")
    p.add_argument("--prompts", required=True, help="held-out prompts judged (set:A-B,...)")
    p.add_argument("--lengths", default=",".join(map(str, LENGTHS)),
                   help="answer lengths judged, new tokens (default %(default)s); answers are generated at the longest")
    p.add_argument("--configs", default=",".join(CONFIGS),
                   help="prompt lookup configurations, comma-separated (default %(default)s)")
    p.add_argument("--outputs", type=Path, nargs="+", default=(),
                   help="outputs.parquet of earlier runs: the answers they hold at these lengths are read back, "
                        "the rest generated (default: generate them all)")
    p.add_argument("--write-profile", type=Path, default=None,
                   help="write the Profile with the length shapes fitted on --calibration here (atomically; "
                        "default: none)")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads (default %(default)s)")
    p.add_argument("--out", required=True, type=Path, help="output folder")
    add_overwrite_option(p)
    return p


def _configs(text: str):
    """The configurations `--configs` names and the one method they are of (`fidelity.lengths.one_method`)."""
    configs = [methods.parse_label(label) for label in (part.strip() for part in text.split(",")) if label]
    if not configs:
        raise InputError("--configs names no configuration")
    try:
        return configs, one_method(configs)
    except InputError as exc:
        raise InputError(f"--configs: {exc}") from None


def _report(table: pd.DataFrame, args, calibration: list[str], held: list[str]) -> str:
    names = PREDICTIONS
    summary = (table.assign(**{n: table[f"{n}_error"].abs() for n in names})
               .groupby(["dataset", "length"]).agg(prompts=("prompts", "first"), mean_output=("mean_output", "first"),
                                                   **{f"{n}_{s}": (n, f) for n in names
                                                      for s, f in (("median", "median"), ("worst", "max"))})
               .reset_index())
    lines = ["# Prompt lookup's acceptance against answer length (held-out prompts)", "",
             f"- Profile: `{args.profile}`; every configuration's tokens per step replayed on the target's greedy "
             "answers (exact under greedy decoding), pooled over the prompts, against four predictions:",
             "  `bundled` (the Profile's entry as it is, carried to each length by its chain), `flat` (the same "
             "entry priced at the length its replay ran, kept at every length), `refit` (the entry fitted again on the "
             "long answers "
             f"of calibration prompts {', '.join(calibration)} alone) and `shaped` (the entry kept, carried to other "
             "lengths by how each configuration's replay on those long answers moves with length)",
             f"- Held-out prompts (validation): {', '.join(held)}",
             f"- Configurations: {args.configs}", "",
             "## Median and worst |error| of tokens per step, by dataset and answer length", "",
             md_table(summary, list(summary.columns), ".3f"), "",
             "## Every configuration", "", md_table(table, list(table.columns), ".3f"), "",
             "error = predicted / replayed - 1; prompt_spread = the relative standard deviation over prompts of a "
             "prompt's tokens per step; mean_output = the answers' mean length at that cut (an answer that ended "
             "first counts as long as it is)."]
    return "\n".join(lines) + "\n"


@cli_entry
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    require_positive(args, ("threads",))
    lengths = sorted(set(int_list(args.lengths, "lengths", 2)))
    configs, spec = _configs(args.configs)
    profile = Profile.load(args.profile)
    held, calibration = load_prompt_mix(args.prompts), load_prompt_mix(args.calibration)
    check_held_out(profile, [p.prompt_id for p in held])
    calibrated = set(profile.provenance.calibration_prompts)
    outside = [p.prompt_id for p in calibration if p.prompt_id not in calibrated]
    if outside:          # a set's calibration prompts need not be contiguous: the others are left out, said so
        log(f"note: {len(outside)} prompt(s) of --calibration ({', '.join(outside[:3])}{', ...' if len(outside) > 3 else ''}) "
            f"are not among those '{profile.name}' was calibrated on: left out")
        calibration = [p for p in calibration if p.prompt_id in calibrated]
    datasets = {p.dataset: dataset_of(profile, p.dataset) for p in held + calibration}
    start_run(args.out, "experiments.acceptance_length", argv, args.overwrite)
    args.out.mkdir(parents=True, exist_ok=True)
    bench = Bench(args.target, {}, Path("artifacts/drafters"), args.threads)
    check_target(profile, bench.target.model)
    encoded = bench.encode(calibration + held)
    held_answers = read_answers(args.outputs, max(lengths), option="--outputs")
    answers = collect_answers(bench.target.model, bench.eos, encoded, max(lengths), held_answers)
    atomic.write_parquet(args.out / "outputs.parquet", answers)
    outputs = answers_by_prompt(answers)
    prompts = {pid: ids for _, pid, ids in encoded}
    tables, shaped = [], profile
    for prompt_set in sorted({p.dataset for p in held}):
        dataset = datasets[prompt_set]
        own = lambda chosen: {p.prompt_id: outputs[p.prompt_id] for p in chosen if p.dataset == prompt_set}  # noqa: E731
        fit_on = own(calibration)
        if len(fit_on) < 2:
            raise InputError(f"--calibration has {len(fit_on)} prompt(s) of {prompt_set}: fitting needs two or more")
        refitted = refit(profile, spec, dataset, prompts, fit_on, configs,
                         f"greedy answers of {len(fit_on)} calibration prompts, {max(lengths)} new tokens at most")
        shaped = with_length_shape(shaped, spec, dataset, prompts, fit_on, lengths)
        tables.append(judge({"bundled": profile, "refit": refitted, "shaped": shaped}, dataset, prompts, own(held),
                            configs, lengths, at_replay_length={"flat": profile}))
        log(f"{dataset}: judged {len(configs)} configurations at {len(lengths)} lengths on {len(own(held))} prompts")
    table = pd.concat(tables, ignore_index=True)
    atomic.write_csv(args.out / "acceptance.csv", table)
    if args.write_profile:
        shaped.save(args.write_profile)
        log(f"wrote {args.write_profile}: the Profile with each judged dataset's length shape")
    atomic.write_text(args.out / "report.md", _report(table, args, [p.prompt_id for p in calibration],
                                                      [p.prompt_id for p in held]))
    for length, rows in table.groupby("length"):
        log(f"{length} tokens: |error| median / worst " + "; ".join(
            f"{n} {100 * rows[f'{n}_error'].abs().median():.1f}% / {100 * rows[f'{n}_error'].abs().max():.1f}%"
            for n in PREDICTIONS))
    log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
