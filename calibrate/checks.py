"""Whether a Profile describes what a run brings: the target model it loads and the prompt sets it
asks. Every command that measures or fits against a Profile (`calibrate.answers`, `experiments.fidelity`,
`experiments.serve_load`, `experiments.acceptance_length`) refuses a mismatch here, in one line."""
from __future__ import annotations

from common.errors import InputError
from profiles.profile import Profile
from traces.timing import DTYPE_NAMES


def check_target(profile: Profile, model) -> None:
    """The Profile must describe the loaded target `model` (our Llama): architecture, hardware, dtype."""
    arch = profile.models[profile.target]
    have = {"n_layers": model.config.num_layers, "hidden": model.config.hidden_size, "vocab": model.config.vocab_size}
    for key, value in have.items():
        if hasattr(arch, key) and int(getattr(arch, key)) != int(value):
            raise InputError(f"profile '{profile.name}' is for target '{profile.target}' with {key} "
                             f"{getattr(arch, key)}; the measured target has {value}")
    hardware = "CPU" if model.device.type == "cpu" else None
    if hardware and profile.hardware != hardware:
        raise InputError(f"profile '{profile.name}' is for hardware '{profile.hardware}'; this run measures on "
                         f"{hardware}")
    dtype = DTYPE_NAMES.get(model.dtype, str(model.dtype))
    if profile.dtype != dtype:
        raise InputError(f"profile '{profile.name}' is for dtype {profile.dtype}; the measured target runs {dtype}")


def dataset_of(profile: Profile, prompt_set: str) -> str:
    """The Profile dataset a prompt set's prompts belong to ('mtbench' -> 'mt-bench')."""
    found = profile.dataset_named(prompt_set)
    if found is None:
        raise InputError(f"prompt set '{prompt_set}' matches no dataset of profile '{profile.name}' "
                         f"(has: {', '.join(profile.datasets())})")
    return found
