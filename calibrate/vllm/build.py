"""The vLLM deployment Profile: Llama-3.1-8B-Instruct with EAGLE-3 and vLLM's n-gram proposer on one
H100 SXM under vLLM 0.10.1 with CUDA graphs (schema 2), from the pieces of `calibrate.vllm`.

Models and latency: the target and the EAGLE-3 drafter from their architectures (`calibrate.vllm.engine`)
on the H100's datasheet at the grid's efficiencies (`calibrate.vllm.grid`); engine terms per method
(`ar`, `coral` for EAGLE, `prompt_lookup` for n-gram); acceptance entries per dataset for both drafters
(`calibrate.vllm.acceptance`); each dataset's prompt and output lengths; the machine is the datasheet;
provenance names every source, the study's step-time fit (`calibrate.vllm.study_fit`) beside ours, and
every fitted term's bound or warning.
"""
from __future__ import annotations

import json
from pathlib import Path

from calibrate.vllm import facts
from calibrate.vllm.acceptance import eagle_entry, ngram_entry
from calibrate.vllm.engine import DTYPE, EngineFit, eagle_arch, fit_engine, target_arch
from calibrate.vllm.grid import GRID, GridFit, fit_grid
from calibrate.vllm.streams import Stream, data_files, read_streams
from calibrate.vllm.study_fit import STUDY_FIT
from common.bundled import bundled
from common.errors import InputError
from common.rundir import git_commit
from profiles.profile import Profile

NAME = "llama-3.1-8b + EAGLE-3 / n-gram on H100 SXM (vLLM 0.10.1, CUDA graphs)"
INGESTED = "specdecode_bench/llama-3.1-8b.json"


def ingested_statistics() -> dict:
    """The ingest's statistics of the four files (data/specdecode_bench/llama-3.1-8b.json)."""
    path = bundled(*INGESTED.split("/"))
    return json.loads(Path(path).read_text(encoding="utf-8"))


def build_profile(streams: dict[str, Stream], grid: GridFit, engine: EngineFit, statistics: dict) -> Profile:
    """The Profile (module docstring) from its fitted parts and the study's streams."""
    acceptance, workload = {}, {}
    for dataset, stream in streams.items():
        summary = statistics["datasets"].get(dataset)
        if summary is None:
            raise InputError(f"the ingest's statistics ({INGESTED}) hold no dataset '{dataset}'")
        acceptance[f"eagle3/{dataset}"] = eagle_entry(dataset, summary)
        acceptance[f"prompt_lookup/{dataset}"] = ngram_entry(stream)
        workload[dataset] = {"prompt_tokens": summary["prompt_len"]["mean"], "new_tokens": summary["output_len"]["mean"],
                             "source": f"SpecDecode-Bench {stream.file} (sha256 {stream.sha256[:12]})"}
    warnings = [*grid.warnings, *engine.warnings]
    provenance = {
        "built_by": "python -m calibrate.vllm", "commit": git_commit(), "calibration_prompts": [],
        "latency_fit": {"grid": grid.to_dict(), "engine": engine.record, "warnings": warnings},
        "engine": {"vllm": facts.VLLM_VERSION, "max_batched_tokens": facts.MAX_BATCHED_TOKENS,
                   "max_num_seqs": facts.MAX_NUM_SEQS, "block_tokens": facts.BLOCK_TOKENS,
                   "gpu_memory_utilization": facts.GPU_MEMORY_UTILIZATION, "graph_sizes": list(facts.GRAPH_SIZES),
                   "ngram_window": list(facts.NGRAM_WINDOW), "sources": facts.SCHEDULER_SOURCES},
        "second_calibration": STUDY_FIT.to_dict(),
        "sources": [facts.DATASHEET, facts.TARGET_SOURCE, facts.EAGLE_SOURCE, facts.NGRAM_SOURCE,
                    facts.EAGLE_SWEEP.source, facts.OFFLINE_BS1_TOK_S[1], facts.KV_CACHE_CHECK[2],
                    f"project H100 graph grid {grid.source.get('file')} (sha256 {grid.source.get('sha256', '')[:12]})",
                    *(f"SpecDecode-Bench {s.file} sha256 {s.sha256}" for s in streams.values())],
        "assumptions": [facts.HOST_PER_ROW_SOURCE, facts.NGRAM_SOURCE_COST, facts.NGRAM_SPECULATION_SOURCE,
                        f"EAGLE-3 checkpoint {facts.EAGLE_CHECKPOINT} with a draft vocabulary of {facts.EAGLE_DRAFT_VOCAB}",
                        f"MT-Bench's mean context in the published batch-1 sweep: {facts.EAGLE_SWEEP.mean_ctx:g} tokens"]}
    drafters = {"eagle3": {"kind": facts.EAGLE3.name, "model": "eagle3", "file": facts.EAGLE_CHECKPOINT,
                           "engine_method": "eagle3", "draft_vocab": facts.EAGLE_DRAFT_VOCAB},
                facts.NGRAM.name: {"kind": facts.NGRAM.name}}
    return Profile.build(
        name=NAME, hardware=facts.HARDWARE, dtype=DTYPE, target=facts.TARGET,
        models={facts.TARGET: target_arch().to_dict(), "eagle3": eagle_arch().to_dict()},
        latency={facts.TARGET: engine.target.to_dict(), "eagle3": engine.drafter.to_dict()},
        drafters=drafters, acceptance=acceptance,
        engine={"methods": {m: c.to_dict() for m, c in engine.calibrations.items()},
                "fit": {"structure": "vLLM 0.10.1 step terms (calibrate.vllm.engine)", "warnings": warnings}},
        workload=workload, machine={"datasheet": facts.HARDWARE}, provenance=provenance)


def build(data: str | Path, grid_path: str | Path = GRID) -> Profile:
    """The Profile from the study's files in `data` and the project's H100 grid at `grid_path`. The
    user's folder is checked first (one line naming the files it lacks), before the grid is read."""
    data_files(data)
    grid = fit_grid(grid_path)
    return build_profile(read_streams(data), grid, fit_engine(grid), ingested_statistics())
