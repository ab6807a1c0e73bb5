"""Discrete-event simulation of speculative decoding: one stream (`simulate_stream`) and a
serving cluster (`simulate_serving`). See docs/architecture.md, section "simulator"."""
from simulator.stream import simulate_stream

__all__ = ["simulate_stream"]
