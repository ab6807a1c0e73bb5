"""The method registry: one module per speculative method, each stating what every layer needs.

    import methods
    spec = methods.get("mcsd")                  # a MethodSpec (methods/spec.py)
    config = spec.parse({"k": "4x2x1"})        # a frozen MCSDConfig; unknown keys refused
    config.label                               # 'mcsd k4x2x1 repl'; methods.parse_label() reads it back

Every module of this package that defines `SPEC` (a MethodSpec instance) is a method: it is found
here (pkgutil) and registered in the order of its `ORDER` (the order of tables, reports and CLI
defaults; modules without one follow by name). A method defined outside the package calls
`register` itself (see tests/methods/toy_method.py). `BASELINE` names plain decoding; `CHAIN`,
one draft model's chain.
"""
import importlib
import math
import pkgutil

from methods.config import MethodConfig
from methods.spec import (BASELINE, CHAIN, MethodSpec, PlotSpec, Setup, SpaceOption, engine_method, get, names,
                          parse_config, parse_label, parse_methods, register, replaying_specs, space_options, specs,
                          unregister)


def _register_package_methods() -> None:
    found = [importlib.import_module(f"{__name__}.{info.name}") for info in pkgutil.iter_modules(__path__)]
    found = [m for m in found if isinstance(getattr(m, "SPEC", None), MethodSpec)]
    for module in sorted(found, key=lambda m: (getattr(m, "ORDER", math.inf), m.__name__)):
        register(module.SPEC)


_register_package_methods()

__all__ = ["BASELINE", "CHAIN", "MethodConfig", "MethodSpec", "PlotSpec", "Setup", "SpaceOption", "engine_method",
           "get", "names", "parse_config", "parse_label", "parse_methods", "register", "replaying_specs",
           "space_options", "specs", "unregister"]
