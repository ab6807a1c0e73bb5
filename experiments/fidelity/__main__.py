"""`python -m experiments.fidelity`: see `experiments.fidelity.cli`."""
import sys

from experiments.fidelity.cli import main

sys.exit(main())
