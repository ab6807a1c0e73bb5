"""Where the bundled data lives: `data/` of the checkout the code runs from, or, in an installed
wheel, the package `specsim_data` (importlib.resources). The checkout wins, so a second checkout
(a git worktree) reads its own data, not that of the checkout an editable install points at."""
from __future__ import annotations

import importlib.resources
from pathlib import Path

CHECKOUT_DATA = Path(__file__).resolve().parents[1] / "data"


def bundled(*parts: str) -> Path:
    """The path of a bundled file or folder, e.g. bundled("profiles")."""
    if (CHECKOUT_DATA / "__init__.py").is_file():
        root = CHECKOUT_DATA
    else:
        root = Path(str(importlib.resources.files("specsim_data")))
    return root.joinpath(*parts)
