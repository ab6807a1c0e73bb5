"""What a method runs with on a target no one measured it with: its drafter built from the target's
architecture (or a registry draft model of the target's tokenizer) and the Profile whose acceptance is
carried to it, marked ASSUMED (`calibrate.assumed` builds the Profile entries and prices the model).

A method an engine runs as it is (`MethodSpec.engine_offered`) states these in `assumed_drafters`, so
every such method is priced on every GPU Profile; an acceptance measured for the pair (an engine file
through `calibrate.ingest`, a trace through `calibrate.fit`) replaces the assumption.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from costmodel.params import Arch, arch_dict

# the registry's smallest model of each tokenizer, the vocabulary standing for the tokenizer: a draft
# model must share the target's tokens (Qwen2.5's small models cut 128 unused rows of its vocabulary)
DRAFT_MODELS = {32000: "llama-68m", 128256: "llama-3.2-1b", 152064: "qwen2.5-0.5b", 151936: "qwen2.5-0.5b"}


@dataclass(frozen=True)
class AssumedDrafter:
    """One drafter of a method on a target no Profile measured it with: its Profile entry, the
    architecture of the model it names (None: no model), and the bundled Profile (file stem) whose
    acceptance entries of drafter `donor_drafter` are carried to it (the same dataset where the donor
    has it, else `prefer`), with why that acceptance stands in; `any_model`: the entry's model may be
    replaced by any model of the target's tokenizer (the sweep's `--draft-model`)."""

    entry: dict[str, Any]
    arch: dict[str, Any] | None
    donor: str
    donor_drafter: str
    prefer: str
    why: str
    any_model: bool = False      # a draft model of the target's tokenizer: another one may take its place

    @property
    def model(self) -> str | None:
        return self.entry.get("model")


def draft_model_for(arch: Arch) -> tuple[str, dict[str, Any]] | None:
    """(registry name, architecture dict) of the draft model of the target's tokenizer, or None."""
    name = DRAFT_MODELS.get(int(arch.vocab))
    return None if name is None else (name, arch_dict(name))
