"""calibrate.fit_acceptance and the calibrate.fit CLI against synthetic traces from known parameters."""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import beta as beta_dist

from calibrate import fit as fit_cli
import methods
from calibrate.fit_acceptance import fit_step_acceptance, fit_token_acceptance
from profiles.latency import RooflineLatency
from profiles.machine import Machine
from profiles.profile import Profile
from calibrate.synthetic import (
    synthetic_chain_steps, synthetic_latency_trace, synthetic_ngram_steps, synthetic_token_trace,
)
from costmodel.params import arch_dict
from common.errors import InputError
from traces.schema import read_trace, write_trace

P_AA, P_RA, RATIO = 0.8, 0.4, 0.7
HIT_CONF, MISS_CONF = (5.0, 1.5), (1.5, 3.0)


def _sigma(p, n):
    return np.sqrt(p * (1 - p) / n)


@pytest.fixture(scope="module")
def tokens():
    frame, meta = synthetic_token_trace(P_AA, P_RA, RATIO, n_prompts=40, length=500, seed=11,
                                        hit_conf=HIT_CONF, miss_conf=MISS_CONF)
    return frame, meta, fit_token_acceptance(frame, drafter="d", dataset="x", gamma=6)


def test_token_fit_recovers_markov_and_alpha_at_k(tokens):
    frame, _, entry = tokens
    n = entry["markov"]["n_transitions"]
    alpha = P_RA / (1 - P_AA + P_RA)
    # conditional proportions over ~n * alpha and ~n * (1 - alpha) transitions
    assert abs(entry["markov"]["p_aa"] - P_AA) < 4 * _sigma(P_AA, n * alpha)
    assert abs(entry["markov"]["p_ra"] - P_RA) < 4 * _sigma(P_RA, n * (1 - alpha))
    # positively correlated draws: widen the alpha tolerance by sqrt((1 + rho) / (1 - rho)), rho = p_aa - p_ra
    inflate = np.sqrt((1 + P_AA - P_RA) / (1 - P_AA + P_RA))
    for k in (1, 2, 4, 8):
        expected = 1 - (1 - alpha) * RATIO ** (k - 1)
        assert abs(entry["alpha_at_k"][str(k)] - expected) < 4 * inflate * _sigma(expected, len(frame)), k


def _markov_beta_1(gamma: int) -> float:
    """beta_1 of greedy chains of `gamma` under the generating chain. A step follows a miss (its
    correction token) or a fully accepted step, whose bonus token was a drafter hit with p_aa.
    Over steps, the share pi of starts preceded by a hit solves
    pi = (pi p_aa^gamma + (1 - pi) p_ra p_aa^(gamma - 1)) p_aa, and beta_1 = pi p_aa + (1 - pi) p_ra."""
    a, b = P_AA ** (gamma + 1), P_RA * P_AA ** gamma
    pi = b / (1 - a + b)
    return pi * P_AA + (1 - pi) * P_RA


def test_token_fit_per_position_follows_the_markov_chain(tokens):
    """Replayed greedy chain steps (gamma 6): beta_1 as the chain gives it; once a position hits,
    the next hits with p_aa."""
    frame, _, entry = tokens
    beta_1 = _markov_beta_1(6)
    betas = entry["alpha_by_position"]
    steps = len(frame) / (1 + np.sum(np.cumprod(betas)))       # tokens / mean accepted length
    assert abs(betas[0] - beta_1) < 4 * _sigma(beta_1, steps)
    assert np.all(np.abs(np.array(betas[1:4]) - P_AA) < 4 * _sigma(P_AA, steps * beta_1 * P_AA ** np.arange(3)))


def test_token_fit_measures_each_draft_length_in_chains_of_its_own(tokens):
    """Short chains start on a streak more often (the bonus token of a full chain was a hit with
    p_aa): beta_1 falls from gamma 1 to 6 as the chain gives it, each gamma's chains measured
    apart, and the closed form of a chain of 1 prices it with its own."""
    from profiles.acceptance import AcceptanceModel
    from methods.sd import chain_tokens

    frame, _, entry = tokens
    by_gamma = entry["alpha_by_position_at_gamma"]
    assert sorted(map(int, by_gamma)) == list(range(1, 7)) and by_gamma["6"] == entry["alpha_by_position"]
    first = np.array([by_gamma[str(g)][0] for g in range(1, 7)])
    expected = np.array([_markov_beta_1(g) for g in range(1, 7)])
    assert expected[0] - expected[-1] > 0.1                      # the effect is large here, not noise
    assert np.all(np.abs(first - expected) < 4 * _sigma(expected, len(frame) / 2))
    setup = type("Setup", (), {"acceptance": AcceptanceModel.from_dict(entry), "new_tokens": None})
    tokens_1, tokens_6 = chain_tokens(setup, np.array([1, 6]))
    assert tokens_1 == pytest.approx(1 + by_gamma["1"][0])
    assert tokens_6 == pytest.approx(1 + np.sum(np.cumprod(by_gamma["6"])))


def test_token_fit_conf_bins_match_the_generating_mixture(tokens):
    frame, _, entry = tokens
    alpha = P_RA / (1 - P_AA + P_RA)
    edges = np.linspace(0, 1, 11)
    hit_mass = alpha * np.diff(beta_dist(*HIT_CONF).cdf(edges))
    miss_mass = (1 - alpha) * np.diff(beta_dist(*MISS_CONF).cdf(edges))
    expected_top1 = hit_mass / (hit_mass + miss_mass)
    counts = np.array(entry["conf_bins"]["counts"][:10])
    got = np.array(entry["conf_bins"]["topk_hit"]["1"][:10])
    inflate = np.sqrt((1 + P_AA - P_RA) / (1 - P_AA + P_RA))
    well = counts > 200
    assert well.sum() >= 6
    assert np.all(np.abs(got - expected_top1)[well] < 4 * inflate * _sigma(expected_top1, counts)[well] + 1e-9)
    assert sum(entry["conf_bins"]["freq"]) == pytest.approx(1.0)


def test_step_fit_recovers_per_position_betas():
    betas = [0.9, 0.8, 0.7, 0.6]
    frame, _ = synthetic_chain_steps(betas, n_steps=8000, seed=5)
    entry = fit_step_acceptance(frame)
    reached = 8000 * np.concatenate([[1], np.cumprod(betas)[:-1]])
    assert np.all(np.abs(np.array(entry["alpha_by_position"]) - betas) < 4 * _sigma(np.array(betas), reached))
    assert entry["conf_bins"]["topk_hit"]["1"][9] > entry["conf_bins"]["topk_hit"]["1"][1]


def test_step_fit_keeps_each_chain_lengths_own_betas():
    """Chains of one draft and of four, fitted together (experiments.smollm2_cpu's GLIDE and CORAL
    chains): each length's betas are its own, and a chain of one is priced by them."""
    from profiles.acceptance import AcceptanceModel

    one, _ = synthetic_chain_steps([0.5], n_steps=8000, seed=1)
    four, _ = synthetic_chain_steps([0.3, 0.6, 0.7, 0.8], n_steps=8000, seed=2)
    entry = fit_step_acceptance(pd.concat([one, four], ignore_index=True))
    at_gamma = entry["alpha_by_position_at_gamma"]
    assert sorted(at_gamma) == ["1", "4"] and entry["alpha_by_position"] == at_gamma["4"]
    assert at_gamma["1"][0] == pytest.approx(0.5, abs=4 * _sigma(0.5, 8000))
    assert at_gamma["4"][0] == pytest.approx(0.3, abs=4 * _sigma(0.3, 8000))
    model = AcceptanceModel.from_dict(entry, name="chains")
    assert model.beta(1)[0] == pytest.approx(at_gamma["1"][0]) and model.beta(4).tolist() == at_gamma["4"]
    assert "alpha_by_position_at_gamma" not in fit_step_acceptance(four)      # one length: nothing to tell apart
    assert entry["fit"]["n_prompts"] == 1


@pytest.mark.parametrize("spread", [0, 1])
def test_lookahead_fit_recovers_the_pool_growth(spread):
    truth = {"alpha": 0.45, "alpha_next": 0.7, "spread": spread, "hit": 0.5, "fill": 25.0, "pool": 1.2}
    configs = [methods.parse_label(f"lookahead W{w} N{n} G{g}") for w, n, g in
               ((1, 3, 2), (2, 5, 4), (5, 3, 5), (7, 4, 7), (10, 6, 3))]
    frame, _ = synthetic_ngram_steps(truth, configs, prompts=80, steps=40, seed=8)
    spec = methods.get("lookahead")
    fitted = spec.fit_steps(frame, dataset="d", temperature=0.0, source="synthetic")[spec.name]
    assert fitted["alpha"] == pytest.approx(0.45, abs=0.03)
    assert fitted["alpha_next"] == pytest.approx(0.7, abs=0.05)
    assert fitted["spread"] == pytest.approx(spread, abs=0.25)
    assert fitted["hit"] == pytest.approx(0.5, abs=0.04)
    assert fitted["fill"] == pytest.approx(25.0, rel=0.25)
    assert fitted["pool"] == pytest.approx(1.2, rel=0.1)
    with pytest.raises(InputError, match="two or more"):
        spec.fit_steps(frame[frame["config"] == frame["config"].iloc[0]], dataset="d", temperature=0.0, source="s")
    assert methods.get("sd").fit_steps(frame, dataset="d", temperature=0.0, source="s") is None


def _write_traces(tmp_path):
    truth = RooflineLatency(arch=arch_dict("vicuna-7b"), hardware="A100-80G", dtype="fp16",
                            bw_eff=0.72, flops_eff=0.55, overhead_s=0.004)
    latency, meta = synthetic_latency_trace(truth, noise=0.005, seed=1, model_name="vicuna-7b", hardware="A100-80G")
    write_trace(tmp_path / "lat.parquet", latency, meta)
    tokens, tmeta = synthetic_token_trace(P_AA, P_RA, RATIO, n_prompts=5, length=200, seed=2)
    tmeta.models, tmeta.dataset = {"target": "vicuna-7b", "draft": "llama-68m"}, "mt-bench"
    write_trace(tmp_path / "tok.parquet", tokens, tmeta)
    steps, smeta = synthetic_chain_steps([0.8, 0.7], n_steps=500, seed=3)
    smeta.models, smeta.dataset = {"draft": "llama-68m"}, "mt-bench"
    write_trace(tmp_path / "steps.parquet", steps, smeta)


def test_fit_cli_writes_a_profile_with_provenance(tmp_path, capsys):
    _write_traces(tmp_path)
    out = tmp_path / "profile.json"
    code = fit_cli.main(["--out", str(out), "--name", "synthetic", "--target", "vicuna-7b",
                         "--latency", str(tmp_path / "lat.parquet"), "--tokens", str(tmp_path / "tok.parquet"),
                         "--steps", str(tmp_path / "steps.parquet")])
    assert code == 0
    profile = Profile.load(out)
    model = profile.latency["vicuna-7b"]
    assert model.bw_eff == pytest.approx(0.72, rel=0.01) and model.flops_eff == pytest.approx(0.55, rel=0.01)
    assert model.fit["mape_heldout"] < 2.0
    assert set(profile.acceptance) == {"llama-68m/mt-bench/T0", "llama-68m/mt-bench/T0/steps"}
    assert len(profile.provenance.details["traces"]) == 3 and profile.provenance.created
    assert "held-out" in capsys.readouterr().out


def test_the_profile_records_the_machine_its_latency_was_timed_on(tmp_path, capsys):
    """A latency trace that says where it was timed gives the Profile its machine; two machines are refused."""
    _write_traces(tmp_path)
    frame, meta = read_trace(tmp_path / "lat.parquet", kind="latency")
    here = Machine(cpu="AMD EPYC", isa=("avx2",), cores=2, threads=2, torch="2.13.0", blas="MKL")
    for name, machine in (("a.parquet", here), ("b.parquet", replace(here, cpu="Intel Xeon"))):
        write_trace(tmp_path / name, frame, replace(meta, extra={**meta.extra, "machine": machine.to_dict()}))
    argv = ["--out", str(tmp_path / "p.json"), "--target", "vicuna-7b", "--overwrite", "--latency"]
    assert fit_cli.main([*argv, str(tmp_path / "a.parquet")]) == 0
    assert Profile.load(tmp_path / "p.json").machine == here
    assert fit_cli.main([*argv, str(tmp_path / "lat.parquet")]) == 0      # a trace from before: its hardware's name
    assert Profile.load(tmp_path / "p.json").machine == Machine(datasheet="A100-80G")
    capsys.readouterr()
    assert fit_cli.main([*argv, str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet")]) == 2
    err = capsys.readouterr().err
    assert "timed on different machines (cpu: AMD EPYC vs Intel Xeon)" in err and err.count("\n") == 1


@pytest.mark.parametrize("argv,message", [
    (["--tokens", "missing.parquet"], "trace file not found"),
    ([], "no trace files given"),
    (["--latency", "{lat}", "--latency-kind", "roofline", "--arch", "vicuna-7b=nonsense"], "--arch vicuna-7b=nonsense"),
    (["--latency", "{lat}", "--gamma", "0"], "--gamma must be >= 1"),
    (["--tokens", "{tok}"], "--target 'vicuna-7b' has no latency model: the latency traces measured nothing"),
])
def test_fit_cli_bad_input_is_one_line_exit_2(tmp_path, capsys, argv, message):
    _write_traces(tmp_path)
    argv = [a.replace("{lat}", str(tmp_path / "lat.parquet")).replace("{tok}", str(tmp_path / "tok.parquet")) for a in argv]
    code = fit_cli.main(["--out", str(tmp_path / "p.json"), "--target", "vicuna-7b", *argv])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1


def _write_lookahead_files(tmp_path, prompts=40):
    """A lookahead StepTrace per configuration (one file each, as a campaign writes them), with prompt ids."""
    truth = {"alpha": 0.45, "alpha_next": 0.7, "spread": 1, "hit": 0.5, "fill": 25.0, "pool": 1.2}
    paths = []
    for i, (w, n, g) in enumerate(((1, 2, 1), (5, 3, 5), (7, 4, 7))):
        frame, meta = synthetic_ngram_steps(truth, [methods.parse_label(f"lookahead W{w} N{n} G{g}")], prompts=prompts,
                                            steps=40, seed=20 + i)
        meta.dataset = "mt-bench"
        paths.append(tmp_path / f"steps_lookahead_{i}.parquet")
        write_trace(paths[-1], frame.assign(prompt_id="mtbench/" + frame["prompt_id"].str[1:]), meta)
    return paths


def test_a_methods_steps_in_several_files_make_one_fit(tmp_path):
    """Lookahead's pool needs two or more configurations: one file per configuration fits as one
    trace of them all, not file by file (each one alone is refused, and would replace the last)."""
    paths = _write_lookahead_files(tmp_path)
    acceptance, drafters = fit_cli.fit_acceptance_files([], paths, 4, [])
    entry = acceptance["lookahead/mt-bench"]
    assert {(c["W"], c["N"], c["G"]) for c in entry["fit"]["configs"]} == {(1, 2, 1), (5, 3, 5), (7, 4, 7)}
    assert entry["lookahead"]["hit"] == pytest.approx(0.5, abs=0.06)
    assert drafters == {"lookahead": {"kind": "lookahead"}}


def test_refitting_over_a_base_keeps_the_base_and_adds_the_traces_prompts(tmp_path):
    """`--base` with step traces alone: the fitted entries replace the base's, everything else of the
    base (name, engine, workload, machine, its calibration prompts) is kept, the traces' prompts join
    the calibration prompts and the refit is recorded in the provenance."""
    base_path = Path("data/profiles/smollm2-135m-cpu.json")
    base = Profile.load(base_path)
    paths = _write_lookahead_files(tmp_path, prompts=12)
    out = tmp_path / "refit.json"
    assert fit_cli.main(["--out", str(out), "--base", str(base_path), "--steps", *map(str, paths)]) == 0
    refit = Profile.load(out)
    assert refit.name == base.name and refit.engine == base.engine and refit.workload == base.workload
    assert refit.machine == base.machine and refit.latency.keys() == base.latency.keys()
    assert refit.acceptance_model("lookahead/mt-bench") != base.acceptance_model("lookahead/mt-bench")
    assert {k for k in base.acceptance if k != "lookahead/mt-bench"} <= set(refit.acceptance)
    calibrated = refit.provenance.calibration_prompts
    assert calibrated[:len(base.provenance.calibration_prompts)] == base.provenance.calibration_prompts
    assert {f"mtbench/{i}" for i in range(12)} <= set(calibrated)
    record = refit.provenance.details[fit_cli.REFITS][-1]
    assert list(record["entries"]) == ["lookahead/mt-bench"] and len(record["traces"]) == 3


def test_a_token_trace_of_the_wrong_kind_is_refused(tmp_path):
    _write_traces(tmp_path)
    with pytest.raises(InputError, match="holds a latency trace, expected a token trace"):
        fit_cli.fit_acceptance_files([tmp_path / "lat.parquet"], [], 4, [])


def test_a_fitted_trace_prices_one_chain_alike_and_its_trees_near_their_replay(tokens):
    """On a greedy TokenTrace's fit, a chain of one draft is one configuration whichever method
    names it (sd g1, mcsd k1, cape g1 with one candidate per bin), chains of any length are their
    exact replay, and the simulator follows the closed form. Trees and CAPE's expansion sets stay
    within 5% of the replay on this strongly streaky trace (p_aa 0.8, p_ra 0.4): a catch by a
    lower-ranked candidate is a miss of the top-1 chain, after which the trace goes on at p_ra,
    and a CAPE step that ends on a catch starts the next one a token later than a chain would."""
    from methods.spec import Setup
    from methods.replay import TokenTable
    from simulator.stream import simulate_stream
    from tests.simulator.fixtures import _ALL, FIXED
    from traces.replay import replay_summary

    frame, _, entry = tokens
    profile = Profile.from_dict({**_ALL, "drafters": {"D": _ALL["drafters"]["D"]}, "acceptance": {"D": entry}})
    setup = Setup(profile, "D", "D")

    def closed(label):
        spec = methods.get(label.split()[0])
        return float(np.asarray(spec.expected_tokens(setup, spec.frame_of([spec.parse(label)])))[0])

    one = [closed(label) for label in ("sd g1", "mcsd k1 repl", "cape g1 S11111111111")]
    assert one == pytest.approx([1 + entry["alpha_by_position_at_gamma"]["1"][0]] * 3)
    table = TokenTable.from_frame(frame)
    for label, within in (("sd g1", 0.002), ("sd g4", 0.002), ("mcsd k1x1x1 repl", 0.002), ("mcsd k2 repl", 0.015),
                          ("mcsd k2x1 repl", 0.05), ("mcsd k4x2x1 repl", 0.05), ("cape g2 S88884444222", 0.05),
                          ("cape g3 S22211111111", 0.05)):
        replayed = float(replay_summary(table, label.split()[0], [label])["mean_accepted"].iloc[0])
        assert closed(label) == pytest.approx(replayed, rel=within), label
    config = methods.get("cape").parse("cape g3 S22211111111").to_dict()
    simulated = simulate_stream(profile, "cape", {**config, "drafter": "D", "acceptance": "D"}, n_tokens=20000,
                                seed=0, latencies=FIXED).summary["tokens_per_step"]
    assert simulated == pytest.approx(closed("cape g3 S22211111111"), rel=0.02)


def test_chains_fill_only_the_lengths_an_entry_never_recorded():
    """A Profile entry with chains of 1 and 4 (GLIDE's: 4 from two prompts) takes chains of 3 from
    another recording of its drafter, keeps its own 1 and 4, and beta(2) then reads the chains of 3;
    a tree, CAPE's bins or a chain cut short are not chains of their gamma."""
    from calibrate.fit_acceptance import chain_steps, with_chains
    from profiles.acceptance import AcceptanceModel

    entry = {"drafter": "d", "temperature": 0.0, "dataset": "x", "alpha": 0.4, "alpha_by_position": [0.5, 0.6, 0.7, 0.8],
             "alpha_by_position_at_gamma": {"1": [0.4], "4": [0.5, 0.6, 0.7, 0.8]}, "source": "base", "fit": {"n_steps": 10}}
    three, _ = synthetic_chain_steps([0.3, 0.4, 0.5], n_steps=6000, seed=3)
    one, _ = synthetic_chain_steps([0.9], n_steps=500, seed=4)
    tree = three.head(50).assign(verify_tokens=7)                          # a tree of gamma 3 verifies 7
    binned = three.head(50).assign(config='{"bins": [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1], "gamma": 3}')
    rows = pd.concat([three, one, tree, binned], ignore_index=True)
    assert chain_steps(rows).sum() == len(three) + len(one)
    out = with_chains(entry, rows, "the other recording")
    assert sorted(out["alpha_by_position_at_gamma"], key=int) == ["1", "3", "4"]
    assert out["alpha_by_position_at_gamma"]["1"] == [0.4] and out["alpha_by_position_at_gamma"]["4"] == [0.5, 0.6, 0.7, 0.8]
    assert np.allclose(out["alpha_by_position_at_gamma"]["3"], [0.3, 0.4, 0.5], atol=4 * _sigma(0.3, 1000))
    assert out["fit"]["chains_added"] == {"3": 6000} and out["source"] == "base; chains of 3 from the other recording"
    model = AcceptanceModel.from_dict(out, name="d")
    assert model.beta(2).tolist() == out["alpha_by_position_at_gamma"]["3"][:2]
    assert with_chains(entry, one, "again") is entry                        # nothing it lacks: unchanged
