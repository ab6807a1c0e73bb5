"""Each dataset's prompt and output lengths, with where each number comes from: the context a
decode step of a paper's workload is priced at (prompt + half the new tokens).

Lengths are tokens of a LLaMA-family tokenizer. A number a source states in words is converted at
4/3 tokens per word; a number no source states is marked ASSUMED in its source text.
"""
from __future__ import annotations

TOKENS_PER_WORD = 4.0 / 3.0

# dataset -> (prompt tokens, new tokens, source)
DATASETS: dict[str, tuple[float, float, str]] = {
    "alpaca": (round(9 * TOKENS_PER_WORD), 128,
               "MCSD footnote 4 (9 words per prompt) x 4/3 tokens per word; 128 new tokens (MCSD Sec. 4.1 cap)"),
    "wmt": (round(29 * TOKENS_PER_WORD), 128,
            "MCSD footnote 4 (29 words per prompt) x 4/3 tokens per word; 128 new tokens (MCSD Sec. 4.1 cap)"),
    "cnn": (round(781 * TOKENS_PER_WORD), round(56 * TOKENS_PER_WORD),
            "CNN/DailyMail: articles of 781 words and summaries of 56 on average (See et al., 2017, Sec. 4) "
            "x 4/3 tokens per word"),
    "xsum": (round(431.07 * TOKENS_PER_WORD), round(23.26 * TOKENS_PER_WORD),
             "XSum: documents of 431.07 words and summaries of 23.26 on average (Narayan et al., 2018, Table 1) "
             "x 4/3 tokens per word"),
    "mt-bench": (73, 256,
                 "MT-Bench first-turn prompts with the chat template: 72.67 tokens on the project's bundled prompts "
                 "(data/profiles/smollm2-135m-cpu.json workload); 256 new tokens ASSUMED (answers of a few hundred "
                 "tokens under EAGLE's 1024 cap)"),
    "humaneval": (138, 256,
                  "HumanEval prompts: 138 tokens on the project's bundled prompts (data/profiles/smollm2-135m-cpu.json "
                  "workload); 256 new tokens ASSUMED"),
    "gsm8k": (73, 256, "GSM8K: prompt length ASSUMED = MT-Bench's (no source at hand states it); 256 new tokens "
                       "ASSUMED"),
}


def workload(dataset: str) -> dict[str, float | str]:
    """{"prompt_tokens", "new_tokens", "source"} of `dataset` (case-insensitive); ValueError if unknown."""
    key = dataset.lower()
    if key not in DATASETS:
        raise ValueError(f"no workload lengths for dataset '{dataset}' (known: {', '.join(DATASETS)})")
    prompt, new, source = DATASETS[key]
    return {"prompt_tokens": float(prompt), "new_tokens": float(new), "source": source}


def workloads(datasets, paper: str = "") -> dict[str, dict[str, float | str]]:
    """{dataset (lower case): workload} for a Profile's `workload` field."""
    return {d.lower(): workload(d) for d in datasets}


def workload_sources(datasets) -> list[str]:
    """One provenance line per dataset: where its lengths come from."""
    return [f"workload {d.lower()}: {workload(d)['source']}" for d in datasets]
