"""The method registry: one module per speculative method, each stating what every layer needs.

    import methods
    spec = methods.get("mcsd")                  # a MethodSpec (methods/spec.py)
    config = spec.parse({"k": "4x2x1"})        # a frozen MCSDConfig; unknown keys refused
    config.label                               # 'mcsd k4x2x1 repl'; methods.parse_label() reads it back

Built in: ar, sd, mcsd, cape, glide, lookahead, kangaroo, coral. Another method is one module
that defines a MethodConfig and a MethodSpec and calls `register` (see tests/test_methods_conformance.py).
"""
from methods.config import MethodConfig
from methods.spec import (MethodSpec, PlotSpec, Setup, get, names, parse_config, parse_label, parse_methods,
                          register, specs, unregister)
from methods import ar, sd, mcsd, cape, glide, lookahead, kangaroo, coral  # noqa: E402,F401  (register themselves)

__all__ = ["MethodConfig", "MethodSpec", "PlotSpec", "Setup", "get", "names", "parse_config", "parse_label",
           "parse_methods", "register", "specs", "unregister"]
