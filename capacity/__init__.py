"""Capacity planning (`python -m experiments.capacity`): the load one GPU sustains within an
SLO per method (`plan`) and the report a person reads (`report`)."""
