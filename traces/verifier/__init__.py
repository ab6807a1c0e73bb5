"""Lossless verifier: exact enumeration (`exact`), statistical tests (`statistical`), cases and
built-in samplers (`cases`), and mutants that must be caught (`mutants`)."""
