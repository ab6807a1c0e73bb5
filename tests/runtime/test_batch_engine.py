"""runtime.engine.batch and runtime.ragged: every row of a batch decodes as it decodes alone.

Greedy: each row's tokens, and its steps' tree sizes, accepted counts and drafter confidences, are
its batch-1 run's, with prompts of different lengths, requests joining and leaving mid-run and a
batch larger than the requests. Sampling: a row decoded beside ragged neighbours keeps the target's
law (`verification.statistical`). The cache: per-row lengths, keep, crop, moving rows, and stale
entries past a row's length never attended.
"""
import pytest
import torch

import methods
from common.errors import InputError
from runtime.engine import Sampling, make_decoder
from runtime.engine.batch import BatchEngine, batched_methods, generate_batch
from runtime.engine.tree import ancestor_mask, with_prefix
from runtime.models import tiny_model, truncated
from runtime.ragged import BatchKVCache, RowInput

PROMPTS = [[3, 7, 1, 9, 12, 5, 3, 7, 1, 9], [5], [1, 2, 3], [9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 11, 12, 13, 14, 15], [4, 4, 4, 4]]
NEW = [20, 7, 13, 25, 9]            # rows leave at different steps
CONFIGS = [
    ("ar", {}), ("sd", {"gamma": 3}), ("prompt_lookup", {"gamma": 3, "n_min": 1, "n_max": 3}),
    ("mcsd", {"k": "3x2x1"}), ("mcsd", {"k": "2x2", "replacement": False}),
    ("cape", {"gamma": 3, "bins": [4, 4, 3, 3, 2, 2, 1, 1, 1, 1, 1]}),
    ("glide", {"gamma": 3}), ("glide", {"gamma": 2, "bins": [3] * 11}),
]


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def models():
    target = tiny_model(0, num_layers=3)
    return target, truncated(target, 1)


def _drafters(method, models):
    """Draft models for the methods that take one: a shallow one (some drafts rejected) and the target (all kept)."""
    return [models[1], models[0]] if methods.get(method).decoder_class().needs_drafter else [None]


def _per_request(steps):
    rows = {}
    for step in steps:
        assert len({r.request_id for r in step.rows}) == len(step.rows)
        for row in step.rows:
            rows.setdefault(row.request_id, []).append(row)
    return rows


@pytest.mark.parametrize("method,config", CONFIGS, ids=[f"{m}-{i}" for i, (m, _) in enumerate(CONFIGS)])
def test_each_row_decodes_as_it_does_alone(models, method, config):
    # a small looping vocabulary gives n-gram matches, and an untrained GLIDE drafter some hits
    target = tiny_model(11, vocab_size=16, num_layers=2, std=1.0) if method in ("prompt_lookup", "glide") else models[0]
    for drafter in _drafters(method, models):
        alone = [make_decoder(method, target, drafter, **config).generate(p, n) for p, n in zip(PROMPTS, NEW)]
        for batch in (2, 8):                       # requests wait for rows; more rows than requests
            out = generate_batch(method, target, PROMPTS, NEW, batch=batch, drafter=drafter, **config)
            assert out.tokens == [a.tokens for a in alone], (method, drafter is target, batch)
            rows = _per_request(out.steps)
            for i, a in enumerate(alone):
                got = rows[i]
                assert [(r.ctx_len, r.verify_tokens, r.accepted, r.draft_forwards) for r in got] == [
                    (s.ctx_len, s.verify_tokens, s.accepted, s.draft_forwards) for s in a.steps]
                assert [r.accept_mask for r in got] == [s.accept_mask for s in a.steps]
                for r, s in zip(got, a.steps):
                    assert r.confidences == pytest.approx(s.confidences, abs=1e-9)
                assert [r.joined for r in got] == [True] + [False] * (len(got) - 1)
            assert max(len(s.rows) for s in out.steps) == min(batch, len(PROMPTS))
            assert any(len({r.ctx_len for r in s.rows}) > 1 for s in out.steps)       # ragged rows
            if batch == 2:
                assert any(r.joined for s in out.steps[1:] for r in s.rows)          # joined mid-run
        if method != "ar":
            assert max(s.accepted for a in alone for s in a.steps) > 1, "no draft was ever accepted"


def test_eos_ends_a_row_as_alone(models):
    target, shallow = models
    full = [make_decoder("sd", target, shallow, gamma=3).generate(p, n).tokens for p, n in zip(PROMPTS, NEW)]
    eos = full[3][4]
    alone = [make_decoder("sd", target, shallow, gamma=3).generate(p, n, eos_token_id=eos).tokens
             for p, n in zip(PROMPTS, NEW)]
    engine = BatchEngine("sd", target, shallow, batch=3, eos_token_id=eos, gamma=3)
    out = engine.generate(PROMPTS, NEW)
    assert out.tokens == alone and out.tokens[3][-1] == eos and len(out.tokens[3]) < NEW[3]
    assert sum(r.accepted for s in out.steps for r in s.rows if r.request_id == 3) == len(alone[3])


def test_step_records_time_the_step_and_the_prefills(models):
    """A joining request is prefilled by its own forwards (target and drafter, timed as prefill_s);
    the step's batched drafter forwards then feed one token per row, or a tree level."""
    target, shallow = models
    engine = BatchEngine("mcsd", target, shallow, batch=2, k="2x2")
    engine.add("a", PROMPTS[0], 6)
    engine.add("b", PROMPTS[3], 3)
    shapes = []
    hook = shallow.register_forward_pre_hook(lambda module, args: shapes.append(tuple(args[0].shape)))
    try:
        first = engine.step()
    finally:
        hook.remove()
    assert sorted(s for s in shapes if s[0] == 1) == [(1, len(PROMPTS[0]) - 1), (1, len(PROMPTS[3]) - 1)]
    assert [s for s in shapes if s[0] == 2] == [(2, 1), (2, 2)]        # catch-up, then the first level
    assert [r.request_id for r in first.rows] == ["a", "b"] and all(r.joined for r in first.rows)
    assert first.prefill_s > 0 and first.draft_s > 0 and first.verify_s > 0 and first.overhead_s >= 0
    assert first.width == max(r.verify_tokens for r in first.rows) == 7
    assert [r.ctx_len for r in first.rows] == [len(PROMPTS[0]), len(PROMPTS[3])]
    steps = [first]
    while not engine.idle:
        steps.append(engine.step())
        if steps[-1].step == 1:
            engine.add("c", PROMPTS[1], 4)       # joins once "b" leaves
    finished = {f.request_id: f for s in steps for f in s.finished}
    assert {k: len(f.tokens) for k, f in finished.items()} == {"a": 6, "b": 3, "c": 4}
    assert finished["c"].prompt_len == 1
    assert [s.step for s in steps] == list(range(len(steps)))
    assert all(s.prefill_s == 0 for s in steps if not any(r.joined for r in s.rows))
    assert any(s.prefill_s > 0 for s in steps[1:])


# --- the sampled law ---------------------------------------------------------------------------

VOCAB = 6
SAMPLED = [("sd", {"gamma": 3}), ("mcsd", {"k": "2x2", "replacement": False}), ("cape", {"gamma": 2, "bins": [3] * 11}),
           ("glide", {"gamma": 2}), ("prompt_lookup", {"gamma": 2, "n_min": 1, "n_max": 2})]


def _two_token_law(model, prompt, sampling):
    with torch.no_grad():
        first = sampling.probs(model(torch.tensor([prompt])).logits[0, -1])
        rows = sampling.probs(model(torch.tensor([[*prompt, t] for t in range(VOCAB)])).logits[:, -1])
    return (first[:, None] * rows).flatten().numpy()


@pytest.mark.slow
@pytest.mark.parametrize("method,config", SAMPLED, ids=[m for m, _ in SAMPLED])
def test_a_row_beside_others_keeps_the_target_law(method, config):
    """The first two tokens of a request decoded in a batch, among requests of other lengths that
    join and leave around it, follow the target's law (700 draws: a law at TV >= 0.15 fails)."""
    from verification.statistical import statistical_check

    target = tiny_model(2, vocab_size=VOCAB, num_layers=1, std=0.8)
    drafter = tiny_model(3, vocab_size=VOCAB, num_layers=1, std=0.8) if method in ("sd", "mcsd", "cape") else None
    prompt, sampling = [1, 2, 3], Sampling(temperature=1.0, top_p=0.95)
    law = _two_token_law(target, prompt, sampling)

    def sampler(case, rng, n):
        engine = BatchEngine(method, target, drafter, batch=12, sampling=sampling, **config)
        seeds = rng.integers(2**31, size=n + 2).tolist()
        engine.add("long", [4, 1, 0, 5, 2, 3, 1, 4, 0], 3000, seed=seeds[-1])    # neighbours of their own lengths
        engine.add("short", [5], 3000, seed=seeds[-2])
        for i in range(n):
            engine.add(i, prompt, 2, seed=seeds[i])
        out = {}
        while len(out) < n:
            out.update({f.request_id: f.tokens for f in engine.step().finished})
        return [out[i][0] * VOCAB + out[i][1] for i in range(n)]

    result = statistical_check(sampler, None, target=law, n=700, alpha=1e-4, seed=5, batched=True)
    assert result.passed, result.reason


# --- the cache ---------------------------------------------------------------------------------

def _filled(target, prompts):
    caches = []
    for p in prompts:
        cache = target.new_cache(capacity=64)
        if p:
            with torch.no_grad():
                target(torch.tensor([p]), cache, logits=False)
        caches.append(cache)
    return caches


def test_rows_keep_their_own_lengths_and_never_see_stale_entries(models):
    target = models[0]
    alone = _filled(target, [[3, 7, 1], [5, 9, 2, 8, 6, 4, 1, 0, 3], [11], []])   # the last one empty
    batch = BatchKVCache(target.config, rows=4, capacity=8, dtype=target.dtype)    # small: it grows
    for cache in alone:
        batch.add_row(cache)
    assert batch.row_lengths == [3, 9, 1, 0] and batch.width == 9 and batch.active == 4
    for buffer in (*batch.keys, *batch.values):      # loud stale entries past each row's length
        for r, n in enumerate(batch.row_lengths):
            buffer[r, :, n:] = 1e3
    rows = [RowInput([4, 6]), RowInput([2]), RowInput([7, 8, 9], torch.tensor([1, 2, 2]), ancestor_mask((-1, 0, 0))),
            RowInput([5])]
    with torch.no_grad():
        ids, positions, mask = batch.inputs(rows)
        assert mask.shape == (4, 1, 3, 12)
        seen = [[mask[r, 0, i].nonzero().flatten().tolist() for i in range(3)] for r in range(4)]
        assert seen[0] == [[0, 1, 2, 3], [0, 1, 2, 3, 4], [5]]                      # causal; padding: itself
        assert seen[2] == [[0, 1], [0, 1, 2], [0, 1, 3]]                            # its tree's ancestors
        assert seen[3] == [[0], [1], [2]]
        got = target(ids, batch, position_ids=positions, mask=mask).logits
        batch.advance([2, 1, 3, 1])
        assert torch.isfinite(got).all()       # padding queries see themselves, even after an empty row
        for r, (row, cache) in enumerate(zip(rows, alone)):
            past, n = cache.length, len(row.tokens)
            own_mask = None if row.tail is None else with_prefix(past, row.tail)
            want = target(torch.tensor([row.tokens]), cache, position_ids=row.positions, mask=own_mask).logits[0]
            torch.testing.assert_close(got[r, :n], want)
            for layer in range(target.config.num_layers):
                torch.testing.assert_close(batch.keys[layer][r, :, : past + n], cache.keys[layer][0, :, : past + n])
    assert batch.row_lengths == [5, 10, 4, 1] == [c.length for c in alone]

    starts, paths = [3, 10, 2, 1], [[4], [], [3], []]     # each row keeps its prefix and its own path
    batch.keep(starts, paths)
    for cache, start, path in zip(alone, starts, paths):
        cache.keep(start, path)
    assert batch.row_lengths == [4, 10, 3, 1] == [c.length for c in alone]
    for r, cache in enumerate(alone):
        for layer in range(target.config.num_layers):
            torch.testing.assert_close(batch.values[layer][r, :, : cache.length], cache.values[layer][0, :, : cache.length])


def test_rows_crop_move_and_refuse_a_full_batch(models):
    target = models[0]
    alone = _filled(target, [[1, 2, 3, 4], [5, 6], [7, 8, 9]])
    batch = BatchKVCache(target.config, rows=3, dtype=target.dtype)
    views = [batch.add_row(c) for c in alone]
    views[1].crop(1)
    assert [v.length for v in views] == [4, 1, 3]
    with pytest.raises(ValueError, match="cannot crop row 0 of length 4 to 5"):
        views[0].crop(5)
    with pytest.raises(InputError, match="holds 3 rows, all live"):
        batch.add_row(alone[0])
    batch.remove_row(0)                                 # the last row moves into row 0, its view with it
    assert batch.row_lengths == [3, 1] and views[2].index == 0 and views[2].length == 3
    torch.testing.assert_close(batch.keys[0][0, :, :3], alone[2].keys[0][0, :, :3])
    batch.remove_row(1)
    assert batch.row_lengths == [3] and batch.views == [views[2]]


# --- bad input ---------------------------------------------------------------------------------

def _one_line(excinfo, needle):
    text = str(excinfo.value)
    assert needle in text and "\n" not in text, text


def test_bad_batches_and_requests_are_refused_in_one_line(models):
    target, shallow = models
    for batch in (0, -2, 1.5, True):
        with pytest.raises(InputError) as excinfo:
            BatchEngine("ar", target, batch=batch)
        _one_line(excinfo, f"batch must be an integer >= 1, got {batch!r}")
    with pytest.raises(InputError) as excinfo:
        BatchEngine("sd", target, shallow, batch=64, context=4096, cache_budget=2**20)
    _one_line(excinfo, "batch 64 at a context of 4096 tokens needs 256.0 MiB of KV cache, over the cache budget of 1.0 MiB")
    with pytest.raises(InputError) as excinfo:
        BatchEngine("sd", target, shallow, batch=2, mode="graph")
    _one_line(excinfo, "the batch engine runs in eager mode only (runtime.ragged), got mode 'graph'")
    with pytest.raises(InputError) as excinfo:
        BatchEngine("coral", target, batch=2)
    _one_line(excinfo, f"batched decoding takes {', '.join(batched_methods())}; got 'coral'")
    engine = BatchEngine("ar", target, batch=2, context=16)
    with pytest.raises(InputError) as excinfo:
        engine.add("long", list(range(20)), 4)
    _one_line(excinfo, "request 'long': a prompt of 20 tokens and 4 new tokens exceed the context of 16 tokens")
    for prompt, new, needle in (([], 4, "the prompt is empty"), ([1], 0, "max_new_tokens must be an integer >= 1, got 0")):
        with pytest.raises(InputError) as excinfo:
            engine.add("x", prompt, new)
        _one_line(excinfo, needle)
    with pytest.raises(InputError, match="no request to decode"):
        engine.step()
    engine.add("a", [1, 2], 3)
    with pytest.raises(InputError, match="request id 'a' is already queued or decoding"):
        engine.add("a", [1, 2], 3)
    assert set(batched_methods()) >= {"ar", "sd", "prompt_lookup", "mcsd", "cape", "glide"}
    assert not set(batched_methods()) & {"coral", "kangaroo", "lookahead"}
