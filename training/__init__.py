"""Training the drafters of SmolLM2: offline data (`data`), one loop (`loop`), one module per kind.

A drafter kind is a module of this package that declares `KIND` (its name in `python -m training
KIND`) and `WEIGHTS` (the file its trainee saves in the output folder), and offers `make_trainee(target: LoadedModel, *, seed: int, **options) -> Trainee`
(`training.loop.Trainee`), with the options given on the command line as `--set name=value`.
"""
import importlib
import pkgutil
from types import ModuleType


def kinds() -> dict[str, ModuleType]:
    """The kind modules of this package by `KIND` (imports every module but `__main__`)."""
    found = (importlib.import_module(f"{__name__}.{m.name}") for m in pkgutil.iter_modules(__path__)
             if not m.name.startswith("_"))
    return {m.KIND: m for m in found if hasattr(m, "KIND") and hasattr(m, "make_trainee") and hasattr(m, "WEIGHTS")}
