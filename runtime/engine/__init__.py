"""The decoding engine: one interface (propose -> verify -> commit) for every method, by name.

    decoder = make_decoder("mcsd", target, drafter, sampling=Sampling(0.0), seed=0, k="4x2x1")
    out = decoder.generate(prompt_ids, max_new_tokens=64, eos_token_id=None)
    out.tokens, out.steps  # generated ids; one StepRecord (StepTrace fields) per step

Which class decodes a method is the method module's `decoder` (methods registry); the config keys
are its config class's. See `runtime/engine/base.py` for the step protocol.
"""
from __future__ import annotations

from typing import Any

import methods
from runtime.engine.base import Decoder, Generation, Proposal, StepRecord, StepTimer
from runtime.engine.draft_model import DrafterState
from runtime.engine.verify import Sampling
from runtime.llama import Llama


def make_decoder(method: str, target: Llama, drafter: Any = None, *, sampling: Sampling | None = None,
                 seed: int = 0, mode: str = "eager", **config: Any) -> Decoder:
    """A decoder for `method` (the registry's `decoder` class) with its configuration: the method's
    config keys (one set of defaults, unknown keys refused) and the decoder's own `options`;
    `mode` the runtime mode (runtime.cache.MODES: eager, static, graph)."""
    spec = methods.get(method)
    decoder = spec.decoder_class()(target, drafter, sampling=sampling, seed=seed, spec=spec, **config)
    return decoder.use_mode(mode) if mode != "eager" else decoder


__all__ = ["Decoder", "Generation", "Proposal", "StepRecord", "StepTimer", "DrafterState", "Sampling",
           "make_decoder"]
