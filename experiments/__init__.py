"""What a user runs: the command lines over the other packages, and the libraries only they use.

Command lines (`python -m experiments.<name>`): `sweep` (the main job), `capacity`, `fidelity`,
`simulate`, `reproduce`, `verify_lossless`, `smollm2_cpu`, `gpu_campaign`; benchmarks under
`bench`. A command line that is a package keeps its parser in `<name>/cli.py`; the others are one
thin module each over their library (`campaigns`, `papers`, the `simulator` and `verification`
packages).
"""
