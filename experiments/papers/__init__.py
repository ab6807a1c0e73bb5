"""The papers' numbers recomputed (`reproduce`; `python -m experiments.reproduce`) and the papers'
own configuration choices beside the sweep's (`choices`)."""
