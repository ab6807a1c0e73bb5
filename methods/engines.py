"""A method's configuration as the engines people deploy take it: the records `MethodSpec.to_engine`
returns, and what every engine export shares.

Each method maps itself (its module's `to_engine`); an engine it has no counterpart in gets a
`NoCounterpart` with the reason, never a mapping to something else. `match` is "exact" when the
engine runs the same algorithm with the same shape (the prediction is about what the engine will
run) and "approximate" when it runs a relative (`differs` says what is dropped; the prediction is
then the specsim method's).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from common.errors import InputError

ENGINES = ("vllm", "sglang", "hf")


@dataclass(frozen=True)
class EngineConfig:
    """One specsim configuration as an engine accepts it."""

    engine: str
    settings: dict[str, Any]          # the engine's own option names and values
    match: str                        # "exact" or "approximate"
    differs: str = ""                 # what the engine does not do of the specsim method
    models: tuple[str, ...] = field(default_factory=tuple)   # Profile model names to replace by checkpoints


@dataclass(frozen=True)
class NoCounterpart:
    engine: str
    method: str
    reason: str


def parse_engines(text: str) -> list[str]:
    """'vllm,hf' -> ['vllm', 'hf']; InputError naming the value and the engines allowed."""
    chosen = [t.strip().lower() for t in str(text).split(",") if t.strip()]
    for name in chosen:
        if name not in ENGINES:
            raise InputError(f"--export: unknown engine '{name}' in '{text}' (allowed: {', '.join(ENGINES)})")
    if not chosen:
        raise InputError(f"--export: no engine in '{text}' (allowed: {', '.join(ENGINES)})")
    return list(dict.fromkeys(chosen))


def drafter_checkpoint(setup) -> str:
    """The model name a drafter's checkpoint replaces in an export (the Profile's)."""
    return str(setup.drafter_spec.get("model") or setup.drafter)


def verified_tokens(spec, setup, config) -> int:
    """Tokens one step verifies by the method's own step shape (an engine's num-draft-tokens)."""
    import numpy as np

    return int(round(float(np.ravel(spec.step_shape(setup, spec.frame_of([config])).verify_tokens)[0])))
