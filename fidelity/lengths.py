"""Acceptance at the length a user asks: prompt lookup's tokens per step over answers of 32 to 256
tokens, predicted from a Profile and replayed on greedy outputs.

Prompt lookup's greedy steps follow from the prompt and the target's greedy output alone
(`traces.lookup_replay`): one plain-decoding output per prompt, of the longest length asked, gives
every configuration's steps at every shorter length exactly, the first L tokens of the output being
what a run of L new tokens commits. No timing is involved, so the acceptance error at each length is
measured apart from the step model's.

`judge` prices each configuration at each length from a Profile's entry of the prompts' dataset (the
bundled one replays 32-token outputs and is carried to other lengths by its chain,
`methods.match_chain.replayed_at`) and compares it with the replay on held-out prompts: tokens per
step pooled over the prompts (all steps' tokens over all steps, as the entry's replay is). Two
alternatives built from the long answers of calibration prompts are judged beside it: `refit` fits the
entry again on them alone; `with_length_shape` keeps the entry and gives it the shape of each
configuration's replay against length (`length_shape`), which carries the entry's replay instead of
the chain.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

import methods
from common.errors import InputError
from methods.config import MethodConfig
from methods.match_chain import replay_table
from profiles.acceptance import AcceptanceModel
from profiles.profile import Profile
from profiles.record import Record
from sweep import scoring
from traces.lookup_replay import replayed_steps

METHOD = "prompt_lookup"
LENGTHS = (32, 64, 128, 256)


def truncated(outputs: Mapping[str, Sequence[int]], length: int) -> dict[str, list[int]]:
    """Each output's first `length` tokens: what a run of `length` new tokens commits."""
    return {pid: list(tokens[:length]) for pid, tokens in outputs.items()}


def replayed(prompts: Mapping[str, Sequence[int]], outputs: Mapping[str, Sequence[int]],
             configs: Sequence[MethodConfig], lengths: Sequence[int]) -> pd.DataFrame:
    """Per (configuration, length): replayed tokens per step pooled over the prompts, the prompts'
    spread of it (relative standard deviation), and the mean output length (an output that ended
    before `length` counts as long as it is)."""
    rows = []
    for length in lengths:
        cut = truncated(outputs, length)
        steps = replayed_steps(prompts, cut, configs)
        for text, group in steps.groupby("config", sort=False):
            label = methods.get(METHOD).parse(text).label
            per_prompt = group.groupby("prompt_id")["accepted"].mean()
            rows.append({"config": label, "length": int(length), "replayed": float(group["accepted"].mean()),
                         "prompt_spread": float(per_prompt.std(ddof=1) / per_prompt.mean()) if len(per_prompt) > 1
                         else float("nan"), "prompts": int(len(per_prompt)),
                         "mean_output": float(np.mean([len(o) for o in cut.values()]))})
    return pd.DataFrame(rows)


def predicted(profile: Profile, dataset: str, configs: Sequence[MethodConfig], length: int,
              ctx_len: float) -> np.ndarray:
    """Tokens per step the Profile's entry of `dataset` gives each configuration over `length` new
    tokens at context `ctx_len` (the closed form the sweep ranks with)."""
    spec = methods.get(METHOD)
    setup = profile.setups_for(spec, temperature=0.0, dataset=dataset)[0]
    setting = scoring.Setting(temperature=0.0, ctx_len=int(round(ctx_len)), dataset=dataset, new_tokens=int(length))
    return scoring.score(setup, METHOD, spec.frame_of(list(configs)), setting)["tokens_per_step"].to_numpy(float)


def refit(profile: Profile, dataset: str, prompts: Mapping[str, Sequence[int]],
          outputs: Mapping[str, Sequence[int]], configs: Sequence[MethodConfig], source: str) -> Profile:
    """`profile` with its prompt lookup entry of `dataset` fitted again on `outputs` (the calibration
    configurations and `configs` replayed on them, `methods.prompt_lookup.fit_replayed`)."""
    spec = methods.get(METHOD)
    key = entry_key(profile, dataset)
    labels = {c.label for c in configs}
    every = [*configs, *(c for c in spec.calibration_configs() if c.label not in labels)]
    entry = spec.fit_replayed(replayed_steps(prompts, outputs, every), dataset=dataset, temperature=0.0,
                              source=source)
    return replace(profile, acceptance={**profile.acceptance, key: AcceptanceModel.from_dict(entry, name=key)})


def with_length_shape(profile: Profile, dataset: str, prompts: Mapping[str, Sequence[int]],
                      outputs: Mapping[str, Sequence[int]], lengths: Sequence[int]) -> Profile:
    """`profile` with its prompt lookup entry of `dataset` told how each configuration's replay moves
    with the answer's length (`length_shape`, `methods.match_chain.length_factors`): every configuration
    its replay holds, replayed again on the first L tokens of `outputs` at each of `lengths`. The
    entry's own replay (its level, on its own prompts) is kept; only its carry to other lengths changes."""
    key = entry_key(profile, dataset)
    entry = profile.acceptance[key]
    part = entry.part(METHOD)
    if not part.replayed:
        raise InputError(f"profile '{profile.name}' has no replayed {METHOD} entry '{key}' to give a length shape")
    spec = methods.get(METHOD)
    configs = [methods.parse_label(label) for label in part.replayed]
    shape = {}
    for length in lengths:
        steps = replayed_steps(prompts, truncated(outputs, length), configs)
        labels = steps["config"].map({text: spec.parse(text).label for text in steps["config"].unique()})
        table = replay_table(steps.assign(config=labels, drafted=steps["verify_tokens"] - 1))
        shape[int(length)] = {label: (float(tokens), float(share)) for label, (tokens, share) in table.items()}
    shaped = replace(entry, own=Record({**entry.own, METHOD: replace(part, length_shape=shape,
                                                                     length_prompts=len(outputs))}))
    return replace(profile, acceptance={**profile.acceptance, key: shaped})


def entry_key(profile: Profile, dataset: str) -> str:
    """The key of `profile`'s greedy prompt lookup entry of `dataset` (InputError where it has none)."""
    keys = profile.acceptance_for(None, temperature=0.0, dataset=dataset, needs=METHOD)
    if not keys:
        raise InputError(f"profile '{profile.name}' has no greedy {METHOD} entry of '{dataset}'")
    return keys[0]


def judge(profiles: Mapping[str, Profile], dataset: str, prompts: Mapping[str, Sequence[int]],
          outputs: Mapping[str, Sequence[int]], configs: Sequence[MethodConfig],
          lengths: Sequence[int]) -> pd.DataFrame:
    """One row per (configuration, length): the replay on `outputs` beside each named Profile's
    prediction (`<name>` and `<name>_error` = predicted / replayed - 1) for answers of the replay's
    mean length at that cut (answers that met their end first are shorter), priced at the prompts'
    mean length plus half of it."""
    table = replayed(prompts, outputs, configs, lengths)
    prompt_len = float(np.mean([len(prompts[pid]) for pid in outputs]))
    answered = table.groupby("length")["mean_output"].first().round().astype(int).to_dict()   # EOS may end one first
    for name, profile in profiles.items():
        guess = {length: dict(zip((c.label for c in configs),
                                  predicted(profile, dataset, configs, n, prompt_len + n / 2)))
                 for length, n in answered.items()}
        table[name] = [guess[row.length][row.config] for row in table.itertuples()]
        table[f"{name}_error"] = table[name] / table["replayed"] - 1.0
    return table.assign(dataset=dataset)
