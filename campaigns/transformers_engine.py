"""transformers' own `generate` as an engine the measurement bench runs (`Bench(..., engine="transformers")`).

A peer nobody here wrote: its steps are recorded by the hf-assisted recorder
(`calibrate.ingest.hf_assisted.AssistedRecorder`, the same one a user wraps around their own
`generate`), so predicting it checks the import path as much as the model. What it runs, for a
specsim configuration:
- plain decoding (`methods.BASELINE`): `generate` alone; a logits processor stamps the clock at
  every decoding step, so each step's time is the gap between two stamps;
- any other method: what the method's own export to transformers gives (`MethodSpec.to_engine("hf",
  ...)`: the `generate` arguments, the assistant's generation config), where the export is exact; a
  method with no counterpart there, or only an approximate one (prompt lookup with n_min > 1:
  transformers falls back to shorter matches), is refused in one line.
Greedy decoding only. transformers' first assisted step runs the prompt's prefill with the first
proposals, so it is left out of the steps and tokens a generation reports, as plain decoding's
prefill (which gives the first token) is. The assistant is a trained vanilla drafter (`runtime.drafters.vanilla`)
exported as a transformers LlamaForCausalLM: its layers and norm, the target's embeddings and full head.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

import methods
from common.errors import InputError
from methods.engines import DrafterOnly, NoCounterpart
from runtime.engine.base import Generation, StepRecord
from runtime.drafters.vanilla import load_vanilla
from runtime.engine import Sampling
from traces.record import token_statistics
from calibrate.ingest.hf_assisted import AssistedRecorder


class StepClock:
    """A logits processor that stamps the clock each time generate asks for the next token."""

    def __init__(self):
        self.stamps: list[float] = []

    def __call__(self, input_ids, scores):
        self.stamps.append(time.perf_counter())
        return scores


def assistant_from_vanilla(hf_target, path: str | Path, ours):
    """The transformers twin of a trained vanilla drafter file: a LlamaForCausalLM of its layer count
    holding its layers and norm, the target's embeddings and LM head."""
    from transformers import LlamaForCausalLM

    drafter = load_vanilla(path, ours)
    config = hf_target.config.__class__(**{**hf_target.config.to_dict(), "num_hidden_layers": drafter.config.num_layers})
    assistant = LlamaForCausalLM(config).eval()
    state = {f"model.{k}": v for k, v in drafter.state_dict().items() if k.startswith(("layers.", "norm."))}
    state["model.embed_tokens.weight"] = hf_target.model.embed_tokens.weight.detach().clone()
    state["lm_head.weight"] = hf_target.lm_head.weight.detach().clone()
    missing, unexpected = assistant.load_state_dict(state, strict=False)
    if [k for k in missing if "rotary" not in k] or unexpected:
        raise InputError(f"{path}: the drafter's weights do not fill a transformers Llama ({(missing or unexpected)[0]})")
    assistant.generation_config.num_assistant_tokens_schedule = "constant"
    assistant.generation_config.assistant_confidence_threshold = 0.0
    return assistant


def teacher_forced_rows(hf_target, assistant, ids: list[int], output: list[int]) -> list[dict]:
    """TokenTrace rows (pos, token, draft_rank, ...) of `assistant` along a greedy `output` of the
    target after prompt `ids`: both models' logits at every output position from one forward each.
    Up to its first miss an assisted step's drafts are the assistant's argmax along the output, so
    these rows replay transformers' greedy assisted steps of any draft length."""
    seq = torch.tensor([ids + output[:-1]])
    with torch.inference_mode():
        p_logits, q_logits = (m(input_ids=seq).logits[0, len(ids) - 1:] for m in (hf_target, assistant))
    stats = token_statistics(p_logits, q_logits, torch.tensor(output), Sampling())
    return [{"pos": pos, "token": output[pos], **{k: v[pos] for k, v in stats.items()}} for pos in range(len(output))]


def check_same_tokenizer(target_tokenizer, assistant, name: str) -> None:
    """An assistant must read and write the target's tokens."""
    have = getattr(assistant.config, "vocab_size", None)
    want = len(target_tokenizer)
    if have != want and have != getattr(target_tokenizer, "vocab_size", want):
        raise InputError(f"assistant '{name}' has a vocabulary of {have} tokens, the target's tokenizer {want}")


class TransformersDecoder:
    """One configuration run through transformers' `generate`, with the engine decoders' interface
    (`generate(ids, max_new_tokens, eos) -> runtime.engine.base.Generation`)."""

    def __init__(self, hf_target, config, assistant=None, drafter: str | None = None):
        self.hf, self.config, self.assistant = hf_target, config, assistant
        self.kwargs: dict[str, Any] = {}
        if config.method == methods.BASELINE:
            return
        export = methods.get(config.method).to_engine("hf", DrafterOnly(drafter), config)
        if isinstance(export, NoCounterpart):
            raise InputError(f"{config.label}: transformers has no counterpart ({export.reason})")
        if export.match != "exact":
            raise InputError(f"{config.label}: transformers runs it only approximately ({export.differs})")
        if export.models and assistant is None:
            raise InputError(f"{config.label}: needs the assistant model (a Profile drafter with a trained file)")
        self.kwargs = dict(export.settings)
        if export.models:
            for key, value in export.generation_config.get("assistant", {}).items():
                setattr(assistant.generation_config, key, value)
            self.kwargs["assistant_model"] = assistant

    def generate(self, ids: list[int], max_new_tokens: int, eos_token_id: int | None = None) -> Generation:
        inputs = torch.tensor([ids])
        common = dict(attention_mask=torch.ones_like(inputs), max_new_tokens=max_new_tokens, do_sample=False,
                      eos_token_id=eos_token_id, pad_token_id=eos_token_id)
        begin = time.perf_counter()
        with torch.no_grad():
            if self.config.method == methods.BASELINE:
                clock = StepClock()
                out = self.hf.generate(inputs, logits_processor=[clock], **common)
                steps, first = _plain_steps(clock.stamps, len(ids)), 1
            else:
                with AssistedRecorder(self.hf, method=self.config.method) as recorder:
                    out = self.hf.generate(inputs, **common, **self.kwargs)
                rows = recorder.rows
                first = int(rows[0]["accepted"]) if rows else 0
                drafts = "assistant_model" in self.kwargs      # prompt lookup runs no draft forward
                steps = [_step_record(row, i, drafts) for i, row in enumerate(rows[1:])]
        tokens = out[0, len(ids) + first:].tolist()
        return Generation(len(ids) + first, tokens, steps, time.perf_counter() - begin)


def _plain_steps(stamps: list[float], prompt_len: int) -> list[StepRecord]:
    """Plain decoding's steps after the prefill (which gave the first token): one token each, timed
    stamp to stamp."""
    return [StepRecord(i, prompt_len + 1 + i, 0, 0.0, 1, later - earlier, 0.0, 1, [], [])
            for i, (earlier, later) in enumerate(zip(stamps, stamps[1:]))]


def _step_record(row: dict[str, Any], index: int, drafts: bool) -> StepRecord:
    """A recorded assisted step; the first one (the prompt's prefill with the first proposals) is
    left out by the caller, as plain decoding's prefill is."""
    return StepRecord(index, int(row["ctx_len"]), int(row["draft_forwards"]) if drafts else 0, float(row["draft_s"]),
                      int(row["verify_tokens"]), float(row["verify_s"]), float(row["overhead_s"]), int(row["accepted"]),
                      list(row["accept_mask"]), list(row["confidences"]))
