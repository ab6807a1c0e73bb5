"""Greedy identity on the real SmolLM2-135M-Instruct: one MT-Bench, one HumanEval and one code-edit
prompt (where prompt lookup copies long stretches, so steps accept many tokens), 32 new tokens each
(the length every bundled recording and fidelity run decodes).

The draft-model methods draft with the target's own first 2 layers (same vocabulary, weights
shared), the methods with drafters of their own with untrained ones (identity holds for any
weights); the CLI exits with 1 when any method's output differs from plain greedy decoding.
"""
import pandas as pd
import pytest

import methods
from runtime.engine.__main__ import main


@pytest.mark.slow
def test_every_method_equals_greedy_on_smollm2(tmp_path):
    out = tmp_path / "identity.csv"
    code = main(["--target", "smollm2", "--drafter", "layers:2", "--prompts", "mtbench:1,humaneval:1,codeedit:1",
                 "--max-new-tokens", "32", "--threads", "2", "--out", str(out)])
    frame = pd.read_csv(out)
    assert code == 0, frame[~frame["identical"]].to_string()
    assert set(frame["method"]) == set(methods.names())
    assert frame["identical"].all() and len(frame) == 3 * len(methods.names())
