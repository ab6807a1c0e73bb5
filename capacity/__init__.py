"""Capacity planning (`python -m experiments.capacity`): the load a replica sustains within an SLO
per method (`plan`), its GPUs, batch cap and cost (`deploy`) and the report a person reads (`report`)."""
