"""Benchmarks that print figures (`make bench`): `costmodel`, `simulator`, `sweep`, each
`python -m experiments.bench.<name>`."""
