"""Prompt lookup's greedy steps replayed from a prompt and the target's greedy output.

Under greedy decoding prompt lookup commits the target's own tokens, and what a step proposes depends
on the committed context alone: the step that starts after output position i proposes
`runtime.engine.prompt_lookup.match_continuation(prompt + output[:i])`, keeps its leading tokens
that equal output[i:], and the verification forward adds the target's next token. So every
configuration's steps follow from one plain-decoding output per prompt (a TokenTrace's tokens),
without running the model: as many calibration prompts as TokenTraces record, where a timed
StepTrace affords two or three. (It assumes the verification forward's argmax is decoding's, as the
engine's greedy-identity tests check.)

`lookup_steps` lists one generation's steps; `replayed_steps` gives StepTrace rows (the columns
`methods.prompt_lookup`'s fit reads) for many prompts and configurations.
"""
from __future__ import annotations

import functools
import json
from typing import Mapping, Sequence

import pandas as pd

from common.errors import InputError
from methods.config import MethodConfig
from runtime.engine.prompt_lookup import earliest_match, match_continuation


def lookup_steps(prompt: Sequence[int], output: Sequence[int], config: MethodConfig,
                 matches: dict[tuple[int, int], int | None] | None = None) -> list[tuple[int, int]]:
    """(verify tokens, accepted tokens) of each step that decodes `output` after `prompt`.
    `matches`: a cache of `earliest_match` by (context length, n), shared by every configuration
    replayed on this prompt and output (the context at a given length is the same for all)."""
    if not prompt:
        raise InputError("prompt lookup replay needs a non-empty prompt")
    full, steps, i = list(prompt) + list(output), [], 0
    matches = {} if matches is None else matches

    def match_at(size: int, n: int) -> int | None:         # the context is full[:size] for every config
        if (size, n) not in matches:
            matches[size, n] = earliest_match(full[:size], n)
        return matches[size, n]

    while i < len(output):
        size = len(prompt) + i
        drafts = match_continuation(full[:size], config.n_min, config.n_max, config.gamma,
                                    functools.partial(match_at, size))
        hits = 0
        while hits < len(drafts) and i + hits < len(output) and drafts[hits] == output[i + hits]:
            hits += 1
        accepted = min(hits + 1, len(output) - i)        # the bonus token, unless the output ends first
        steps.append((1 + len(drafts), accepted))
        i += accepted
    return steps


def replayed_steps(prompts: Mapping[str, Sequence[int]], outputs: Mapping[str, Sequence[int]],
                   configs: Sequence[MethodConfig], drop_first_step: bool = False) -> pd.DataFrame:
    """StepTrace rows (run_id, method, config, prompt_id, step, ctx_len, draft_forwards,
    verify_tokens, accepted) of every configuration replayed on every prompt's output;
    `drop_first_step`: each generation's first step left out, tokens and all, as an engine that
    runs it with the prompt's prefill reports (transformers' generate)."""
    missing = sorted(set(outputs) - set(prompts))
    if missing:
        raise InputError(f"no prompt tokens for the outputs of {', '.join(missing)}")
    rows, matches = [], {pid: {} for pid in outputs}
    for config in configs:
        text = json.dumps(config.to_dict(), sort_keys=True)
        for pid, output in outputs.items():
            ctx = len(prompts[pid])
            for step, (verify, accepted) in enumerate(lookup_steps(prompts[pid], list(output), config, matches[pid])):
                if step >= drop_first_step:
                    rows.append({"run_id": f"{config.label}#replay", "method": config.method, "config": text,
                                 "prompt_id": pid, "step": step - drop_first_step, "ctx_len": ctx, "draft_forwards": 0,
                                 "verify_tokens": verify, "accepted": accepted})
                ctx += accepted
    return pd.DataFrame(rows)
