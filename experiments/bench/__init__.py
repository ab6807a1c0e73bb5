"""Benchmarks that print figures (`make bench`): `costmodel`, `simulator`, `sweep`, `kernels`, each
`python -m experiments.bench.<name>`."""
