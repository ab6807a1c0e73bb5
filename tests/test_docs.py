"""The docs stay true and findable: the README short, every bundled example cited and existing."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_the_readme_is_read_in_five_minutes():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 150


def test_every_example_a_doc_cites_exists_and_every_example_is_cited():
    text = "\n".join(path.read_text() for path in DOCS)
    cited = set(re.findall(r"examples/([A-Za-z0-9_]+)", text))
    on_disk = {p.name for p in (ROOT / "examples").iterdir() if p.is_dir()}
    assert cited - on_disk == set(), f"docs cite missing examples: {sorted(cited - on_disk)}"
    assert on_disk - cited == set(), f"examples no doc names: {sorted(on_disk - cited)}"


def test_no_doc_points_at_an_issue_number_a_reader_cannot_see():
    for path in DOCS:
        text = re.sub(r"vLLM issue #\d+", "", path.read_text())  # public upstream threads are fine
        assert not re.search(r"\b[Ii]ssue #?\d+\b", text), path.name
