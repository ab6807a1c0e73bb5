"""experiments.transformers_peer: its step stage records only what is missing."""
from types import SimpleNamespace

from campaigns import transformers_peer as peer
from campaigns.smollm2 import DATASETS
from tests.experiments.test_smollm2_cpu import recording_bench


def test_the_peer_step_stage_measures_only_the_datasets_that_miss_a_trace(tmp_path, monkeypatch):
    asked = []
    monkeypatch.setattr(peer, "Bench", recording_bench(asked))
    args = SimpleNamespace(out=tmp_path, drafters=tmp_path, threads=1, step_limit=2, repeats=1, max_new_tokens=2)
    old = [d for d in DATASETS if d != "lib-edit"]
    for dataset in old:
        for cand in peer.CALIBRATION:
            peer.step_path(tmp_path, cand, dataset).write_text("recorded earlier")
    peer.stage_steps(args, print)
    assert asked == [["libedit"]]
    assert all(peer.step_path(tmp_path, c, d).read_text() == "recorded earlier" for d in old for c in peer.CALIBRATION)
    assert all(peer.step_path(tmp_path, c, "lib-edit").stat().st_size > 0 for c in peer.CALIBRATION)
    peer.stage_steps(args, print)                      # nothing missing: nothing measured
    assert asked == [["libedit"]]
