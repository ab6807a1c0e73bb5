"""common.seeds: a task's seed is a stable function of the run's seed and the task's own parts."""
from common.seeds import derive_seed


def test_a_derived_seed_depends_on_its_parts_only_and_is_stable():
    assert derive_seed(0, "coral-llama-3-8b-a6000", "coral g5", 1) == derive_seed(0, "coral-llama-3-8b-a6000",
                                                                                "coral g5", 1)
    assert derive_seed(0, "a", 1) != derive_seed(1, "a", 1) != derive_seed(0, "a", 2)
    assert derive_seed(0, "a", "b") != derive_seed(0, "ab")        # parts are kept apart, not concatenated
    assert derive_seed(7, "stream", "profile", 3) == 933571663      # the same in every process and version
    assert 0 <= derive_seed(123456789, "x") < 2 ** 32
