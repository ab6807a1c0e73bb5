"""Replayed-acceptance mode: real speculative loops whose accept/reject decisions come from a trace.

A model with random weights times like the trained one but accepts nothing, so its speculative
loop runs at the wrong speed. In replayed mode every forward (drafter and target), every tree
construction, cache edit (`KVCache.keep`/`crop`) and the sampling of the correction/bonus token
run for real, at any size, while *which* draft tokens are accepted is read from a recording of a
trained pair (SmolLM2 traces driving Vicuna-7B / LLaMA-68M shapes on a GPU).

Two sources of decisions:
- `RankReplay` (from a greedy TokenTrace, one prompt's rows): the step starting at output position
  p accepts, at depth l, the child whose drafter rank equals draft_rank[p + l]. Children of a node
  are ranked in candidate order (chain: one child of rank 0; MCSD: the drafter's top-k; CAPE: the
  chain token then its expansion set), so this is exactly `traces.replay` for every method with a
  drafter (a plain chain's replay for coral); an early-exit stop rule also reads the recorded draft_conf.
- `LengthReplay` (from a StepTrace's `accepted` column): step i accepts accepted[i] - 1 tokens
  along the first children; for methods without a drafter, hence no drafter rank (n-gram candidates).
The committed correction/bonus token is the target's own argmax at the last accepted node (the
real sampling step); past the end of the recording nothing more is accepted.
Known limit: CAPE's expansion sizes (engine `CAPE.propose`) come from the random drafter's own
confidences, not the recorded ones, since that method has no confidence hook.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pandas as pd
import torch

from verification import rules
from runtime.engine import Sampling, make_decoder
from runtime.engine.base import Decoder, Generation
from common.errors import InputError
from traces.replay import TokenTable
import methods


class RankReplay:
    """Decisions from one prompt's TokenTrace rows: drafter rank and confidence per output position."""

    def __init__(self, draft_rank: Sequence[int], draft_conf: Sequence[float]):
        self.rank = np.asarray(draft_rank, dtype=np.int64)
        self.conf = np.asarray(draft_conf, dtype=np.float64)
        if self.rank.shape != self.conf.shape or self.rank.ndim != 1 or not len(self.rank):
            raise InputError("replay needs one draft_rank and one draft_conf per recorded output token")

    @property
    def length(self) -> int:
        return len(self.rank)

    def confidence(self, pos: int) -> float:
        return float(self.conf[pos]) if pos < len(self.conf) else 0.0

    def path(self, tree: rules.TokenTree, pos: int, step: int) -> list[int]:
        node, path = 0, []
        while tree.children(node) and pos + len(path) < len(self.rank):
            rank = int(self.rank[pos + len(path)])
            children = tree.children(node)
            if rank >= len(children):
                break
            node = children[rank]
            path.append(node)
        return path


class LengthReplay:
    """Decisions from a StepTrace: step i accepts accepted[i] - 1 drafted tokens (first children)."""

    def __init__(self, accepted: Sequence[int]):
        self.accepted = [int(a) for a in accepted]
        if not self.accepted or min(self.accepted) < 1:
            raise InputError("replay needs the recorded accepted length (>= 1) of every step")

    @property
    def length(self) -> int:
        return sum(self.accepted)

    def confidence(self, pos: int) -> float:
        return 1.0  # no recorded confidences: never stop drafting early

    def path(self, tree: rules.TokenTree, pos: int, step: int) -> list[int]:
        want = self.accepted[step] - 1 if step < len(self.accepted) else 0
        node, path = 0, []
        while len(path) < want and tree.children(node):
            node = tree.children(node)[0]
            path.append(node)
        return path


class ReplayedMixin:
    """Put in front of a Decoder class: `decide` reads the replay source instead of the target."""

    replay: RankReplay | LengthReplay

    def start(self, prompt: list[int]) -> None:
        super().start(prompt)
        self._prompt_len, self._step = len(prompt), 0

    @property
    def replay_pos(self) -> int:
        """Output tokens committed so far (the next step's first draft predicts this position)."""
        return len(self.tokens) - self._prompt_len

    def decide(self, tree: rules.TokenTree, logits: torch.Tensor, proposal) -> rules.Verdict:
        path = self.replay.path(tree, self.replay_pos, self._step)
        self._step += 1
        last = path[-1] if path else 0
        correction = int(logits[last].argmax())   # the real sampling step of the bonus/correction token
        tokens = tuple(tree.tokens[n] for n in path) + (correction,)
        return rules.Verdict(tokens, len(path), tuple(path), not tree.children(last))

    def stop_confidence(self, index: int, confidence: float) -> float:
        return self.replay.confidence(self.replay_pos + index)


def replayed_decoder(method: str, target, drafter: Any = None, *, seed: int = 0, mode: str = "eager",
                     **config: Any) -> Decoder:
    """A decoder of `method` in replayed mode (greedy) and runtime `mode` (runtime.cache.MODES);
    set `.replay` before each `generate`."""
    decoder = make_decoder(method, target, drafter, sampling=Sampling(0.0), seed=seed, mode=mode, **config)
    base = type(decoder)
    decoder.__class__ = type(f"Replayed{base.__name__}", (ReplayedMixin, base), {})
    return decoder


@dataclass
class ReplayedRun:
    """One prompt's replayed generation: its steps and wall-clock."""

    prompt_id: str
    generation: Generation

    @property
    def tokens_per_s(self) -> float:
        return len(self.generation.tokens) / self.generation.seconds


def sources_from_token_trace(frame: pd.DataFrame) -> dict[str, RankReplay]:
    """One `RankReplay` per prompt of a TokenTrace frame (checked by `traces.replay.TokenTable`)."""
    table = TokenTable.from_frame(frame)
    out = {}
    for i, prompt_id in enumerate(table.prompt_ids):
        lo, hi = int(table.offsets[i]), int(table.offsets[i + 1])
        out[prompt_id] = RankReplay(table.draft_rank[lo:hi], table.draft_conf[lo:hi])
    return out


def sources_from_step_trace(frame: pd.DataFrame) -> dict[str, LengthReplay]:
    """One `LengthReplay` per prompt of a StepTrace frame (steps in order)."""
    for column in ("prompt_id", "step", "accepted"):
        if column not in frame.columns:
            raise InputError(f"step trace lacks column '{column}'")
    ordered = frame.sort_values(["prompt_id", "step"], kind="stable")
    return {str(pid): LengthReplay(group["accepted"].tolist()) for pid, group in ordered.groupby("prompt_id", sort=False)}


def run_replayed(decoder: Decoder, sources: dict[str, RankReplay | LengthReplay],
                 prompts: dict[str, list[int]], *, max_new_tokens: int | None = None) -> list[ReplayedRun]:
    """Generate every prompt with its replay source; each run stops at the recording's length."""
    missing = [pid for pid in prompts if pid not in sources]
    if missing:
        raise InputError(f"no recorded acceptance for prompt '{missing[0]}'")
    runs = []
    for prompt_id, prompt in prompts.items():
        source = sources[prompt_id]
        decoder.replay = source
        limit = source.length if max_new_tokens is None else min(max_new_tokens, source.length)
        runs.append(ReplayedRun(prompt_id, decoder.generate(prompt, limit)))
    return runs


def random_prompts(prompt_ids: Sequence[str], length: int, vocab_size: int, seed: int = 0) -> dict[str, list[int]]:
    """Seeded random prompt token ids (random-weight models read no text; only lengths matter)."""
    if length < 1:
        raise InputError(f"prompt length must be >= 1, got {length}")
    rng = np.random.default_rng(seed)
    return {pid: rng.integers(0, vocab_size, size=length).tolist() for pid in prompt_ids}


def steps_frame(runs: Sequence[ReplayedRun], method: str, config: Any, run_id: str) -> pd.DataFrame:
    """StepTrace rows (traces.schema STEP_COLUMNS) of replayed runs; `config` (a method config or
    mapping) is written in full, as the method's config parses it."""
    import json

    text = json.dumps(methods.get(method).parse(config).to_dict(), sort_keys=True)
    rows = []
    for run in runs:
        for s in run.generation.steps:
            rows.append(dict(run_id=run_id, method=method, config=text,
                             prompt_id=run.prompt_id, step=s.step, ctx_len=s.ctx_len,
                             draft_forwards=s.draft_forwards, draft_s=s.draft_s, verify_tokens=s.verify_tokens,
                             verify_s=s.verify_s, overhead_s=s.overhead_s, accepted=s.accepted,
                             accept_mask=list(s.accept_mask), confidences=list(s.confidences), mode=s.mode))
    return pd.DataFrame(rows)


