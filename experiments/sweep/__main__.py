"""`python -m experiments.sweep`: see `experiments.sweep.cli`."""
import sys

from experiments.sweep.cli import main

sys.exit(main())
