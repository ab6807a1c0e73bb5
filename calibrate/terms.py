"""Pricing any model from its architecture on one set of hardware terms: the device's time (bytes
over bandwidth x bw_eff, FLOPs over peak x flops_eff) or the host's time to issue the forward's kernels
(launch_s + launch_per_layer_s x layers), whichever is longer, plus work that does not overlap
(overhead_s). One set of terms per (hardware, engine) prices every model on it, target or drafter:
a 2-layer drafter comes out launch-bound, a 33B target bandwidth-bound, and neither is a free number.
The papers' fits find the terms (`papers.base.hardware_params` bounds them); each latency model keeps
the terms it was priced with in its fit (`HARDWARE_FIT`), so `calibrate.transfer` prices another
architecture on the same hardware.
"""
from __future__ import annotations

from typing import Any

from costmodel.hardware import get_hardware
from profiles.latency import RooflineLatency

HARDWARE_FIT = "hardware_fit"     # key of a latency model's fit holding the hardware terms it was priced with
HARDWARE_TERMS = ("bw_eff", "flops_eff", "launch_s", "launch_per_layer_s", "overhead_s")


def hardware_terms(values: dict[str, float], prefix: str = "") -> dict[str, float]:
    return {k: float(values[f"{prefix}{k}"]) for k in HARDWARE_TERMS}


def launch_layers(arch: dict[str, Any]) -> float:
    """Blocks whose kernels a forward issues one by one: the decoder layers and any attention block
    beside them (an adapter's, GLIDE's cross-attention)."""
    return float(arch["n_layers"]) + float(arch.get("extra_kv_layers", 0)) + float(arch.get("cross_kv_layers", 0))


def model_latency(arch: dict[str, Any], hardware: str, terms: dict[str, float], name: str, how: str,
                  dtype: str = "fp16") -> RooflineLatency:
    """`arch` on `hardware` priced by the hardware terms (module docstring), which its fit records."""
    launch = terms["launch_s"] + terms["launch_per_layer_s"] * launch_layers(arch)
    return RooflineLatency(arch=arch, hardware=get_hardware(hardware).name, dtype=dtype, bw_eff=terms["bw_eff"],
                           flops_eff=terms["flops_eff"], overhead_s=terms["overhead_s"], launch_s=launch,
                           fit={"method": "paper", "how": how, HARDWARE_FIT: dict(terms)}, name=name)
