"""The machine a Profile was measured on: what differs from this one, and experiments.fidelity's gate
(refused on another machine unless --other-machine; a Profile moved here by calibrate.quick passes)."""
import dataclasses

import pytest

from common.errors import InputError
from experiments import fidelity
from profiles.machine import Machine, check_machine, recorded_in, this_machine
from profiles.profile import Profile

HERE = Machine(cpu="AMD EPYC", isa=("avx", "avx2"), cores=2, threads=2, torch="2.13.0", blas="MKL 2024.2")


def test_the_same_machine_passes_silently_and_a_clock_is_no_difference():
    assert check_machine(HERE, dataclasses.replace(HERE, gpu_clocks="1980"), "p.json", False) == ""


def test_another_machine_is_refused_naming_both_and_what_differs():
    other = dataclasses.replace(HERE, cpu="Intel Xeon", isa=("avx", "avx2", "avx512f"), threads=1)
    with pytest.raises(InputError) as caught:
        check_machine(other, HERE, "p.json", False)
    line = str(caught.value)
    assert "\n" not in line and "Intel Xeon" in line and "AMD EPYC" in line
    assert "cpu: Intel Xeon vs AMD EPYC" in line and "threads: 1 vs 2" in line and "isa: avx avx2 avx512f vs" in line
    assert "python -m calibrate.quick --profile p.json" in line and "--other-machine" in line
    assert check_machine(other, HERE, "p.json", True).startswith("note: p.json was measured on Intel Xeon")


def test_twin_machines_of_one_kind_are_told_apart_by_their_host_and_an_older_record_is_not():
    with pytest.raises(InputError, match="host: aaaa vs bbbb"):
        check_machine(dataclasses.replace(HERE, host="aaaa"), dataclasses.replace(HERE, host="bbbb"), "p.json", False)
    assert check_machine(HERE, dataclasses.replace(HERE, host="bbbb"), "p.json", False) == ""    # recorded without one
    assert Machine.of(dataclasses.replace(HERE, host="aaaa").to_dict()).host == "aaaa"


def test_the_host_is_a_hash_of_the_first_id_readable(tmp_path, monkeypatch):
    from profiles import machine

    uuid, install = tmp_path / "product_uuid", tmp_path / "machine-id"
    install.write_text("install-id\n")
    monkeypatch.setattr(machine, "HOST_IDS", (str(uuid), str(install)))
    assert machine.host_id() == machine.hashlib.sha256(b"install-id").hexdigest()[:12]   # the UUID unreadable
    uuid.write_text("vm-uuid\n")
    assert machine.host_id() == machine.hashlib.sha256(b"vm-uuid").hexdigest()[:12]
    monkeypatch.setattr(machine, "HOST_IDS", (str(tmp_path / "none"),))
    assert machine.host_id() == ""


def test_a_profile_that_records_no_machine_is_a_note_not_a_refusal():
    said = check_machine(Machine(datasheet="CPU"), HERE, "p.json", False)
    assert said.startswith("note: p.json does not record the machine") and "AMD EPYC" in said


def test_fidelity_refuses_a_profile_of_another_machine_before_writing_anything(tmp_path, capsys):
    profile = Profile.load("data/profiles/smollm2-135m-cpu.json")
    here = this_machine(2)
    elsewhere = dataclasses.replace(here, cpu=here.cpu + " (another)", threads=4)
    path = tmp_path / "elsewhere.json"
    dataclasses.replace(profile, machine=elsewhere).save(path)
    out = tmp_path / "out"
    code = fidelity.main(["--profile", str(path), "--target", "smollm2", "--prompts", "mtbench:41-42", "--out", str(out)])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "(another)" in err and "threads: 4 vs 2" in err
    assert not out.exists()


def test_a_trace_says_where_it_was_timed_and_an_older_one_falls_back():
    assert recorded_in({"machine": HERE.to_dict()}, "lat.parquet", Machine(datasheet="CPU")) == HERE
    assert recorded_in({"threads": 2}, "lat.parquet", Machine(datasheet="CPU")) == Machine(datasheet="CPU")
    with pytest.raises(InputError, match="lat.parquet: machine.cores must be an integer"):
        recorded_in({"machine": {"cores": "two"}}, "lat.parquet", Machine())
