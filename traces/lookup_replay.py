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
`methods.prompt_lookup`'s fit reads) for many prompts and configurations; `lookup_spans` gives the
span of a step starting at every output position (vLLM's n-gram proposer replayed over a recorded
generation, `calibrate.ingest.specdecode_bench` checks it against the spans a benchmark recorded).

vLLM's rule, read in vLLM 0.10.1 (the PyPI wheel, commit aab549870): `vllm/v1/spec_decode/
ngram_proposer.py`, `_find_longest_matched_ngram_and_propose_tokens` (a KMP scan of the reversed
context) takes the longest n <= prompt_lookup_max whose last n context tokens occurred earlier, at
the earliest start (its `prev_lps >= longest_ngram` keeps the latest position of the reversed
context); an occurrence may overlap the suffix but must be followed by a token; no proposal when
n < prompt_lookup_min or the context is shorter than prompt_lookup_min; it proposes up to
num_speculative_tokens tokens that followed the occurrence, fewer where the context ends first,
and none past max_model_len. `vllm/v1/worker/gpu_model_runner.py`,
`propose_ngram_draft_token_ids`, runs it after every step that sampled a token, the prefill
included, on the request's whole context (prompt and every token generated so far); so the first
proposal follows the prefill's token and output position 0 is never speculated. `vllm/config/
__init__.py`, `SpeculativeConfig.__post_init__`: prompt_lookup_min and _max default to 5 and 5 when
neither is given, and each to the other when one is. `runtime.engine.prompt_lookup.match_continuation`
is that rule.
"""
from __future__ import annotations

import functools
import json
from typing import Mapping, Sequence

import numpy as np
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


class NgramIndex:
    """The earliest start of every n-gram (n_min <= n <= n_max) of `tokens[:size - 1]` as `size`
    grows: `earliest_match(tokens[:size], n)` in O(1) per n (the n-grams that end before the last
    context token are exactly the earlier occurrences the rule may take)."""

    def __init__(self, tokens: np.ndarray, n_min: int, n_max: int):
        self.tokens, self.n_min, self.n_max = tokens, n_min, n_max
        self.first: dict[int, dict[bytes, int]] = {n: {} for n in range(n_min, n_max + 1)}
        self.size = 0
        self._indexed_to = 0                       # n-grams ending before this index are in `first`

    def grow_to(self, size: int) -> None:
        self.size = size
        while self._indexed_to < size - 1:
            end = self._indexed_to + 1
            for n, first in self.first.items():
                if end >= n:
                    first.setdefault(self.tokens[end - n:end].tobytes(), end - n)
            self._indexed_to = end

    def earliest(self, n: int) -> int | None:
        """Where the earliest earlier occurrence of the last n tokens of tokens[:size] starts; None: none."""
        if not self.n_min <= n <= self.n_max or n >= self.size:
            return None
        return self.first[n].get(self.tokens[self.size - n:self.size].tobytes())


def lookup_spans(prompt: Sequence[int], output: Sequence[int], k: int, n_min: int,
                 n_max: int) -> tuple[np.ndarray, np.ndarray]:
    """(span, proposed) at every output position i under vLLM's n-gram proposer (module docstring):
    span: the tokens a greedy step whose context is prompt + output[:i] produces (the proposal's
    leading tokens that equal output[i:], plus the target's own token; at most k + 1 and never past
    the output's end); proposed: the draft tokens it proposed (0: nothing matched). Position 0 is
    the prefill's token: span 1, nothing proposed."""
    if not 1 <= n_min <= n_max:
        raise InputError(f"n-gram window needs 1 <= n_min <= n_max, got {n_min}..{n_max}")
    if k < 1:
        raise InputError(f"draft length k must be >= 1, got {k}")
    if not len(prompt):
        raise InputError("n-gram replay needs a non-empty prompt")
    tokens = np.concatenate([np.asarray(prompt, dtype=np.int64), np.asarray(output, dtype=np.int64)])
    generated = tokens[len(prompt):]
    index = NgramIndex(tokens, n_min, n_max)
    spans = np.ones(len(generated), dtype=np.int64)
    proposed = np.zeros(len(generated), dtype=np.int64)
    for i in range(1, len(generated)):
        size = len(prompt) + i
        index.grow_to(size)
        drafts = np.asarray(match_continuation(tokens[:size], n_min, n_max, k, index.earliest), dtype=np.int64)
        target = generated[i:i + drafts.size]
        differs = np.flatnonzero(drafts[:target.size] != target)
        hits = int(differs[0]) if differs.size else target.size
        spans[i] = min(hits + 1, len(generated) - i)
        proposed[i] = drafts.size
    return spans, proposed
