"""A toy method defined as one module, as a user would add one: it must show up in every layer.

`toy` drafts a chain like sd but names its draft length `depth` (label token `d`)."""
from __future__ import annotations

from dataclasses import dataclass

from methods.config import Int, MethodConfig, param
from methods.sd import SD


@dataclass(frozen=True)
class ToyConfig(MethodConfig):
    method = "toy"
    gamma: int = param(Int("d", "draft length", low=1, high=8), 2)


class Toy(SD):
    name, config, summary = "toy", ToyConfig, "a chain of `d` drafts (test method)"

    def space(self, setup, gammas=(1, 2, 3)):
        return self.frame_of([ToyConfig(g) for g in gammas])
