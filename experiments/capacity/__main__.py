"""`python -m experiments.capacity`: see `experiments.capacity.cli`."""
import sys

from experiments.capacity.cli import main

sys.exit(main())
