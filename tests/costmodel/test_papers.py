"""The papers' numbers as data: spot values against the papers, tags, accessors, internal consistency."""
import math

import pytest

import papers
from costmodel import workloads


@pytest.mark.parametrize("paper,table,row,column,expected", [
    ("glide", "1", "Vicuna-7B / LLAMA-68m", "cost", 7.7),
    ("glide", "1", "Mistral-7B-Ins. / GLIDE", "Code. espd", 1.89),
    ("glide", "3", "Vicuna-33B", "Beam 8", 24.6),
    ("glide", "4", "4", "Vicuna-7B +GLIDE", 116.5),
    ("lookahead", "3", "(8) 5,15,15", "S", 1.96),
    ("lookahead", "fig4b", "setting", "f", 3.106),
    ("kangaroo", "1", "13B / Kangaroo", "Math CR", 2.42),
    ("kangaroo", "2", "Medusa", "params", 591),
    ("mcsd", "1", "LLaMA-160M / Vicuna-33B / T=1", "WMT", 0.25),
    ("mcsd", "2", "LLaMA-68M / LLaMA-33B / WMT / T=0 / Ours", "tau", 2.87),
    ("mcsd", "7", "OPT-125M / OPT-iml-30B / T=0", "WMT alpha@4", 0.77),
    ("coral", "1", "Qwen2.5-7B", "L_d", 2.69),
    ("coral", "2", "L3-8B / CORAL w/ r.", "Average T=0 SR", 2.87),
    ("coral", "4", "CORAL N=16", "top2", 2.63),
    ("mistral", "1", "n_kv_heads", "value", 8),
])
def test_spot_values(paper, table, row, column, expected):
    assert papers.value(paper, table, row, column) == expected


def test_every_record_is_tagged_and_every_table_requested_exists():
    for r in papers.records():
        assert r.paper and r.table and r.row and r.column
        assert math.isnan(r.value) == bool(r.note.startswith(("out of memory", "no entry")))
    wanted = {"glide": {"1", "3", "4"}, "lookahead": {"3", "4", "fig4b"}, "kangaroo": {"1", "2"},
              "mcsd": {"1", "2", "3", "4", "7"}, "coral": {"1", "2", "3", "4", "5"}, "mistral": {"1"}}
    for paper, keys in wanted.items():
        assert keys <= set(papers.tables(paper))


def test_oom_cells_are_nan_with_a_note_and_dropped_from_table():
    rec = papers.records("glide", "4", "32", "Vicuna-7B Only")[0]
    assert math.isnan(rec.value) and "OOM" in rec.note
    assert "32" not in papers.table("glide", "4")


def test_internal_consistency_of_coral_table1_and_lookahead_table4():
    t1 = papers.table("coral", "1")
    # The paper prints W_d/W_t and L_d/L_t percentages; the stored counts must reproduce them.
    for model, pct_w, pct_l in [("Llama2-7B", 5.6, 5.8), ("Llama3-8B", 10.4, 9.9), ("Qwen2.5-7B", 11.4, 10.9)]:
        assert 100 * t1[model]["W_d"] / t1[model]["W_t"] == pytest.approx(pct_w, abs=0.05)
        assert 100 * t1[model]["L_d"] / t1[model]["L_t"] == pytest.approx(pct_l, abs=0.05)
    for row in papers.table("lookahead", "4").values():
        assert row["W"] == row["G"]


def test_k_configs_are_read_back_and_accessor_errors_are_clear():
    rows = papers.records("mcsd", "3", column="tau")
    assert papers.k_config(rows[2]) == "4x2x2x1"
    assert papers.k_config(papers.records("mcsd", "2", column="tau")[0]) is None
    with pytest.raises(ValueError, match="unknown paper 'nope'"):
        papers.records("nope")
    with pytest.raises(ValueError, match="no single value"):
        papers.value("glide", "1", "Vicuna-7B / GLIDE", "nope")
    assert papers.to_rows(papers.records("mistral"))[0]["paper"] == "mistral"


def test_workloads_state_lengths_with_their_source():
    cnn = workloads.workload("CNN")
    assert cnn["prompt_tokens"] == round(781 * 4 / 3) and "See et al." in cnn["source"]
    assert set(workloads.workloads(["alpaca", "wmt"])) == {"alpaca", "wmt"}
    assert all(line.startswith("workload ") for line in workloads.workload_sources(["xsum", "mt-bench"]))
    with pytest.raises(ValueError, match="no workload lengths for dataset 'nope'"):
        workloads.workload("nope")
