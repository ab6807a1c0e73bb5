"""The GPU campaign script: bad input, its configuration list, the pricing of replayed steps, and a
whole --tiny run on the CPU."""
import numpy as np
import pandas as pd
import pytest

from costmodel.cape import PAPER_BINS
from experiments import gpu_campaign as gpu_cli
from campaigns import gpu as gpu_campaign
from traces.schema import read_trace

ISSUE_8_METHODS = {"sd", "mcsd", "cape", "lookahead", "kangaroo", "coral"}


def test_at_least_30_configurations_over_every_issue_8_method():
    labels = [c.label for c in gpu_campaign.CONFIGS]
    assert len(gpu_campaign.CONFIGS) >= 30 and len(set(labels)) == len(labels)
    assert ISSUE_8_METHODS <= {c.method for c in gpu_campaign.CONFIGS}
    assert "coral g4 N16 top2" in labels and "mcsd k4x2x1 repl" in labels


NAMES = {"target": "t", "draft_model": "d", "arch": "a"}
SECONDS = {"t": 0.010, "d": 0.001, "glide@a": 0.002, "kangaroo-l2@a": 0.003, "eagle@a": 0.004,
           "eagle-router16:2@a": 0.0025, "eagle-router32:4@a": 0.0026}


@pytest.fixture(scope="module")
def profile():
    """A campaign Profile whose every model takes SECONDS[model] per forward, whatever the shape."""
    rows = pd.DataFrame([dict(model=m, role="target" if m == "t" else "draft", n_tokens=n, ctx_len=c, batch=1,
                              seconds=s) for m, s in SECONDS.items() for n in (1, 64) for c in (0, 512)])
    rng = np.random.default_rng(0)
    tokens = pd.DataFrame({"draft_rank": rng.integers(0, 9, 400), "draft_conf": rng.uniform(0, 1, 400)})
    acceptance = gpu_campaign.replayed_acceptance(tokens, gpu_campaign.CONFIGS)
    target = {"n_layers": 4, "hidden": 64, "intermediate": 128, "n_heads": 4, "n_kv_heads": 4, "vocab": 256}
    return gpu_campaign.campaign_profile([rows], NAMES, target, "CPU", "fp32", acceptance)


def _steps(forwards, verify, ctx=100):
    return pd.DataFrame({"prompt_id": "p", "step": np.arange(len(forwards)), "ctx_len": ctx, "draft_forwards": forwards,
                         "verify_tokens": verify})


@pytest.mark.parametrize("label,drafter,draft_s,verify_s", [
    ("ar", None, 0.0, 0.010),
    ("sd g4", "draft", 2 * 0.001, 0.010),                       # priced by its realised forwards
    ("mcsd k4x2x1 repl", "draft", 2 * 0.001, 0.010),
    ("cape g4 S88886666442", "draft", 2 * 0.001, 0.010),        # takes the draft model, as the loop ran
    ("glide g3", "glide", 2 * 0.002, 0.010),
    ("lookahead W5 N3 G5", None, 0.0, 0.010),
    ("kangaroo L2 g6 eta0.4", "kangaroo", 2 * 0.003, 0.010 / 2),  # verify runs layers 3..4 of 4
    ("coral g3", "coral", 2 * 0.004, 0.010),
    ("coral g4 N16 top2", "coral-router", 2 * 0.0025, 0.010),
    ("coral g4 N32 top4", "coral-router32:4", 2 * 0.0026, 0.010),
])
def test_replayed_steps_are_priced_by_the_method_step_shape(profile, label, drafter, draft_s, verify_s):
    import methods

    config = methods.parse_label(label)
    setup = gpu_campaign.setup_for(profile, config)
    assert setup.drafter == drafter
    drafted = 2 if drafter else 0
    steps = _steps([drafted, drafted], [3, 5])
    prefill = 0.010
    got = gpu_campaign.predicted_seconds(steps, config, setup, prompt_len=8)
    assert got == pytest.approx(2 * (draft_s + verify_s) + prefill)


def test_a_step_deeper_than_its_shape_is_refused(profile):
    import methods
    from common.errors import InputError

    config = methods.parse_label("sd g2")
    with pytest.raises(InputError, match="3 draft forwards"):
        gpu_campaign.predicted_seconds(_steps([3], [4]), config, gpu_campaign.setup_for(profile, config), 8)


def test_the_replayed_acceptance_has_a_row_for_every_bin_size():
    tokens = pd.DataFrame({"draft_rank": [0, 1, 5], "draft_conf": [0.9, 0.5, 0.1]})
    entry = gpu_campaign.replayed_acceptance(tokens, gpu_campaign.CONFIGS)
    assert set(entry["conf_bins"]["topk_hit"]) == {"1"} | {str(b) for b in PAPER_BINS}


@pytest.mark.parametrize("argv,needle", [
    (["--repeats", "0", "--tiny"], "must be >= 1"),
    (["--device", "cpu"], "needs a GPU"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, capsys, argv, needle):
    assert gpu_cli.main(["--out", str(tmp_path / "o"), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and needle in err and err.count("\n") == 1


@pytest.mark.slow
def test_tiny_campaign_runs_end_to_end(tmp_path):
    out = tmp_path / "campaign"
    code = gpu_cli.main(["--tiny", "--out", str(out), "--max-new-tokens", "8", "--prompts", "1",
                              "--repeats", "2", "--prompt-len", "8"])
    assert code == 0
    latency, meta = read_trace(out / "latency_tiny.parquet", "latency")
    assert {"target", "draft"} <= set(latency.role)
    drafters, _ = read_trace(out / "drafter_latency.parquet", "latency")
    assert {"glide@tiny", "kangaroo-l2@tiny", "eagle@tiny", "eagle-router16:2@tiny"} <= set(drafters.model)
    steps, smeta = read_trace(out / "replayed_steps.parquet", "step")
    assert smeta.extra["mode"] == "replayed acceptance"
    table = pd.read_csv(out / "fidelity.csv")
    assert len(table) == len(gpu_campaign.CONFIGS) + 1           # + the ar baseline
    assert ISSUE_8_METHODS <= set(table.method)
    assert (table.measured_tps > 0).all() and (table.predicted_tps > 0).all() and (table.repeats == 2).all()
    assert "median" in (out / "report.md").read_text()
    coeffs = pd.read_csv(out / "coefficients.csv")
    assert {"layers:1", "glide@tiny", "eagle-router16:2@tiny"} <= set(coeffs.drafter)
    assert (coeffs.c > 0).all() and coeffs.bandwidth_fraction.isna().all()   # tiny is no registry architecture
