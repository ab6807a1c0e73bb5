"""`hf-assisted`: StepTraces a recorder wrote around transformers' `model.generate(..., assistant_model=...)`.

    from calibrate.ingest.hf_assisted import AssistedRecorder
    with AssistedRecorder(model) as recorder:
        for prompt_id, inputs in prompts:
            recorder.prompt_id = prompt_id
            model.generate(**inputs, assistant_model=assistant, max_new_tokens=128)
    recorder.write("steps.parquet", dataset="mt-bench", hardware="H100")

It hooks the candidate generator that assisted decoding asks `model._get_candidate_generator`
for: `get_candidates(input_ids)` (the assistant drafts; its duration is draft_s) and
`update_candidate_strategy(input_ids, scores, num_matches)`, which generate calls once per step
after verifying (the time since drafting ended is verify_s, the call itself overhead_s). Each step
becomes one StepTrace row: ctx_len, drafted tokens, accepted = tokens the step added (bonus
included, cut at EOS or the length limit as generate cuts them), the accept mask, and the
assistant's top-1 probability per drafted token when generate hands over its logits; its config
is the draft length the generator was asked for that step (`num_assistant_tokens`, prompt
lookup's `num_output_tokens`), which a step may fall short of at the length limit or, with a
confidence threshold, where the assistant stops early. The file is
written with `traces.schema.write_trace` (atomic); `python -m calibrate.ingest hf-assisted FILE`
reads it back into a Profile acceptance entry. transformers is never imported here: the recorder
works on any object with that method, and the hook is removed on leaving the `with` block.
What the recorder cannot give, and how it is filled (kept in the trace's `extra.not_provided`):
- verify_s also holds the acceptance check and the KV-cache crop; bookkeeping between steps is
  in no column; on a CUDA model the timer synchronises at region borders;
- draft_forwards = drafted tokens (one assistant forward each; a prompt-lookup drafter runs none);
- the dataset and hardware are what `write` is told; the temperature is the generation config's
  (0 when it does not sample).
"""
from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

import methods
from calibrate.ingest.result import IngestOptions, Ingested, chain_config, chain_mask, from_steps, run_temperature
from common.errors import InputError
from traces.schema import RunMetadata, read_trace, write_trace

NOT_PROVIDED = [
    "verify_s includes the acceptance check and the KV-cache crop; time between steps is in no column",
    "draft_forwards counts drafted tokens (one assistant forward each; prompt lookup runs none)",
]


def _name(model: Any) -> str:
    config = getattr(model, "config", None)
    return str(getattr(config, "_name_or_path", "") or getattr(model, "name_or_path", "") or type(model).__name__)


def _top1(logits: Any) -> list[float]:
    """Top-1 probability per drafted position of the assistant's logits ([1, n, vocab]), or []."""
    if logits is None:
        return []
    if hasattr(logits, "detach"):
        logits = logits.detach().float().cpu().numpy()
    rows = np.asarray(logits, dtype=float).reshape(-1, np.shape(logits)[-1])
    shifted = np.exp(rows - rows.max(axis=1, keepdims=True))
    return (shifted.max(axis=1) / shifted.sum(axis=1)).tolist()


class AssistedRecorder:
    """Records every assisted-decoding step of `model.generate` while inside `with`."""

    def __init__(self, model: Any, *, method: str = methods.CHAIN, clock: Callable[[], float] = time.perf_counter):
        if not hasattr(model, "_get_candidate_generator"):
            raise InputError(f"{type(model).__name__} has no _get_candidate_generator: not a transformers "
                             "generation model (assisted generation is what this recorder hooks)")
        self.model, self.method, self.clock = model, method, clock
        self.prompt_id = "prompt"
        self.rows: list[dict[str, Any]] = []
        self.models: dict[str, str] = {"target": _name(model)}
        self.vocab: dict[str, int] = {}
        self.temperature = 0.0
        self._steps: dict[str, int] = defaultdict(int)
        self._sync: Callable[[], None] = lambda: None

    def __enter__(self) -> "AssistedRecorder":
        if "_get_candidate_generator" in vars(self.model):
            raise InputError("this model is already being recorded")
        original = self.model._get_candidate_generator
        device = getattr(self.model, "device", None)
        if getattr(device, "type", "") == "cuda":
            import torch

            self._sync = torch.cuda.synchronize

        def hooked(*args, **kwargs):
            generator = original(*args, **kwargs)
            self._note_run(kwargs.get("assistant_model"), kwargs.get("generation_config"))
            self._hook(generator)
            return generator

        self.model._get_candidate_generator = hooked
        return self

    def __exit__(self, *exc) -> None:
        vars(self.model).pop("_get_candidate_generator", None)

    def _note_run(self, assistant: Any, generation_config: Any) -> None:
        if assistant is not None:
            self.models["draft"] = _name(assistant)
        for role, m in (("target", self.model), ("draft", assistant)):
            size = getattr(getattr(m, "config", None), "vocab_size", None)
            if size is not None:
                self.vocab[role] = int(size)
        sampling = bool(getattr(generation_config, "do_sample", False))
        self.temperature = float(getattr(generation_config, "temperature", 1.0) or 1.0) if sampling else 0.0

    def _hook(self, generator: Any) -> None:
        """Wrap the generator's two per-step calls in place (every other attribute stays its own)."""
        draft, update = generator.get_candidates, generator.update_candidate_strategy
        step: dict[str, Any] = {}

        def get_candidates(input_ids, *args, **kwargs):
            self._sync()
            start = self.clock()
            candidates, logits = draft(input_ids, *args, **kwargs)
            self._sync()
            ctx = int(input_ids.shape[-1])
            drafted = int(candidates.shape[-1]) - ctx
            asked = getattr(generator, "num_assistant_tokens", None) or getattr(generator, "num_output_tokens", None)
            step.update(start=start, drafted_at=self.clock(), ctx=ctx, drafted=drafted,
                        asked=int(asked) if asked else max(1, drafted), confidences=_top1(logits))
            return candidates, logits

        def update_candidate_strategy(input_ids, scores, num_matches):
            self._sync()
            verified_at = self.clock()
            out = update(input_ids, scores, num_matches)
            self._record(step, int(input_ids.shape[-1]) - step["ctx"], verified_at, self.clock())
            return out

        generator.get_candidates = get_candidates
        generator.update_candidate_strategy = update_candidate_strategy

    def _record(self, step: dict[str, Any], accepted: int, verified_at: float, done_at: float) -> None:
        drafted = step["drafted"]
        self.rows.append({
            "run_id": f"hf-assisted:{self.models['target']}+{self.models.get('draft', '')}", "method": self.method,
            "config": chain_config(self.method, step["asked"]), "prompt_id": self.prompt_id,
            "step": self._steps[self.prompt_id], "ctx_len": step["ctx"], "draft_forwards": drafted,
            "draft_s": step["drafted_at"] - step["start"], "verify_tokens": drafted + 1,
            "verify_s": verified_at - step["drafted_at"], "overhead_s": done_at - verified_at,
            "accepted": accepted, "accept_mask": chain_mask(accepted, drafted),
            "confidences": step["confidences"][:drafted]})
        self._steps[self.prompt_id] += 1

    def frame(self) -> pd.DataFrame:
        if not self.rows:
            raise InputError("no assisted-decoding step was recorded (was generate called with assistant_model=?)")
        return pd.DataFrame(self.rows)

    def write(self, path: str | Path, *, dataset: str = "", hardware: str = "unknown", dtype: str = "",
              seed: int = 0) -> Path:
        """Write the recorded steps as a StepTrace (atomically), run metadata in the footer."""
        dtype = dtype or str(getattr(self.model, "dtype", "")).replace("torch.", "") or "unknown"
        metadata = RunMetadata(kind="step", models=dict(self.models), hardware=hardware, dtype=dtype,
                               temperature=self.temperature, dataset=dataset, seed=seed,
                               extra={"source_format": "hf-assisted", "vocab": self.vocab,
                                      "not_provided": NOT_PROVIDED})
        return write_trace(path, self.frame(), metadata)


def ingest(paths: list[str], options: IngestOptions) -> Ingested:
    """The recorder's StepTrace files back into an acceptance entry (one run: the same models)."""
    frames, first = [], None
    for path in paths:
        frame, meta = read_trace(path, kind="step")
        if meta.extra.get("source_format") != "hf-assisted":
            raise InputError(f"{path}: not written by the hf-assisted recorder (metadata extra.source_format is "
                             f"{meta.extra.get('source_format')!r})")
        if first is not None and meta.models != first.models:
            raise InputError(f"{path}: models {meta.models} differ from {paths[0]}'s {first.models}")
        first = first or meta
        frames.append(frame)
    result = Ingested("hf-assisted", [str(p) for p in paths])
    result.models = {k: v for k, v in (("target", first.models.get("target")), ("drafter", first.models.get("draft")),
                                       ("target_vocab", first.extra.get("vocab", {}).get("target"))) if v is not None}
    result.not_provided = list(first.extra.get("not_provided", []))
    run_temperature(options, result, first.temperature, paths[0])
    first.dataset = first.dataset or options.dataset or ""
    if not first.dataset:
        result.not_provided.append("dataset name: left empty (pass --dataset)")
    return from_steps(result, pd.concat(frames, ignore_index=True), first, options)
