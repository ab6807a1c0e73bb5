"""experiments.bench.quick_repeat: the spread of the quick re-profile's re-measurements, and its bad input."""
import pytest

from common.bundled import bundled
from experiments.bench import quick_repeat


def test_the_spread_is_each_points_largest_over_smallest_ratio_across_rounds():
    rounds = [{"ratios": [1.0, 0.8, 0.5], "engine_ratio": 0.6}, {"ratios": [1.1, 0.8, 0.6], "engine_ratio": 0.9},
              {"ratios": [0.9, 0.4, 0.55], "engine_ratio": 0.7}]
    got = quick_repeat.spread(rounds)
    assert got["point_max_over_min_median"] == pytest.approx(1.1 / 0.9)    # of 1.1/0.9, 0.8/0.4, 0.6/0.5
    assert got["point_max_over_min_worst"] == pytest.approx(2.0)
    assert (got["engine_ratio_min"], got["engine_ratio_median"], got["engine_ratio_max"]) == (0.6, 0.7, 0.9)


@pytest.mark.parametrize("argv, message", [
    (["--rounds", "1"], "--rounds must be >= 2"),
    (["--threads", "0"], "--threads must be >= 1"),
    (["--profile", str(bundled("profiles", "glide-vicuna-7b-h800.json"))], "not a measured table"),
])
def test_bad_input_is_one_line_and_exit_2(argv, message, capsys):
    profile = ["--profile", str(bundled("profiles", "smollm2-135m-cpu.json"))]
    assert quick_repeat.main(profile + argv if argv[0] != "--profile" else argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
