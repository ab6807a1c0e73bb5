"""profiles.schema and the typed Profile: versions, migration, immutability and travel to workers."""
import dataclasses
import json
import pickle

import pytest

from common.bundled import bundled
from common.errors import InputError
from profiles import SCHEMA_VERSION, Profile
from profiles import migrate, schema
from tests.simulator.fixtures import profile_dict


def test_every_bundled_profile_is_current_and_reads_back_to_itself():
    for path in sorted(bundled("profiles").glob("*.json")):
        raw = json.loads(path.read_text())
        assert raw["schema_version"] == SCHEMA_VERSION, f"{path.name}: run python -m profiles.migrate {path}"
        assert Profile.load(path).to_dict() == raw, f"{path.name} does not read back to itself"


def test_a_profile_travels_to_a_worker_as_it_is():
    profile = Profile.load(bundled("profiles", "smollm2-135m-cpu.json"))
    again = pickle.loads(pickle.dumps(profile))
    assert again.to_dict() == profile.to_dict()
    assert again.seconds(again.target, 4, 300) == pytest.approx(profile.seconds(profile.target, 4, 300))


def test_a_profile_and_its_parts_are_frozen():
    profile = Profile.from_dict(profile_dict())
    with pytest.raises(dataclasses.FrozenInstanceError):
        profile.target = "other"
    with pytest.raises(TypeError):
        profile.acceptance["x"] = profile.acceptance_model(next(iter(profile.acceptance)))
    with pytest.raises(AttributeError):
        profile.provenance.details.extra = 1
    with pytest.raises(ValueError):
        profile.acceptance_model("C").alpha_by_position[0] = 1.0


def test_a_schema_1_file_is_read_with_a_note_and_migrated(tmp_path, capsys):
    raw = {**profile_dict(), "schema_version": 1}
    raw["acceptance"] = {k: {kk: vv for kk, vv in v.items() if kk != "temperature"} for k, v in raw["acceptance"].items()}
    path = tmp_path / "old.json"
    path.write_text(json.dumps(raw))
    profile = Profile.load(path)
    note = capsys.readouterr().err
    assert note.startswith(f"note: {path} is a schema 1 Profile") and "read it as 0 (greedy)" in note
    assert f"python -m profiles.migrate {path}" in note and len(note.strip().splitlines()) == 1
    assert all(a.temperature == 0.0 for a in profile.acceptance.values())
    assert migrate.main([str(path), "--check"]) == 1 and json.loads(path.read_text())["schema_version"] == 1
    assert migrate.main([str(path)]) == 0
    assert json.loads(path.read_text())["schema_version"] == SCHEMA_VERSION
    assert migrate.main([str(path), "--check"]) == 0
    assert Profile.load(path).to_dict() == profile.to_dict()


@pytest.mark.parametrize("version", [0, 3, "2"])
def test_a_schema_this_version_does_not_read_is_one_line(version):
    with pytest.raises(InputError, match=f"schema version {version!r} is not one this version reads") as info:
        Profile.from_dict({**profile_dict(), "schema_version": version}, source="p.json")
    assert "\n" not in str(info.value)


def test_the_migrate_command_refuses_bad_input_in_one_line(tmp_path, capsys):
    (tmp_path / "bad.json").write_text("{")
    assert migrate.main([str(tmp_path / "bad.json")]) == 2
    assert capsys.readouterr().err.startswith(f"error: {tmp_path / 'bad.json'}: not valid JSON")
    assert migrate.main([str(tmp_path / "missing.json")]) == 2


def test_a_directory_named_like_a_profile_is_refused(tmp_path):
    (tmp_path / "x.json").mkdir()
    with pytest.raises(InputError, match="a directory, not a Profile"):
        schema.read(tmp_path / "x.json")
