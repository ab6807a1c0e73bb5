"""A batched recording run (`python -m traces.record --batch B`): the prompts decoded as one
continuous batch of up to B rows (`runtime.engine.batch.BatchEngine`), one BatchStepTrace row per
(step, row of the batch) (`traces.schema`, kind "batch_step").

Every prompt is queued at once, in the order given (the request mix: `--prompts` may draw from
several sets), so B rows stay busy until the queue runs dry and each request joins as a row frees up.
A row's numbers depend on the rows beside it, so a batched run is not resumed: it is written once,
at its end (atomically). Each request is seeded as the step mode seeds its prompt.
"""
from __future__ import annotations

import json
from typing import Any, Sequence

from runtime.engine.batch import BatchEngine, BatchStepRecord
from runtime.prompts import Prompt


def step_rows(records: Sequence[BatchStepRecord], run_id: str, method: str, config: dict[str, Any]) -> list[dict]:
    """BatchStepTrace rows of a run's step records."""
    config_text = json.dumps(config, sort_keys=True)
    rows = []
    for record in records:
        step = {"run_id": run_id, "method": method, "config": config_text, "step": record.step,
                "batch": len(record.rows), "verify_width": record.width, "draft_s": record.draft_s,
                "verify_s": record.verify_s, "overhead_s": record.overhead_s, "prefill_s": record.prefill_s}
        for row in record.rows:
            rows.append({**step, "request_id": str(row.request_id), "ctx_len": row.ctx_len,
                         "draft_forwards": row.draft_forwards, "verify_tokens": row.verify_tokens,
                         "accepted": row.accepted, "joined": row.joined, "accept_mask": list(row.accept_mask),
                         "confidences": list(row.confidences)})
    return rows


def record_batch(run, prompts: Sequence[Prompt]) -> list[dict]:
    """Decode `prompts` as one batch of `run.args.batch` rows (a `traces.record.Run`'s models,
    method and law); its BatchStepTrace rows."""
    encoded = [(p.prompt_id, run.encode(p)) for p in prompts]
    new = run.args.max_new_tokens
    engine = BatchEngine(run.method, run.target.model, run.drafter_arg, batch=run.args.batch, sampling=run.sampling,
                         seed=run.args.seed, context=max(len(ids) for _, ids in encoded) + new,
                         eos_token_id=run.eos, **run.arguments)
    for prompt_id, ids in encoded:
        engine.add(prompt_id, ids, new, seed=run.prompt_seed(prompt_id))
    records = []
    while not engine.idle:
        records.append(engine.step())
    return step_rows(records, run.run_id, run.method, engine.template.config.to_dict())
