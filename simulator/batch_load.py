"""The one load under which a configuration is served "at batch B", wherever a number at a batch size
is shown: the sweep's deployments (`sweep.deployments`), `python -m experiments.simulate crossover`
and capacity planning's crossover (`capacity.plan`). One definition and one seed derivation, so the
same profile, configuration, batch and lengths give the same throughput in every output.

`waves x B` requests of `prompt_len` prompt and `output_len` output tokens arrive together at
t = 0 and are served with batch limit B: B sequences decode at once (continuous batching refills a
finished row from the queue), the others wait for a slot. Throughput counts every token served,
the ramp-down of the last wave included.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from common.errors import InputError
from common.seeds import derive_seed
from simulator.costs import Parallelism
from simulator.serving import Cluster, ServingResult, simulate_serving
from simulator.workload import Workload

WAVES = 3                  # requests served per batch slot (B running, WAVES x B in all)


@dataclass(frozen=True)
class BatchLoad:
    """Fixed prompt and output lengths, `waves` requests per batch slot, all arriving at t = 0."""

    prompt_len: int
    output_len: int
    waves: int = WAVES

    def __post_init__(self):
        for name, least in (("prompt_len", 1), ("output_len", 2), ("waves", 1)):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or value < least:
                raise InputError(f"the batch load's {name} must be an integer >= {least}, got {value!r}")

    def describe(self, batch: int | None = None) -> str:
        """The load in words, at one batch size or for every B."""
        b = "B" if batch is None else str(int(batch))
        total = f"{self.waves} x B" if batch is None else str(self.waves * int(batch))
        return (f"{total} requests (prompt {self.prompt_len}, output {self.output_len} tokens) arrive together at "
                f"t = 0, batch limit {b}: {b} decode at once, the others wait for a slot")

    def workload(self, batch: int, requests: int | None = None) -> Workload:
        return Workload(rate=1e9, n_requests=self.waves * int(batch) if requests is None else requests,
                        prompt_len=f"fixed:{self.prompt_len}", output_len=f"fixed:{self.output_len}")

    def seed(self, seed: int, profile_name: str, method: str, config: Mapping[str, Any], batch: int) -> int:
        """The run's own seed: the same (profile, configuration, batch, lengths) draws the same tokens
        whichever command serves it."""
        return derive_seed(seed, "serve", profile_name, method, sorted(dict(config).items()), int(batch),
                           self.prompt_len, self.output_len)


def serve_at_batch(profile, method: str, config: Mapping[str, Any] | None, batch: int, load: BatchLoad, seed: int,
                   parallel: Parallelism | None = None, requests: int | None = None) -> ServingResult:
    """`load` at batch limit `batch` (or `requests` of it, e.g. one request alone), per-step rows kept."""
    own = load.seed(seed, profile.name, method, config or {}, batch)
    cluster = Cluster(max_batch=int(batch), parallel=parallel or Parallelism())
    return simulate_serving(profile, method, dict(config) if config else None, load.workload(batch, requests),
                            cluster, own, per_step=True)
