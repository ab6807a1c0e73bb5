"""The decoding engine: one interface (propose -> verify -> commit) for every method, by name.

    decoder = make_decoder("mcsd", target, drafter, sampling=Sampling(0.0), seed=0, k="4x2x1")
    out = decoder.generate(prompt_ids, max_new_tokens=64, eos_token_id=None)
    out.tokens, out.steps  # generated ids; one StepRecord (StepTrace fields) per step

Other modules add methods with `register("name")` on a `Decoder` subclass (the drafter engineer's
glide, kangaroo and coral). See `runtime/engine/base.py` for the step protocol.
"""
from __future__ import annotations

from typing import Any, Callable

from runtime.engine.base import Decoder, Generation, Proposal, StepRecord, StepTimer
from runtime.engine.draft_methods import AR, CAPE, MCSD, SD, DrafterState
from runtime.engine.lookahead import Lookahead
from runtime.engine.verify import Sampling
from common.errors import InputError
from runtime.llama import Llama

METHODS: dict[str, type[Decoder]] = {"ar": AR, "sd": SD, "mcsd": MCSD, "cape": CAPE, "lookahead": Lookahead}


def register(name: str) -> Callable[[type[Decoder]], type[Decoder]]:
    """Class decorator: make a Decoder subclass available to `make_decoder` under `name`."""

    def add(cls: type[Decoder]) -> type[Decoder]:
        METHODS[name] = cls
        return cls

    return add


def make_decoder(method: str, target: Llama, drafter: Any = None, *, sampling: Sampling | None = None,
                 seed: int = 0, **config: Any) -> Decoder:
    """A decoder for `method` with its configuration; bad method or configuration -> InputError."""
    if method not in METHODS:
        _load_plugins()
    if method not in METHODS:
        raise InputError(f"unknown method '{method}' (known: {', '.join(sorted(METHODS))})")
    return METHODS[method](target, drafter, sampling=sampling, seed=seed, **config)


def _load_plugins() -> None:
    """Import the drafter package, whose methods register themselves, if it is there."""
    try:
        import runtime.drafters  # noqa: F401
    except ImportError:
        pass


__all__ = ["Decoder", "Generation", "Proposal", "StepRecord", "StepTimer", "DrafterState", "Sampling",
           "METHODS", "register", "make_decoder"]
