"""`python -m experiments.vllm_h100`: see `experiments.vllm_h100.cli`."""
import sys

from experiments.vllm_h100.cli import main

sys.exit(main())
