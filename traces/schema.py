"""The trace contracts: LatencyTrace, StepTrace, BatchStepTrace and TokenTrace tables plus their
run metadata.

A BatchStepTrace (kind "batch_step", `runtime.engine.batch`) has one row per (step, row of the
batch): the row's own numbers (its request, context, tree size, accepted tokens) beside the step's
seconds, which every row of a step repeats (group by `step` for one value per step).

Every table is a pandas DataFrame on the way in and out, stored as parquet with the run metadata
(JSON) in the file footer under the key `specsim`. `validate` checks a frame against its contract
and raises InputError naming the missing or malformed column, so that nothing downstream
(calibration, replay, the simulator) ever works on a silently wrong table.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from common import atomic
from common.errors import InputError
from profiles.machine import Machine, recorded_in

TRACE_SCHEMA_VERSION = 1
METADATA_KEY = "specsim"

# column -> kind; kinds: "str", "int", "float", "bool", "list" (list-valued cell), "json" (JSON text)
LATENCY_COLUMNS: dict[str, str] = {
    "model": "str",        # model name (registry name, hub id or path)
    "hardware": "str",     # hardware name, as in costmodel.hardware
    "dtype": "str",        # "bf16", "fp16", "fp32"
    "role": "str",         # "target" | "draft" | "draft_head" | "router_head" | ...
    "n_tokens": "int",     # query tokens per sequence in the forward
    "ctx_len": "int",      # tokens already in the KV cache before the forward
    "batch": "int",        # sequences in the forward
    "seconds": "float",    # median wall-clock seconds over `repeats`
    "repeats": "int",
}

STEP_COLUMNS: dict[str, str] = {
    "run_id": "str",
    "method": "str",
    "config": "json",        # the method configuration, JSON text
    "prompt_id": "str",
    "step": "int",           # 0-based speculation step within the prompt
    "ctx_len": "int",        # committed tokens (prompt + generated) before the step
    "draft_forwards": "int",
    "draft_s": "float",
    "verify_tokens": "int",  # query tokens in the verification forward
    "verify_s": "float",
    "overhead_s": "float",   # sampling, tree building, cache edits
    "accepted": "int",       # tokens committed by the step, bonus token included
    "accept_mask": "list",   # per drafted position (chain, or accepted tree path): bool
    "confidences": "list",   # per drafted position: drafter top-1 probability
}



def step_wall_s(steps: pd.DataFrame) -> pd.Series:
    """Each step row's wall clock (a StepTrace's or a simulated step table's): draft + verify + overhead."""
    return steps["draft_s"] + steps["verify_s"] + steps["overhead_s"]


BATCH_STEP_COLUMNS: dict[str, str] = {
    "run_id": "str",
    "method": "str",
    "config": "json",
    "step": "int",           # 0-based engine step of the run, shared by the step's rows
    "batch": "int",          # rows the step decoded
    "request_id": "str",     # the row's request (its prompt id)
    "ctx_len": "int",        # the row's committed tokens (prompt + generated) before the step
    "draft_forwards": "int", # drafter forwards the row's proposal asked for (run with the other rows')
    "verify_tokens": "int",  # the row's tree: pending token + drafts
    "verify_width": "int",   # query tokens per row of the step's verify forward: its widest tree
    "accepted": "int",       # tokens the step added to the row's output
    "joined": "bool",        # the request was prefilled at this step
    "draft_s": "float",      # the step's seconds, the same on each of its rows
    "verify_s": "float",
    "overhead_s": "float",
    "prefill_s": "float",    # the prefills of the requests that joined at the step
    "accept_mask": "list",
    "confidences": "list",
}
STEP_SECONDS = ("draft_s", "verify_s", "overhead_s", "prefill_s")


TOKEN_COLUMNS: dict[str, str] = {
    "run_id": "str",
    "prompt_id": "str",
    "pos": "int",             # 0-based index of the token within the generated output
    "token": "int",           # the target's token
    "draft_rank": "int",      # rank of `token` in the drafter's distribution (0 = top-1)
    "draft_conf": "float",    # drafter's top-1 probability at this position
    "draft_q_token": "float", # q(token)
    "alpha": "float",         # sum_x min(p(x), q(x)) at the run's temperature
    "target_entropy": "float",# entropy of p in nats
}

# columns a table may lack (files written before they existed): column -> (kind, value read for them)
OPTIONAL_COLUMNS: dict[str, dict[str, tuple[str, Any]]] = {
    "latency": {"mode": ("str", "eager")},   # runtime mode of the forwards (runtime.cache.MODES)
    "step": {"mode": ("str", "eager"),       # runtime mode of the engine that ran the steps
             "pair": ("int", -1)},           # generation paired with plain decoding (traces.drift); -1: none
    "token": {},
    "batch_step": {},
}

CONTRACTS: dict[str, dict[str, str]] = {
    "latency": LATENCY_COLUMNS,
    "step": STEP_COLUMNS,
    "token": TOKEN_COLUMNS,
    "batch_step": BATCH_STEP_COLUMNS,
}

REQUIRED_METADATA = ("kind", "schema_version")


@dataclass
class RunMetadata:
    """What a trace table was recorded from. Stored beside every table (parquet footer)."""

    kind: str                                   # "latency" | "step" | "token" | "batch_step"
    models: dict[str, str] = field(default_factory=dict)   # role -> model name/path
    hardware: str = "unknown"
    dtype: str = "fp32"
    temperature: float = 0.0
    dataset: str = ""
    seed: int = 0
    commit: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    schema_version: int = TRACE_SCHEMA_VERSION

    def to_json(self) -> str:
        return json.dumps(self.__dict__, sort_keys=True, default=str)

    @classmethod
    def from_json(cls, text: str, source: str = "trace") -> "RunMetadata":
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"{source}: run metadata is not valid JSON ({exc.msg})") from None
        for key in REQUIRED_METADATA:
            if key not in raw:
                raise InputError(f"{source}: run metadata lacks '{key}'")
        if raw["schema_version"] != TRACE_SCHEMA_VERSION:
            raise InputError(
                f"{source}: trace schema version {raw['schema_version']} is not the supported {TRACE_SCHEMA_VERSION}"
            )
        known = {k: v for k, v in raw.items() if k in cls.__dataclass_fields__}
        return cls(**known)


def validate(frame: pd.DataFrame, kind: str, source: str = "trace") -> pd.DataFrame:
    """Check `frame` against the contract `kind`; return it with canonical dtypes."""
    if kind not in CONTRACTS:
        raise InputError(f"unknown trace kind '{kind}' (known: {', '.join(CONTRACTS)})")
    columns = CONTRACTS[kind]
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise InputError(f"{source}: {kind} trace is missing column(s) {', '.join(missing)}")
    out = frame.copy()
    for name, (col_kind, value) in OPTIONAL_COLUMNS[kind].items():
        if name not in out.columns:
            out[name] = value
    for name, col_kind in {**columns, **{k: v[0] for k, v in OPTIONAL_COLUMNS[kind].items()}}.items():
        series = out[name]
        if col_kind in ("int", "float"):
            numeric = pd.to_numeric(series, errors="coerce")
            if numeric.isna().any():
                row = int(np.flatnonzero(numeric.isna().to_numpy())[0])
                raise InputError(f"{source}: column '{name}' has a non-numeric or missing value at row {row}")
            if col_kind == "int":
                if not np.all(np.equal(np.mod(numeric.to_numpy(dtype=float), 1), 0)):
                    raise InputError(f"{source}: column '{name}' must hold integers")
                out[name] = numeric.astype("int64")
            else:
                out[name] = numeric.astype("float64")
        elif col_kind in ("str", "json"):
            out[name] = series.astype(str)
        elif col_kind == "list":
            out[name] = series.map(lambda v: list(v) if v is not None else [])
        elif col_kind == "bool":
            if not series.map(lambda v: isinstance(v, (bool, np.bool_))).all():
                raise InputError(f"{source}: column '{name}' must hold booleans")
            out[name] = series.astype(bool)
    if kind == "latency":
        for name in ("n_tokens", "batch", "repeats"):
            if (out[name] < 1).any():
                raise InputError(f"{source}: column '{name}' must be >= 1")
        if (out["seconds"] <= 0).any():
            raise InputError(f"{source}: column 'seconds' must be > 0")
    if "mode" in OPTIONAL_COLUMNS[kind]:
        from runtime.cache import MODES  # here, not at the top: runtime imports torch, which reading a trace never needs
        bad = ~out["mode"].isin(MODES)
        if bad.any():
            raise InputError(f"{source}: column 'mode' must be one of {', '.join(MODES)}, "
                             f"got {out['mode'][bad].iloc[0]!r}")
    if kind == "batch_step":
        _check_batch_steps(out, source)
    if kind == "token":
        if (out["draft_rank"] < 0).any():
            raise InputError(f"{source}: column 'draft_rank' must be >= 0")
        for name in ("draft_conf", "draft_q_token", "alpha"):
            bad = (out[name] < 0) | (out[name] > 1)
            if bad.any():
                raise InputError(f"{source}: column '{name}' must lie in [0, 1]")
    return out


def _check_batch_steps(out: pd.DataFrame, source: str) -> None:
    """A BatchStepTrace's rows: counts >= 1, seconds >= 0, and each step one batch: as many rows as
    its `batch`, each request once, its seconds and verify width the same on every row, that width
    its widest tree."""
    for name in ("batch", "verify_tokens", "accepted"):
        if (out[name] < 1).any():
            raise InputError(f"{source}: column '{name}' must be >= 1")
    for name in (*STEP_SECONDS, "draft_forwards"):
        if (out[name] < 0).any():
            raise InputError(f"{source}: column '{name}' must be >= 0")
    steps = out.groupby(["run_id", "step"], sort=False)
    for name in ("batch", "verify_width", *STEP_SECONDS):
        varies = steps[name].nunique() > 1
        if varies.any():
            raise InputError(f"{source}: column '{name}' differs between the rows of step {varies.idxmax()[1]}")
    size, batch = steps.size(), steps["batch"].first()
    widest, width = steps["verify_tokens"].max(), steps["verify_width"].first()
    checks = ((size != batch, lambda k: f"has {size[k]} rows, its batch column says {batch[k]}"),
              (steps["request_id"].nunique() != size, lambda k: "holds a request twice"),
              (widest != width, lambda k: f"has verify_width {width[k]}, its widest tree {widest[k]} tokens"))
    for bad, says in checks:
        if bad.any():
            key = bad.idxmax()
            raise InputError(f"{source}: step {key[1]} {says(key)}")


def write_trace(path: str | Path, frame: pd.DataFrame, metadata: RunMetadata) -> Path:
    """Validate and write a trace table atomically, metadata in the parquet footer."""
    checked = validate(frame, metadata.kind, source=str(path))
    return atomic.write_parquet(path, checked, {METADATA_KEY: metadata.to_json()})


def read_trace(path: str | Path, kind: str | None = None) -> tuple[pd.DataFrame, RunMetadata]:
    """Read a trace table and its metadata; check both against the contract."""
    import pyarrow.parquet as pq

    p = _existing(path)
    try:
        table = pq.read_table(p)
    except Exception as exc:  # pyarrow raises several types for non-parquet input
        raise InputError(f"{p}: not a readable parquet trace ({type(exc).__name__})") from None
    meta = _metadata(p, table.schema.metadata, kind)
    frame = validate(table.to_pandas(), meta.kind, source=str(p))
    return frame, meta


def read_metadata(path: str | Path, kind: str | None = None) -> RunMetadata:
    """A trace's metadata alone, read from the parquet footer without its table (checked as `read_trace` does)."""
    import pyarrow.parquet as pq

    p = _existing(path)
    try:
        schema = pq.read_schema(p)
    except Exception as exc:
        raise InputError(f"{p}: not a readable parquet trace ({type(exc).__name__})") from None
    return _metadata(p, schema.metadata, kind)


def timed_on(path: str | Path, otherwise: Machine) -> Machine:
    """The machine a latency trace was timed on (`traces.timing` records it; `profiles.machine.recorded_in`),
    `otherwise` for a trace from before it did: the machine a Profile built from it describes."""
    return recorded_in(read_metadata(path, kind="latency").extra, str(path), otherwise)


def _existing(path: str | Path) -> Path:
    p = Path(path)
    if not p.exists():
        raise InputError(f"trace file not found: {p}")
    return p


def _metadata(p: Path, footer: dict | None, kind: str | None) -> RunMetadata:
    raw_meta = (footer or {}).get(METADATA_KEY.encode())
    if raw_meta is None:
        raise InputError(f"{p}: no specsim run metadata in the file")
    meta = RunMetadata.from_json(raw_meta.decode(), source=str(p))
    if kind is not None and meta.kind != kind:
        raise InputError(f"{p}: holds a {meta.kind} trace, expected a {kind} trace")
    return meta
