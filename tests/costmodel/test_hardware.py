"""costmodel.hardware: the datasheet table and its lookup."""
import pytest

from costmodel.hardware import HARDWARE, dtype_bytes, get_hardware

REQUIRED = ["V100", "A100-40G", "A100-80G", "A6000", "RTX3090", "H800", "H100", "H200", "CPU"]


def test_every_required_device_has_bandwidth_peak_memory_and_source():
    for name in REQUIRED:
        hw = get_hardware(name)
        assert hw.bandwidth > 0 and hw.memory > 0 and hw.peak("fp16") > 0 and hw.peak("fp32") > 0
        assert len(hw.source) > 20


def test_datasheet_figures():
    assert get_hardware("A100-80G").bandwidth == pytest.approx(2.039e12)
    assert get_hardware("H100").peak("bf16") == pytest.approx(989.4e12)
    assert get_hardware("H200").memory == pytest.approx(141e9)
    # H100 fp16 ridge: ~295 FLOP per byte
    assert get_hardware("H100").ridge_intensity("fp16") == pytest.approx(295.3, rel=1e-3)


def test_aliases_and_case():
    assert get_hardware("a100").name == "A100-80G"
    assert get_hardware("h800").name == "H800"
    assert get_hardware("cpu").name == "CPU"


def test_unknown_hardware_lists_known_ones():
    with pytest.raises(ValueError, match="unknown hardware 'TPU-v9'.*A100-80G.*H200"):
        get_hardware("TPU-v9")


def test_missing_dtype_and_unknown_dtype():
    with pytest.raises(ValueError, match="V100.*bf16"):
        get_hardware("V100").peak("bf16")
    with pytest.raises(ValueError, match="unknown dtype 'fp12'"):
        dtype_bytes("fp12")
    assert set(REQUIRED) <= set(HARDWARE)
