"""calibrate.quick: the points it times again lie inside what the Profile's table measured, and a Profile of
the continuous-batching engine has its engine terms timed through that engine."""
import dataclasses
import itertools
from types import SimpleNamespace

import numpy as np
import pytest

from calibrate import quick
from profiles.profile import Profile

SINGLE = "data/profiles/smollm2-135m-cpu.json"
BATCH32 = "data/profiles/batch/smollm2-135m-cpu-batch32.json"
DRAFTERS = "data/profiles/batch/smollm2-135m-cpu-batch-drafters.json"   # its plain step pays seconds beside the forward


def test_the_quick_grid_stays_inside_the_table_it_is_set_against():
    single = Profile.load(SINGLE).latency_model("smollm2-135m")
    assert quick.quick_grid(single) == (quick.QUICK_TOKENS, quick.QUICK_CTX)      # a wide table: the grid as it is
    batch = Profile.load(BATCH32).latency_model("smollm2-135m")                    # 1-12 tokens, 128-512 context
    assert quick.quick_grid(batch) == ((1, 2, 4, 8, 12), (128, 512))


def test_each_point_of_the_target_is_the_median_of_its_rounds(monkeypatch):
    profile = Profile.load(SINGLE)
    table = profile.latency_model(profile.target)
    readings = itertools.chain([1.4, 1.0, 0.9], itertools.repeat(1.0))   # three rounds, the first an outlier;
                                                                            # then the batch grid
    def timed(model, grid, timer, seed, cache_kind):
        level = next(readings)
        return [{"n_tokens": n, "ctx_len": c, "batch": b, "seconds": level * float(table.predict(n, c, b)),
                 "repeats": 7}
                for b in grid.batch for c in grid.ctx for n in grid.tokens]

    monkeypatch.setattr(quick, "profile_model", timed)
    monkeypatch.setattr(quick, "QUICK_ROUNDS", 3)
    correction = quick.target_correction(profile, None, None, 0)
    assert correction.ratio == pytest.approx(np.ones((len(quick.QUICK_TOKENS), len(quick.QUICK_CTX))))


def test_each_drafter_is_timed_inside_the_contexts_its_table_measured(monkeypatch):
    """The drafters Profile's GLIDE table measured contexts 128-512: its forward is timed there, not at
    QUICK_CTX (0 and 1024, an extrapolation of the table the ratio would be set against)."""
    profile = Profile.load(DRAFTERS)
    timed = {}

    def rows(target, ctx, timer, device, dtype, seed, entries):
        timed.update({entry["model"]: tuple(ctx) for entry in entries.values()})
        return [{"model": entry["model"], "ctx_len": c, "seconds": 2 * float(profile.latency_model(entry["model"])
                                                                                .predict(1, c, 1))}
                for entry in entries.values() for c in ctx]

    monkeypatch.setattr(quick, "drafter_rows", rows)
    assert quick.drafter_ratios(profile, None, 0) == {"glide@smollm2-135m": pytest.approx(2.0)}
    assert timed == {"glide@smollm2-135m": (128, 512)}


class _Step(SimpleNamespace):
    pass


def _steps(seconds: float, ctx: int, rows: bool):
    row = SimpleNamespace(ctx_len=ctx)
    return [_Step(draft_s=0.0, verify_s=seconds, overhead_s=0.0, ctx_len=ctx, rows=[row]) for _ in range(5)]


@pytest.mark.parametrize("path, engine", [(DRAFTERS, "batch"), (SINGLE, "single")])
def test_the_engine_is_timed_through_the_engine_the_profile_describes(monkeypatch, path, engine):
    profile = Profile.load(path)
    used = []

    class Batch:
        def __init__(self, method, model, **options):
            used.append(("batch", options["batch"]))

        def generate(self, prompts, n):
            return SimpleNamespace(steps=_steps(0.2, 100, True))

    class Single:
        def generate(self, prompt, n):
            return SimpleNamespace(steps=_steps(0.2, 100, False))

    monkeypatch.setattr(quick, "BatchEngine", Batch)
    monkeypatch.setattr(quick, "make_decoder", lambda *a, **k: used.append(("single", 1)) or Single())
    identity = quick.Correction((1.0,), (0.0,), np.array([[1.0]]))
    model = SimpleNamespace(config=SimpleNamespace(vocab_size=50))
    ratio = quick.engine_ratio(profile, model, identity, seed=0)
    assert {kind for kind, _ in used} == {engine} and all(rows == 1 for _, rows in used)
    terms = profile.step_calibration("ar")
    beside = 0.2 - terms.verify_scale * float(profile.seconds(profile.target, 1, 100))
    additive = sum(getattr(terms, name) for name in quick.PLAIN_STEP)
    home = terms.verify_scale * float(profile.seconds(profile.target, 1, 100)) + additive
    if engine == "single":        # its plain step adds 0.24 ms to a 32 ms forward: nothing to read a ratio off
        assert additive < quick.ENGINE_MIN_SHARE * home and ratio == 1.0
        monkeypatch.setattr(quick, "ENGINE_MIN_SHARE", 0.0)
        ratio = quick.engine_ratio(profile, model, identity, seed=0)
        assert ratio > 20          # what the ratio would read: every additive term of every method times it
    assert ratio == pytest.approx(beside / additive)


def test_the_moved_engine_keeps_how_it_batches_and_scales_its_prefill_apart():
    terms = Profile.load(BATCH32).engine
    moved = quick.moved_engine(terms, 2.0, 0.5)
    assert moved.batching == terms.batching == "padded" and moved.fit == terms.fit
    before, after = terms.calibration("ar"), moved.calibration("ar")
    assert after.verify_fixed_s == pytest.approx(2.0 * before.verify_fixed_s)
    assert after.verify_per_row_s == pytest.approx(2.0 * before.verify_per_row_s)
    assert after.prefill_per_token_s == pytest.approx(0.5 * before.prefill_per_token_s)
    assert after.verify_scale == before.verify_scale                       # scales are ratios to a forward: kept
    assert quick.moved_engine(terms, 2.0, None).calibration("ar").prefill_per_token_s == before.prefill_per_token_s


def test_a_batched_correction_scales_each_batch_by_its_own_factor():
    table = Profile.load(BATCH32).latency_model("smollm2-135m")
    correction = quick.Correction((1.0, 12.0), (128.0, 512.0), np.full((2, 2), 1.5), (1.0, 8.0, 32.0), (1.0,),
                                  np.array([[1.0], [1.2], [1.4]]))
    moved = quick.corrected(table, correction)
    factor = np.asarray(moved.seconds) / np.asarray(table.seconds)
    batches = list(np.asarray(table.batch, float))
    assert factor[:, :, batches.index(1.0)] == pytest.approx(1.5)
    assert factor[:, :, batches.index(8.0)] == pytest.approx(1.5 * 1.2)
    assert factor[:, :, batches.index(32.0)] == pytest.approx(1.5 * 1.4)
    assert factor[:, :, batches.index(2.0)] == pytest.approx(1.5 * (1.0 + 0.2 / 3))    # a third of the way in log2


def test_a_batched_correction_moves_each_width_at_a_batch_by_its_own_factor():
    """At 32 rows a 2-token verify's cost moves by another factor than one token's: the factor is read
    per (batch, width), bilinear in log2 of both, held past the widths timed."""
    table = Profile.load(BATCH32).latency_model("smollm2-135m")
    correction = quick.Correction((1.0, 12.0), (128.0, 512.0), np.full((2, 2), 1.0), (1.0, 32.0), (1.0, 4.0),
                                  np.array([[1.0, 1.0], [0.8, 1.2]]))
    factor = np.asarray(quick.corrected(table, correction).seconds) / np.asarray(table.seconds)
    widths, batches = list(np.asarray(table.n_tokens, float)), list(np.asarray(table.batch, float))
    at32 = factor[:, :, batches.index(32.0)]
    assert at32[widths.index(1.0)] == pytest.approx(0.8) and at32[widths.index(4.0)] == pytest.approx(1.2)
    assert at32[widths.index(2.0)] == pytest.approx(1.0)                  # half way in log2 tokens
    assert at32[widths.index(12.0)] == pytest.approx(1.2)                 # past the widest timed: its factor
    assert factor[widths.index(4.0), :, batches.index(2.0)] == pytest.approx(1.0 + 0.2 / 5)   # a fifth of log2 32
    assert correction.at_batch([1.0, 32.0], [4.0, 1.0]) == pytest.approx([1.0, 0.8])


def test_a_profile_of_this_very_machine_gets_a_note_and_another_machines_none():
    profile = Profile.load(DRAFTERS)
    note = quick.same_machine_note(profile, profile.machine, "P.json")
    assert note.startswith("note: P.json was measured on this machine") and "\n" not in note
    elsewhere = dataclasses.replace(profile.machine, cores=profile.machine.cores + 1)
    assert quick.same_machine_note(profile, elsewhere, "P.json") == ""
