"""Replay from a TokenTrace must equal running the speculative algorithms themselves.

The reference here runs each method step by step on synthetic greedy "models" (deterministic
functions of the prefix): the drafter really drafts chains, top-k trees, CAPE expansion sets and
Kangaroo's confidence stop off the true path too, and the target verifies them. The teacher-forced
TokenTrace of the same models then has to reproduce every step's accepted length.
"""
from __future__ import annotations


import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

from common.errors import InputError
from costmodel.cape import PAPER_BINS
from costmodel.trees import format_k_config, parse_k_config
from traces import replay
from traces.replay import TokenTable

VOCAB = 7


def _logits(prefix: tuple[int, ...], salt: int, sharp: float) -> np.ndarray:
    seed = hash((prefix[-3:], salt)) & 0xFFFFFFFF
    return np.random.default_rng(seed).normal(size=VOCAB) * sharp


class Models:
    """A greedy target and a drafter; the drafter mixes in the target's logits to agree often."""

    def __init__(self, salt: int, agreement: float):
        self.salt, self.agreement = salt, agreement

    def target_next(self, prefix):
        return int(np.argmax(_logits(prefix, self.salt, 1.0)))

    def draft_probs(self, prefix):
        z = self.agreement * _logits(prefix, self.salt, 1.0) + _logits(prefix, self.salt + 1, 1.5)
        e = np.exp(z - z.max())
        return e / e.sum()


def _ranked(q):  # tokens by decreasing q, ties by token id (stable)
    return list(np.argsort(-q, kind="stable"))


def greedy_output(models, prompt, n):
    seq = list(prompt)
    for _ in range(n):
        seq.append(models.target_next(tuple(seq)))
    return seq[len(prompt):]


def reference_step(models, prefix, method, cfg, remaining):
    """One real speculation step (drafts built from the drafter, verified by the target)."""
    if method == "mcsd":
        levels = parse_k_config(cfg["k"])
        # build the whole tree level by level, then let the target walk it
        tree = {(): None}
        frontier = [()]
        for k in levels:
            nxt = []
            for node in frontier:
                for tok in _ranked(models.draft_probs(prefix + node))[:k]:
                    nxt.append(node + (int(tok),))
            frontier = nxt
        children = {}
        for node in frontier:
            for i in range(len(node)):
                children.setdefault(node[:i], set()).add(node[i])
        node = ()
        while True:
            y = models.target_next(prefix + node)
            if y in children.get(node, set()):
                node = node + (y,)
            else:
                return min(len(node) + 1, remaining)
    gamma = cfg["gamma"]
    chain, confs, dists = [], [], []
    for _ in range(gamma):
        q = models.draft_probs(prefix + tuple(chain))
        dists.append(q)
        chain.append(int(_ranked(q)[0]))
        confs.append(float(q.max()))
        if method == "kangaroo" and confs[-1] <= cfg["eta"]:
            break
    for i, tok in enumerate(chain):
        y = models.target_next(prefix + tuple(chain[:i]))
        if y != tok:
            if method == "cape":
                size = cfg["bins"][min(int(np.floor(10 * confs[i])), 10)]
                if y in [int(t) for t in _ranked(dists[i])[1:size]]:
                    return min(i + 2, remaining)
            return min(i + 1, remaining)
    return min(len(chain) + 1, remaining)


def teacher_forced(models, prompts, n):
    rows = []
    for pid, prompt in prompts.items():
        out = greedy_output(models, prompt, n)
        for pos, tok in enumerate(out):
            q = models.draft_probs(tuple(prompt) + tuple(out[:pos]))
            rows.append({"prompt_id": pid, "pos": pos, "token": tok,
                         "draft_rank": _ranked(q).index(tok), "draft_conf": float(q.max())})
    return pd.DataFrame(rows)


def reference_run(models, prompts, n, method, cfg):
    rows = []
    for pid, prompt in prompts.items():
        out = greedy_output(models, prompt, n)
        pos, step = 0, 0
        while pos < n:
            a = reference_step(models, tuple(prompt) + tuple(out[:pos]), method, cfg, n - pos)
            rows.append((pid, step, pos, a))
            pos, step = pos + a, step + 1
    return pd.DataFrame(rows, columns=["prompt_id", "step", "pos", "accepted"])


CONFIGS = [
    ("sd", {"gamma": 1}), ("sd", {"gamma": 4}), ("sd", {"gamma": 9}),
    ("mcsd", {"k": "2x2x1"}), ("mcsd", {"k": "3x1x2x1"}), ("mcsd", {"k": "1"}),
    ("cape", {"gamma": 3, "bins": [4, 4, 4, 3, 3, 3, 2, 2, 1, 1, 1]}),
    ("cape", {"gamma": 5, "bins": list(PAPER_BINS)}),
    ("kangaroo", {"gamma": 6, "eta": 0.45}), ("kangaroo", {"gamma": 4, "eta": 0.0}),
]


@settings(max_examples=12, deadline=None)
@given(salt=st.integers(0, 10_000), agreement=st.sampled_from([0.5, 2.0, 6.0]))
def test_replay_equals_reference_runs(salt, agreement):
    models = Models(salt, agreement)
    prompts = {"a": [1, 2], "b": [3], "c": [0, 5, 6]}
    n = 23
    table = TokenTable.from_frame(teacher_forced(models, prompts, n))
    for method, cfg in CONFIGS:
        expected = reference_run(models, prompts, n, method, cfg)
        got = replay.replay_steps(table, method, cfg)
        pd.testing.assert_frame_equal(got.reset_index(drop=True), expected, check_dtype=False,
                                      obj=f"{method} {cfg}")


def _table(ranks, confs=None, splits=None):
    ranks = np.asarray(ranks)
    confs = np.full(len(ranks), 0.9) if confs is None else np.asarray(confs)
    splits = splits or [len(ranks)]
    offsets = np.concatenate([[0], np.cumsum(splits)])
    return TokenTable.from_arrays([f"p{i}" for i in range(len(splits))], offsets, ranks, confs)


def test_hand_worked_cases():
    t = _table([0, 0, 1, 0, 3, 0, 0])
    assert replay.accept_lengths(t, "sd", {"gamma": 2}).tolist() == [3, 2, 1, 2, 1, 2, 1]
    assert replay.accept_lengths(t, "mcsd", {"k": "2x1"}).tolist() == [3, 2, 3, 2, 1, 2, 1]
    # cape: confidence 0.9 -> bin 9; rank 1 caught when S[9] >= 2, rank 3 needs S[9] >= 4
    bins = [1] * 9 + [2, 1]
    assert replay.accept_lengths(t, "cape", {"gamma": 3, "bins": bins}).tolist() == [4, 3, 2, 2, 1, 2, 1]
    k = _table([0, 0, 0, 0], confs=[0.9, 0.3, 0.9, 0.9])
    assert replay.accept_lengths(k, "kangaroo", {"gamma": 3, "eta": 0.5}).tolist() == [3, 2, 2, 1]


def test_walk_matches_replay_steps_and_prompt_ends():
    t = _table([0, 0, 0, 1, 0, 0, 2, 0], splits=[3, 5])
    steps = replay.replay_steps(t, "sd", {"gamma": 4})
    assert steps["accepted"].tolist() == [3, 1, 3, 1]
    summary = replay.replay_summary(t, "sd", [{"gamma": g} for g in (1, 4)])
    assert summary["steps"].tolist() == [replay.replay_steps(t, "sd", {"gamma": 1}).shape[0], 4]
    assert summary["mean_accepted"].iloc[1] == pytest.approx(8 / 4)


def test_many_configs_are_fast():
    rng = np.random.default_rng(0)
    n = 40_000
    t = _table(rng.geometric(0.5, n) - 1, rng.uniform(0, 1, n), splits=[200] * 200)
    import time
    start = time.perf_counter()
    out = replay.replay_summary(t, "sd", [{"gamma": g} for g in range(1, 13)] * 10)
    assert len(out) == 120 and (out["mean_accepted"] >= 1).all()
    assert time.perf_counter() - start < 10


@pytest.mark.parametrize("method,cfg,needle", [
    ("medusa", {"gamma": 2}, "unknown method 'medusa'"),
    ("lookahead", {}, "cannot be replayed"),
    ("sd", {"gamma": 0}, "'gamma' must be in 1"),
    ("sd", {"gama": 3}, "unknown config key 'gama'"),
    ("mcsd", {"k": "4x0"}, "factors must be >= 1"),
    ("mcsd", {"k": "abc"}, "k-configuration 'abc'"),
    ("cape", {"gamma": 2, "bins": [1, 2]}, "11 entries"),
    ("kangaroo", {"gamma": 2, "eta": 1.5}, "eta"),
    ("sd", "{not json", "not valid JSON"),
])
def test_bad_configs_are_one_line_errors(method, cfg, needle):
    with pytest.raises(InputError, match=needle) as err:
        replay.accept_lengths(_table([0, 1]), method, cfg)
    assert "\n" not in str(err.value)


def test_token_table_rejects_gaps():
    frame = pd.DataFrame({"prompt_id": ["a", "a"], "pos": [0, 2], "token": [1, 2],
                          "draft_rank": [0, 0], "draft_conf": [0.5, 0.5]})
    with pytest.raises(InputError, match="without gaps"):
        TokenTable.from_frame(frame)


def test_replay_imports_without_torch():
    import subprocess, sys
    code = ("import sys, traces.replay; "
            "assert 'torch' not in sys.modules, 'traces.replay pulled in torch'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_k_config_round_trip():
    assert parse_k_config("4x2x1") == (4, 2, 1)
    assert format_k_config([4, 2, 1]) == "4x2x1"
    assert replay.replay_summary(_table([0]), "mcsd", ["{\"k\": [2, 1]}"])["config"][0] == "mcsd k2x1 repl"
