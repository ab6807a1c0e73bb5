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
step pooled over the prompts (all steps' tokens over all steps, as the entry's replay is), beside
alternatives built from the long answers of calibration prompts (`calibrate.answers`: the entry fitted
again on them, or given their shape against length), and the entry kept at the level its own replay
read, carried nowhere (`at_replay_length`).
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import pandas as pd

import methods
from calibrate.answers import entry_key, truncated
from common.errors import InputError
from methods.config import MethodConfig
from methods.spec import MethodSpec
from profiles.profile import Profile
from sweep import scoring
from traces.lookup_replay import replayed_steps


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
            label = methods.get(group["method"].iloc[0]).parse(text).label
            per_prompt = group.groupby("prompt_id")["accepted"].mean()
            rows.append({"config": label, "length": int(length), "replayed": float(group["accepted"].mean()),
                         "prompt_spread": float(per_prompt.std(ddof=1) / per_prompt.mean()) if len(per_prompt) > 1
                         else float("nan"), "prompts": int(len(per_prompt)),
                         "mean_output": float(np.mean([len(o) for o in cut.values()]))})
    return pd.DataFrame(rows)


def one_method(configs: Sequence[MethodConfig]) -> MethodSpec:
    """The one method `configs` are of, which must replay from greedy answers."""
    names = sorted({c.method for c in configs})
    if len(names) != 1:
        raise InputError(f"configurations of {len(names)} methods ({', '.join(names)}): judge one method at a time")
    spec = methods.get(names[0])
    if not spec.replays_from_outputs:
        raise InputError(f"{spec.name}'s steps do not follow from the target's answers alone: its acceptance "
                         "cannot be replayed by length")
    return spec


def predicted(profile: Profile, dataset: str, configs: Sequence[MethodConfig], length: int,
              ctx_len: float) -> np.ndarray:
    """Tokens per step the Profile's entry of `dataset` gives each configuration over `length` new
    tokens at context `ctx_len` (the closed form the sweep ranks with)."""
    spec = one_method(configs)
    setup = profile.setups_for(spec, temperature=0.0, dataset=dataset)[0]
    setting = scoring.Setting(temperature=0.0, ctx_len=int(round(ctx_len)), dataset=dataset, new_tokens=int(length))
    return scoring.score(setup, spec.name, spec.frame_of(list(configs)), setting)["tokens_per_step"].to_numpy(float)


def replay_length(profile: Profile, spec: MethodSpec, dataset: str) -> int:
    """The answer length `profile`'s entry of `dataset` was replayed at (the level it knows)."""
    part = profile.acceptance[entry_key(profile, spec, dataset)].part(spec.name)
    if part.replayed_new_tokens is None:
        raise InputError(f"profile '{profile.name}': its {spec.name} entry of '{dataset}' records no replay length")
    return int(part.replayed_new_tokens)


def judge(profiles: Mapping[str, Profile], dataset: str, prompts: Mapping[str, Sequence[int]],
          outputs: Mapping[str, Sequence[int]], configs: Sequence[MethodConfig],
          lengths: Sequence[int], at_replay_length: Mapping[str, Profile] | None = None) -> pd.DataFrame:
    """One row per (configuration, length): the replay on `outputs` beside each named Profile's
    prediction (`<name>` and `<name>_error` = predicted / replayed - 1) for answers of the replay's
    mean length at that cut (answers that met their end first are shorter), priced at the prompts'
    mean length plus half of it; each of `at_replay_length` priced once, at its entry's own replay
    length (`replay_length`), and that prediction kept at every length."""
    table = replayed(prompts, outputs, configs, lengths)
    prompt_len = float(np.mean([len(prompts[pid]) for pid in outputs]))
    answered = table.groupby("length")["mean_output"].first().round().astype(int).to_dict()   # EOS may end one first
    spec = one_method(configs)
    for name, profile in {**profiles, **(at_replay_length or {})}.items():
        at = answered if name in profiles else dict.fromkeys(answered, replay_length(profile, spec, dataset))
        guess = {length: dict(zip((c.label for c in configs),
                                  predicted(profile, dataset, configs, n, prompt_len + n / 2)))
                 for length, n in at.items()}
        table[name] = [guess[row.length][row.config] for row in table.itertuples()]
        table[f"{name}_error"] = table[name] / table["replayed"] - 1.0
    return table.assign(dataset=dataset)
