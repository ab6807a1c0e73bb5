"""What a user runs: one command line per module, `python -m experiments.<name>`, each a thin parser
(`common.cli.CliParser`, wrapped in `common.cli.cli_entry`) over a library package.

`sweep` (the main job, over `sweep`), `capacity` (`capacity`), `fidelity` (`fidelity`), `simulate`
(`simulator`), `reproduce` and `paper_profiles` (`papers`), `verify_lossless` (`verification`),
`smollm2_cpu`, `transformers_peer` and `gpu_campaign` (`campaigns`), `examples`; benchmarks that
print figures under `bench` (`python -m experiments.bench.<name>`).
"""
