"""Where the bundled data lives: `data/` of a checkout, installed as the package `specsim_data`.

Found through importlib.resources, so an installed wheel finds it as a checkout does."""
from __future__ import annotations

import importlib.resources
from pathlib import Path


def bundled(*parts: str) -> Path:
    """The path of a bundled file or folder, e.g. bundled("profiles")."""
    try:
        root = Path(str(importlib.resources.files("specsim_data")))
    except ModuleNotFoundError:           # a checkout that was never installed
        root = Path(__file__).resolve().parents[1] / "data"
    return root.joinpath(*parts)
