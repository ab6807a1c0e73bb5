"""Save and load a drafter as one safetensors file: its own weights plus its config as JSON.

Weights shared with the target (embeddings, LM head, shallow layers) are not stored; the target
is given again at load time. Every drafter class offers `config_dict()` and a classmethod
`from_config_dict(config, target)`; the kind name selects the class, found in the module of this
package that declares it as `DRAFTER`.
"""
from __future__ import annotations

import importlib
import json
import pkgutil
from pathlib import Path

import torch

from common import atomic
from common.errors import InputError

CONFIG_KEY = "specsim_drafter"


def drafter_class(kind: str):
    """The drafter class of a Profile drafter kind (its module's `DRAFTER`); InputError naming the known ones."""
    found = kinds()
    if kind not in found:
        raise InputError(f"no runtime drafter of kind '{kind}' (known: {', '.join(sorted(found))})")
    return found[kind]


def kinds() -> dict:
    """Drafter classes by `kind`: the `DRAFTER` of each module of runtime.drafters that declares one."""
    package = importlib.import_module("runtime.drafters")
    found = (importlib.import_module(f"{package.__name__}.{m.name}") for m in pkgutil.iter_modules(package.__path__))
    return {d.kind: d for d in (getattr(m, "DRAFTER", None) for m in found) if d is not None}


def own_state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The drafter's trainable state (contiguous copies; safetensors rejects shared storage)."""
    return {k: v.detach().contiguous().clone() for k, v in module.state_dict().items()}


def save_drafter(path: str | Path, drafter: torch.nn.Module) -> Path:
    """Write `drafter` (weights + `kind` + config) atomically."""
    from safetensors.torch import save_file

    meta = {CONFIG_KEY: json.dumps({"kind": drafter.kind, "config": drafter.config_dict()}, sort_keys=True)}
    with atomic.atomic_path(path) as tmp:
        save_file(own_state(drafter), str(tmp), metadata=meta)
    return Path(path)


def load_drafter(path: str | Path, target, *, device=None, dtype=None) -> torch.nn.Module:
    """Rebuild a drafter saved by `save_drafter` for `target` (a runtime.llama.Llama)."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    p = Path(path)
    if not p.is_file():
        raise InputError(f"drafter file not found: {p}")
    try:
        with safe_open(str(p), framework="pt") as fh:
            raw = (fh.metadata() or {}).get(CONFIG_KEY)
    except Exception as exc:  # safetensors raises its own error types for non-safetensors input
        raise InputError(f"{p}: not a safetensors drafter file ({type(exc).__name__})") from None
    if raw is None:
        raise InputError(f"{p}: no specsim drafter configuration in the file")
    info = json.loads(raw)
    known = kinds()
    if info.get("kind") not in known:
        raise InputError(f"{p}: unknown drafter kind {info.get('kind')!r} (known: {', '.join(known)})")
    state = load_file(str(p))
    drafter = known[info["kind"]].from_config_dict(info["config"], target)
    if state:  # load at the file's precision, then convert (no rounding through fp32)
        drafter = drafter.to(dtype=next(iter(state.values())).dtype)
    drafter.load_state_dict(state, strict=True)
    return drafter.to(device=device or target.device, dtype=dtype or target.dtype).eval()
