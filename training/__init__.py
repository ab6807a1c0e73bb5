"""Training the drafters of SmolLM2 (issue 7): offline data (`data`), one loop (`loop`), one module per kind.

`KINDS` maps the kind names of `python -m training KIND` to the module that trains it; each
such module offers `make_trainee(target: LoadedModel, *, seed: int, **options) -> Trainee`
(`training.loop.Trainee`), with the options given on the command line as `--set name=value`.
"""

KINDS: dict[str, str] = {
    "vanilla": "training.vanilla",
    "glide": "training.glide",
    "kangaroo": "training.kangaroo",
    "coral": "training.eagle",
    "router": "training.router",
}
