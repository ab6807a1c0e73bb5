"""`python -m calibrate.answers --profile P --target smollm2 --prompts libedit:140-171 --out P2`: the
acceptance of the methods whose greedy steps follow from the target's answer alone, fitted again on a
workload's own prompts at the length it asks, with no clock.

Acceptance moves with the prompts (one library's class methods copy less of their input than its
functions) and with the answer's length (copying grows and fades within an answer); latency does not.
A replaying method's greedy steps follow from the prompt and one greedy answer of the target
(`traces.lookup_replay`), so plain decoding's answer to each prompt, generated once at the longest
length asked, gives every configuration's exact steps at every shorter length. For each Profile
dataset the prompts fall in, every such method (`MethodSpec.replays_from_outputs`):
- has its entry fitted again on the answers (`refit`: its calibration configurations and its sweep
  space replayed on the whole answers, `fit_replayed`), and
- is told how each configuration's replay moves with the answer's length (`with_length_shape`: the
  answers' first L tokens replayed at each L of LENGTHS up to the longest), which carries the replay to
  the length `--sim-tokens` prices.
A prompt set that is none of the Profile's datasets (a workload of one's own: a JSONL file, or a built-in
set it was never recorded on) becomes a dataset of its own, with each replaying method's entry fitted
from its answers alone (`entry_key_for`) and a workload of its own (`with_workload`: the answers' lengths
and how far one prompt's seconds per token stray, priced on the new entries, which the prediction intervals
and the prompts a comparison needs read); the methods that need a recording (lookahead, the drafters) have no
entry of it, and the log says so.
The prompts join the Profile's calibration prompts (held-out runs refuse them); latency, the engine's
terms and every other entry are kept. Answers are read from `--answers` files where they hold them
(`outputs.parquet` of `experiments.acceptance_length`, or this command's own `--save-answers`) and
generated for the rest.
"""
from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
import torch

import methods
from calibrate.checks import check_target
from calibrate.spread import prompt_spreads
from costmodel.uncertainty import Z90, prompt_sd
from common import atomic
from common.cli import CliParser, cli_entry, log, require_positive
from common.errors import InputError
from common.rundir import claim_file
from methods import BASELINE
from methods.config import MethodConfig
from methods.match_chain import replay_table
from methods.spec import MethodSpec
from profiles.acceptance import AcceptanceModel
from profiles.parts import Workload
from profiles.profile import Profile
from profiles.record import Record
from runtime.engine import make_decoder
from runtime.models import load_model
from runtime.prompts import encode_prompt, load_prompt_mix
from traces.lookup_replay import replayed_steps

LENGTHS = (32, 64, 128, 256)      # the answer lengths a length shape replays (those up to the answers')
ANSWER_COLUMNS = ("prompt_set", "prompt_id", "pos", "token", "max_new_tokens")
REFITS = "answers_refits"         # provenance: what each run of this command fitted again, oldest first


# ---- answers -----------------------------------------------------------------------------------------------
def read_answers(paths: Sequence[Path], new_tokens: int, option: str = "--answers") -> pd.DataFrame:
    """The answers of earlier runs (ANSWER_COLUMNS, one row per token), those generated at `new_tokens`
    or more (a shorter run's answer may have been cut where a longer one goes on), one per prompt."""
    frames = []
    for path in paths:
        if not Path(path).is_file():
            raise InputError(f"{option} {path} is not a file")
        frame = pd.read_parquet(path)
        missing = [c for c in ANSWER_COLUMNS if c not in frame.columns]
        if missing:
            raise InputError(f"{option} {path} lacks column '{missing[0]}' (an outputs.parquet of "
                             "experiments.acceptance_length or calibrate.answers --save-answers)")
        frames.append(frame[list(ANSWER_COLUMNS)])
    if not frames:
        return pd.DataFrame(columns=list(ANSWER_COLUMNS))
    frame = pd.concat(frames, ignore_index=True)
    return frame[frame["max_new_tokens"] >= new_tokens].drop_duplicates(["prompt_id", "pos"])


def greedy_answers(model, eos: int | None, encoded: Sequence[tuple[str, str, list[int]]],
                   new_tokens: int) -> pd.DataFrame:
    """Plain decoding's greedy answer of up to `new_tokens` tokens to each (prompt set, prompt id,
    token ids), as ANSWER_COLUMNS rows."""
    decoder = make_decoder(BASELINE, model, None, seed=0, **methods.get(BASELINE).config().to_dict())
    rows = []
    for i, (prompt_set, pid, ids) in enumerate(encoded):
        tokens = decoder.generate(ids, new_tokens, eos).tokens
        rows += [{"prompt_set": prompt_set, "prompt_id": pid, "pos": pos, "token": int(t), "max_new_tokens": new_tokens}
                 for pos, t in enumerate(tokens)]
        log(f"answer {i + 1}/{len(encoded)}: {pid}, {len(tokens)} tokens")
    return pd.DataFrame(rows, columns=list(ANSWER_COLUMNS))


def collect_answers(model, eos: int | None, encoded: Sequence[tuple[str, str, list[int]]], new_tokens: int,
                    held: pd.DataFrame) -> pd.DataFrame:
    """Every prompt's answer (ANSWER_COLUMNS): taken from `held` (`read_answers`) where it holds one,
    generated for the rest."""
    wanted = [pid for _, pid, _ in encoded]
    kept = held[held["prompt_id"].isin(wanted)]
    have = set(kept["prompt_id"])
    todo = [e for e in encoded if e[1] not in have]
    log(f"{len(encoded) - len(todo)} answer(s) read back, {len(todo)} to generate at {new_tokens} tokens")
    return pd.concat([kept, greedy_answers(model, eos, todo, new_tokens)], ignore_index=True)


def answers_by_prompt(frame: pd.DataFrame) -> dict[str, list[int]]:
    """prompt id -> its answer's tokens in order."""
    return {pid: rows.sort_values("pos")["token"].tolist() for pid, rows in frame.groupby("prompt_id", sort=False)}


def truncated(outputs: Mapping[str, Sequence[int]], length: int) -> dict[str, list[int]]:
    """Each output's first `length` tokens: what a run of `length` new tokens commits."""
    return {pid: list(tokens[:length]) for pid, tokens in outputs.items()}


# ---- entries -----------------------------------------------------------------------------------------------
def entry_key(profile: Profile, spec: MethodSpec, dataset: str) -> str:
    """The key of `profile`'s greedy entry of `dataset` holding `spec`'s part (InputError where none)."""
    keys = profile.acceptance_for(None, temperature=0.0, dataset=dataset, needs=spec.name)
    if not keys:
        raise InputError(f"profile '{profile.name}' has no greedy {spec.name} entry of '{dataset}'")
    return keys[0]


def entry_key_for(profile: Profile, spec: MethodSpec, dataset: str) -> str:
    """The key `refit` writes: the greedy entry of `dataset` holding `spec`'s part (`entry_key`), or,
    for a dataset the Profile has none of, a new entry '<method>/<dataset>' as the recorded ones are named."""
    return entry_key(profile, spec, dataset) if dataset in profile.datasets() else f"{spec.name}/{dataset}"


def refit(profile: Profile, spec: MethodSpec, dataset: str, prompts: Mapping[str, Sequence[int]],
          outputs: Mapping[str, Sequence[int]], configs: Sequence[MethodConfig], source: str) -> Profile:
    """`profile` with `spec`'s entry of `dataset` fitted again on `outputs` (its calibration
    configurations and `configs` replayed on them, `spec.fit_replayed`), a new entry where the
    Profile has no such dataset."""
    key = entry_key_for(profile, spec, dataset)
    labels = {c.label for c in configs}
    every = [*configs, *(c for c in spec.calibration_configs() if c.label not in labels)]
    entry = spec.fit_replayed(replayed_steps(prompts, outputs, every), dataset=dataset, temperature=0.0,
                              source=source)
    return replace(profile, acceptance={**profile.acceptance, key: AcceptanceModel.from_dict(entry, name=key)})


def with_length_shape(profile: Profile, spec: MethodSpec, dataset: str, prompts: Mapping[str, Sequence[int]],
                      outputs: Mapping[str, Sequence[int]], lengths: Sequence[int],
                      asked: int | None = None) -> Profile:
    """`profile` with `spec`'s entry of `dataset` told how each configuration's replay moves with the
    answer's length (`length_shape`, `methods.match_chain.length_factors`): every configuration its
    replay holds, replayed again on the first L tokens of `outputs` at each of `lengths`. The entry's
    own replay (its level, on its own prompts) is kept; only its carry to other lengths changes.
    `asked`: the entry's replay is of answers asked for that many tokens (some ended first), and
    stands for runs asked as many, as the lengths of the shape do (else: the replay's mean length)."""
    key = entry_key(profile, spec, dataset)
    entry = profile.acceptance[key]
    part = entry.part(spec.name)
    if not part.replayed:
        raise InputError(f"profile '{profile.name}' has no replayed {spec.name} entry '{key}' to give a length shape")
    configs = [methods.parse_label(label) for label in part.replayed]
    shape = {}
    for length in lengths:
        steps = replayed_steps(prompts, truncated(outputs, length), configs)
        labels = steps["config"].map({text: spec.parse(text).label for text in steps["config"].unique()})
        table = replay_table(steps.assign(config=labels, drafted=steps["verify_tokens"] - 1))
        shape[int(length)] = {label: (float(tokens), float(share)) for label, (tokens, share) in table.items()}
    shaped_part = replace(part, length_shape=shape, length_prompts=len(outputs),
                          replayed_new_tokens=part.replayed_new_tokens if asked is None else int(asked))
    shaped = replace(entry, own=Record({**entry.own, spec.name: shaped_part}))
    return replace(profile, acceptance={**profile.acceptance, key: shaped})


def fitted_on_answers(profile: Profile, dataset: str, prompts: Mapping[str, Sequence[int]],
                      outputs: Mapping[str, Sequence[int]], new_tokens: int) -> Profile:
    """`profile` with every replaying method's entry of `dataset` fitted again on `outputs` (answers
    asked for `new_tokens`) and given their length shape (module docstring): priced at a length the
    shape holds, it gives the answers' own replay cut there."""
    lengths = [n for n in LENGTHS if n < new_tokens] + [new_tokens]
    source = f"greedy answers of {len(outputs)} prompts, {new_tokens} new tokens at most (python -m calibrate.answers)"
    for spec in methods.replaying_specs():
        profile = refit(profile, spec, dataset, prompts, outputs, spec.configs_of(spec.space(None)), source)
        profile = with_length_shape(profile, spec, dataset, prompts, outputs, lengths, asked=new_tokens)
    return with_workload(profile, dataset, prompts, outputs, source)      # its steps priced on the new entries


def prompt_strays(profile: Profile, dataset: str, prompts: Mapping[str, Sequence[int]],
                  outputs: Mapping[str, Sequence[int]]) -> tuple[dict[str, Any], dict[str, float]]:
    """How far one prompt's answers stray from the others': every replaying method's calibration
    configurations replayed on `outputs` and priced by `profile`'s step model, their
    `calibrate.spread.prompt_spreads` (what a workload records) and, per method, one prompt's relative
    standard deviation of seconds per token (`costmodel.uncertainty.prompt_sd`, the widest configuration)."""
    configs = [c for spec in methods.replaying_specs() for c in spec.calibration_configs()]
    steps = replayed_steps(prompts, outputs, configs)
    spreads = prompt_spreads(profile, steps, dataset)
    runs = steps.groupby("run_id")
    tokens, method = runs["accepted"].sum() / runs.size(), runs["method"].first()
    sd = {name: float(np.max(prompt_sd(tokens[method == name].to_numpy(), spread)))
          for name, spread in spreads.get("prompt_spread", {}).items()}
    return spreads, sd


def sampling_error(profile: Profile, dataset: str, prompts: Mapping[str, Sequence[int]],
                   outputs: Mapping[str, Sequence[int]], within: float = 0.03) -> str:
    """How well the answers know their workload's mean speed, in words: one prompt's relative standard
    deviation of seconds per token (`prompt_strays`), the 90% half-width of the mean of these prompts,
    and the prompts a mean within `within` needs: a workload whose prompts differ a lot is known to a
    few percent only from hundreds of them."""
    words = [f"{name}: one prompt's seconds per token strays by {sd:.0%} (sd); the mean of these {len(outputs)} is "
             f"known to +-{Z90 * sd / np.sqrt(len(outputs)):.0%} (90%), to +-{within:.0%} it needs about "
             f"{max(1, int(np.ceil((Z90 * sd / within) ** 2))):,} prompt(s)"
             for name, sd in prompt_strays(profile, dataset, prompts, outputs)[1].items()]
    return f"{dataset}: " + ("; ".join(words) if words else "too few prompts to tell how far one strays")


def with_workload(profile: Profile, dataset: str, prompts: Mapping[str, Sequence[int]],
                  outputs: Mapping[str, Sequence[int]], source: str) -> Profile:
    """`profile` with a workload of `dataset` where it has none (a dataset new to it): the answers' mean
    prompt and answer tokens, and each replaying method's prompt spread over them (`prompt_strays`), so
    that intervals and the prompts a comparison needs carry the new workload's own spread and how few
    prompts measured it. A recorded dataset keeps the workload of its recording."""
    if dataset in profile.workload:
        return profile
    spread = prompt_strays(profile, dataset, prompts, outputs)[0]
    workload = Workload(prompt_tokens=round(sum(len(prompts[p]) for p in outputs) / len(outputs), 2),
                        new_tokens=round(sum(len(o) for o in outputs.values()) / len(outputs), 2), source=source,
                        prompt_spread=Record(spread.get("prompt_spread", {})),
                        spread_prompts=spread.get("spread_prompts"))
    return replace(profile, workload=Record({**profile.workload, dataset: workload}))


# ---- the command -------------------------------------------------------------------------------------------
def build_parser() -> CliParser:
    p = CliParser(prog="python -m calibrate.answers", description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", required=True, type=Path, help="the Profile whose acceptance is fitted again")
    p.add_argument("--target", required=True, help="target model spec the Profile describes (e.g. smollm2)")
    p.add_argument("--prompts", required=True,
                   help="the workload's prompts (set:A-B,...; two or more per Profile dataset)")
    p.add_argument("--max-new-tokens", type=int, default=256,
                   help="the answers' length, the longest the entries replay (default %(default)s)")
    p.add_argument("--answers", type=Path, nargs="+", default=(),
                   help="answers of earlier runs to reuse (outputs.parquet of experiments.acceptance_length, or "
                        "--save-answers of this command); the prompts they lack are answered here")
    p.add_argument("--save-answers", type=Path, default=None,
                   help="write every answer used here (parquet, atomically; default: none)")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads (default %(default)s)")
    p.add_argument("--out", required=True, type=Path, help="where the new Profile is written (atomically)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    return p


@cli_entry
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    require_positive(args, ("threads", "max_new_tokens"))
    if args.out.resolve() == args.profile.resolve():
        raise InputError(f"--out {args.out} is the source Profile: write the new one beside it")
    profile = Profile.load(args.profile)
    chosen = load_prompt_mix(args.prompts)
    datasets = {}
    for prompt in chosen:       # the Profile's name of the set ('libedit' -> 'lib-edit'), else a dataset of its own
        datasets.setdefault(profile.dataset_named(prompt.dataset) or prompt.dataset, []).append(prompt.prompt_id)
    few = [d for d, ids in datasets.items() if len(ids) < 2]
    if few:
        raise InputError(f"--prompts has one prompt of dataset '{few[0]}': fitting needs two or more")
    new = [d for d in datasets if d not in profile.datasets()]
    for spec in methods.replaying_specs():            # every dataset has an entry to fit again, before any answer
        for dataset in datasets:
            entry_key_for(profile, spec, dataset)
    claim_file(args.out, args.overwrite)
    held = read_answers(args.answers, args.max_new_tokens)    # a bad file is named before the target loads
    torch.set_num_threads(args.threads)
    target = load_model(args.target)
    check_target(profile, target.model)
    encoded = [(p.dataset, p.prompt_id, list(encode_prompt(p, target.tokenizer))) for p in chosen]
    eos = getattr(target.tokenizer, "eos_token_id", None)
    frame = collect_answers(target.model, eos, encoded, args.max_new_tokens, held)
    outputs = {pid: tokens[:args.max_new_tokens] for pid, tokens in answers_by_prompt(frame).items()}
    if args.save_answers:
        atomic.write_parquet(args.save_answers, frame)
    prompts = {pid: ids for _, pid, ids in encoded}
    fitted = profile
    for dataset, ids in datasets.items():
        fitted = fitted_on_answers(fitted, dataset, prompts, {pid: outputs[pid] for pid in ids}, args.max_new_tokens)
        log(sampling_error(fitted, dataset, prompts, {pid: outputs[pid] for pid in ids}))
        replaying = ", ".join(s.name for s in methods.replaying_specs())
        log(f"{dataset}: {replaying} fitted on {len(ids)} answers (a dataset new to the Profile: the other methods "
            "have no entry of it until it is recorded)" if dataset in new
            else f"{dataset}: {replaying} fitted again on {len(ids)} answers")
    used = [p.prompt_id for p in chosen]
    calibrated = tuple(dict.fromkeys([*profile.provenance.calibration_prompts, *used]))
    refitted = {"prompts": used, "new_tokens": args.max_new_tokens,
                "methods": [s.name for s in methods.replaying_specs()],
                "datasets": sorted(datasets), "source": str(args.profile)}
    earlier = list(profile.provenance.details.get(REFITS, ()))
    details = Record({**profile.provenance.details, REFITS: [*earlier, refitted]})
    fitted = replace(fitted, provenance=replace(profile.provenance, calibration_prompts=calibrated, details=details))
    fitted.save(args.out)
    added = len(calibrated) - len(profile.provenance.calibration_prompts)
    log(f"wrote {args.out}: {added} prompt(s) added to its calibration prompts ({len(used) - added} already there)")
    for dataset in new:         # the sweep prices the Profile's first dataset unless told
        log(f"price {dataset}: python -m experiments.sweep --profile {args.out} --dataset {dataset}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
