"""The study's own step-time fit (SpecDecode-Bench/simulator `predictor.py`, class `Llama8BH100`, "fitted
with instructcoder bs=1,8,16,32,64"), kept as a second calibration beside ours: the same closed loop
priced with its constants instead of the roofline and our engine terms.

Its terms (docs/specdecode_bench_peer.md, `predictor.py:4-51`), read onto a ragged step: a target
forward (prefill, decode and verification alike) takes fixed + per token x tokens + per kv x cached
tokens (`profiles.latency.LinearLatency`); EAGLE drafting takes, once a step, its own fixed + per kv x
the batch's cached tokens + per verify token x the request's verify length (k + 1: a row's, not the
batch's sum); n-gram drafting 0.5875% of the step's verify time; every step adds a fixed overhead.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from costmodel.step import RaggedSteps
from profiles.latency import LinearLatency

SOURCE = ("SpecDecode-Bench/simulator predictor.py:4-16 (Llama8BH100) at commit 2fdccbd61b62be339fb85fd90caf43f5e8392aa6, "
          "as docs/specdecode_bench_peer.md states it")


@dataclass(frozen=True)
class StudyFit:
    """predictor.py's constants (seconds)."""

    target_c_kv: float = 3.92645679e-08
    target_c_compute: float = 2.10103129e-05
    target_c_fixed: float = 5.88590713e-03
    draft_c_kv: float = 2.37768493e-09
    draft_c_num_spec_tokens: float = 8.41429603e-07
    draft_c_fixed: float = 2.13526175e-03
    ngram_draft_percentage: float = 0.005875
    overhead_constant_per_step: float = 1.20683946e-03

    @property
    def target(self) -> LinearLatency:
        return LinearLatency(self.target_c_fixed, self.target_c_compute, self.target_c_kv,
                             fit={"source": SOURCE}, name="llama-3.1-8b (study fit)")

    def step_seconds(self, steps: RaggedSteps, proposer: str, k: int) -> np.ndarray:
        """Seconds of each step of `steps` (`costmodel.step.RaggedSteps`), `proposer` "plain", "eagle" or
        "ngram" at draft length k (module docstring); an oracle is priced as the proposer it stands for."""
        verify = self.target.predict_rows(steps.verify)
        if proposer == "eagle":
            cached = np.asarray(steps.drafts[0].ctx_tokens if steps.drafts else steps.ctx_tokens, float)
            draft = self.draft_c_fixed + self.draft_c_kv * cached + self.draft_c_num_spec_tokens * (k + 1)
        elif proposer == "ngram":
            draft = self.ngram_draft_percentage * verify * (np.asarray(steps.verify.tokens) > np.asarray(steps.rows))
        else:
            draft = 0.0
        return verify + draft + self.overhead_constant_per_step

    def to_dict(self) -> dict:
        return {**{k: getattr(self, k) for k in self.__dataclass_fields__}, "source": SOURCE}


STUDY_FIT = StudyFit()
