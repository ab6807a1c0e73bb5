"""docs/architecture.md holds: every dotted name it cites imports, the packages import only the
layers below them, no module imports itself back through others, and setup installs every package."""
from __future__ import annotations

import ast
import importlib
import re
import tomllib
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"


def packages() -> list[str]:
    """Top-level packages of the project (folders with an __init__.py, tests and data aside)."""
    return sorted(p.parent.name for p in ROOT.glob("*/__init__.py") if p.parent.name not in ("tests", "data"))


def layers() -> dict[str, int]:
    """Package -> layer number, from the numbered list under the doc's '## Layers'."""
    text = DOC.read_text().split("## Layers", 1)[1].split("\n## ", 1)[0]
    found = {}
    for number, names in re.findall(r"^(\d+)\. ((?:`\w+`(?:, )?)+):", text, flags=re.M):
        for name in re.findall(r"`(\w+)`", names):
            found[name] = int(number)
    return found


def modules() -> dict[str, Path]:
    out = {}
    for package in packages():
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def import_edges(found: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the project modules it imports anywhere in its code (TYPE_CHECKING blocks aside),
    each `from a import b` counted as a.b where that is a module."""
    def resolve(name: str) -> str | None:
        while name and name not in found:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = defaultdict(set)
    for module, path in found.items():
        tree = ast.parse(path.read_text())
        skip = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
                for n in ast.walk(node)}
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = module.split(".")[: len(module.split(".")) - node.level + (path.name == "__init__.py")]
                    base = ".".join(parent + ([node.module] if node.module else []))
                names = [f"{base}.{a.name}" if f"{base}.{a.name}" in found else base for a in node.names]
            for name in names:
                target = resolve(name)
                if target and target != module:
                    edges[module].add(target)
    return edges


def test_every_package_has_a_layer_and_imports_only_lower_ones():
    layer = layers()
    assert set(packages()) == set(layer), f"packages without a layer or layers without a package: {set(packages()) ^ set(layer)}"
    found = modules()
    wrong = sorted(f"{a} -> {b}" for a, targets in import_edges(found).items() for b in targets
                   if layer[b.split(".")[0]] >= layer[a.split(".")[0]] and a.split(".")[0] != b.split(".")[0])
    assert wrong == [], wrong[:10]


def test_no_module_imports_itself_back():
    edges = import_edges(modules())
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(v: str) -> None:              # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in list(edges):
        if module not in index:
            visit(module)
    assert cycles == []


def test_the_contract_check_catches_a_layer_broken_on_purpose(tmp_path, monkeypatch):
    """An upward import inside a function is an edge like one at the top of a module."""
    fake = tmp_path / "costmodel.py"
    fake.write_text("def f():\n    from sweep import run\n")
    edges = import_edges({"costmodel.fake": fake, "sweep.run": fake})
    assert edges["costmodel.fake"] == {"sweep.run"}


CITED = re.compile(r"`((?:" + "|".join(packages()) + r")(?:\.\w+)+)`")


@pytest.mark.parametrize("name", sorted(set(CITED.findall(DOC.read_text()))))
def test_every_dotted_name_the_map_cites_exists(name):
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return
    pytest.fail(f"{name} does not import")


def test_the_map_stays_a_map():
    assert len(DOC.read_text().splitlines()) <= 220


def test_setup_installs_every_package():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = {".".join(p.parent.relative_to(ROOT).parts) for pkg in packages() for p in (ROOT / pkg).rglob("__init__.py")}
    assert on_disk - listed == set()


# Files outside methods/ that may name a method by string, and why: each method's own engine decoder,
# drafter and trainee, and the papers' data.
NAMES_A_METHOD = {
    "runtime/engine/": "each method's own engine decoder",
    "runtime/drafters/": "each drafter's own module",
    "training/": "each drafter's trainee",
    "papers/": "the papers' data",
}


def method_names_in(path: Path, names: set[str]) -> list[tuple[int, str]]:
    """(line, name) of each string constant in the file's code (docstrings aside) that is a method name."""
    tree = ast.parse(path.read_text())
    docs = {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return sorted((node.lineno, node.value) for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and node.value in names and id(node) not in docs)


def test_no_file_outside_methods_names_a_method_unless_listed():
    import methods

    names = set(methods.names())
    found = {}
    for package in packages():
        if package == "methods":
            continue
        for path in (ROOT / package).rglob("*.py"):
            rel = path.relative_to(ROOT).as_posix()
            if not any(rel.startswith(allowed) for allowed in NAMES_A_METHOD):
                hits = method_names_in(path, names)
                if hits:
                    found[rel] = hits
    assert found == {}, f"name a method by string (a hook of methods/ belongs there instead): {found}"


def test_the_method_name_check_sees_a_name_in_code_and_not_in_a_docstring(tmp_path):
    fake = tmp_path / "fake.py"
    fake.write_text('"""Prices sd."""\n\ndef f():\n    """sd"""\n    return "sd" if True else "mcsd k2"\n')
    assert method_names_in(fake, {"sd", "mcsd"}) == [(5, "sd")]
