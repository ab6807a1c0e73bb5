"""Discrete-event simulation of speculative decoding: one stream (`simulate_stream`) and a
serving cluster (`simulate_serving`). See docs/architecture.md, section "simulator"."""
from simulator.costs import FixedLatency, Parallelism
from simulator.serving import Cluster, ServingResult, simulate_serving
from simulator.stream import StreamResult, simulate_stream
from simulator.workload import Workload

__all__ = ["simulate_stream", "simulate_serving", "Workload", "Cluster", "Parallelism", "FixedLatency",
           "StreamResult", "ServingResult"]
