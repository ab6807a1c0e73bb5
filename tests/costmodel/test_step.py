"""costmodel.step.StepCalibration.from_dict: what an engine calibration may hold, checked where it is read."""
import pytest

from costmodel.step import StepCalibration


def test_a_calibration_reads_back_and_none_is_the_identity():
    fitted = StepCalibration(verify_scale=0.98, draft_per_forward_s=-0.0002, overhead_s=0.0003)
    assert StepCalibration.from_dict(fitted.to_dict()) == fitted
    assert StepCalibration.from_dict(None) == StepCalibration() == StepCalibration.from_dict({})


@pytest.mark.parametrize("raw, message", [
    ([], "engine.methods.sd must be an object of numbers, got list"),
    ({"overhead_s": "abc"}, "engine.methods.sd.overhead_s must be a finite number, got 'abc'"),
    ({"overhead_s": float("nan")}, "engine.methods.sd.overhead_s must be a finite number, got nan"),
    ({"overhead_s": True}, "engine.methods.sd.overhead_s must be a finite number, got True"),
    ({"verify_scale": 0.0}, "engine.methods.sd.verify_scale is 0.0; a scale of a forward's cost must be > 0"),
    ({"draft_scale": -1}, "engine.methods.sd.draft_scale is -1"),
    ({"verify_scael": 1.0}, "engine.methods.sd has unknown key 'verify_scael'"),
])
def test_a_bad_calibration_is_refused_naming_the_key(raw, message):
    with pytest.raises(ValueError) as refused:
        StepCalibration.from_dict(raw, where="engine.methods.sd")
    assert str(refused.value).startswith(message) and "\n" not in str(refused.value)
