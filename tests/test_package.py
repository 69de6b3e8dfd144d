"""The layout of the package, as the README's "How it works" draws it: one folder per job,
listed in the order data flows through them, imports running one way, rooms one can read."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "static_runtime"
#: A module over this many lines is past what one holds in mind (issue 20).
MAX_LINES = 550
#: Folder → the only other folders that may import it: the serving deployments and the command
#: line use the runtime and are never parts of it (the command line serves a model, though).
LEAVES = {"serving": {"cli"}, "cli": set()}


def _readme_order() -> list[str]:
    """The folders "How it works" names, in its order (each one's bullet: ``**X** (`x/`)``)."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## How it works", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^- \*\*[^*]+\*\* \(`(?:static_runtime/)?(\w+)/`\)", section, re.MULTILINE)


ORDER = _readme_order()
FOLDERS = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists())


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _imports(path: Path) -> list[tuple[int, str]]:
    """Every ``static_runtime`` module ``path`` imports, at any depth (function-level imports
    included): ``(line, dotted name)``; ``from static_runtime import x`` gives both the
    package and ``static_runtime.x``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
            if node.module == "static_runtime":
                found += [(node.lineno, f"static_runtime.{a.name}") for a in node.names]
    return [(line, name) for line, name in found
            if name == "static_runtime" or name.startswith("static_runtime.")]


def _folder(path: Path) -> str | None:
    parts = path.relative_to(PACKAGE).parts
    return parts[0] if len(parts) > 1 else None


def _stage(name: str) -> str | None:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in FOLDERS else None


def test_readme_names_every_folder_once_in_data_flow_order():
    assert sorted(ORDER) == FOLDERS, (
        "README 'How it works' must have one '- **Name** (`folder/`)' bullet per folder")
    assert len(set(ORDER)) == len(ORDER)
    assert ORDER[:6] == ["ir", "frontend", "passes", "ops", "memory", "runtime"]


def test_package_root_holds_only_its_public_face():
    assert sorted(p.name for p in PACKAGE.glob("*.py")) == ["__init__.py", "__main__.py"]


@pytest.mark.parametrize("folder", FOLDERS)
def test_each_folder_says_its_job(folder):
    doc = ast.get_docstring(ast.parse((PACKAGE / folder / "__init__.py").read_text()))
    assert doc and len(doc.split()) >= 5, f"static_runtime/{folder}/__init__.py: no docstring"


def test_imports_flow_one_way():
    """No module imports a folder listed after its own; only ``cli`` imports ``serving``, and
    nothing imports ``cli``; the package root (whose ``__init__`` imports the stages it re-exports)
    only from folders after all of those."""
    rank = {name: i for i, name in enumerate(ORDER)}
    root_reaches = max(rank[s] for _, n in _imports(PACKAGE / "__init__.py")
                       if (s := _stage(n)) is not None)
    wrong = []
    for path in _modules():
        own = _folder(path)
        if own is None:
            continue
        for line, name in _imports(path):
            target = _stage(name)
            where = f"{path.relative_to(ROOT)}:{line} imports {name}"
            if target is None and name == "static_runtime" and rank[own] <= root_reaches:
                wrong.append(f"{where} (the package root, which imports this folder's stage)")
            elif target is not None and target != own and rank[target] > rank[own]:
                wrong.append(f"{where} (a later stage)")
            elif target in LEAVES and target != own and own not in LEAVES[target]:
                wrong.append(f"{where} ({target}/ uses the runtime, nothing uses it)")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("tree", ["static_runtime", "benchmarks"])
def test_no_module_past_what_one_holds_in_mind(tree):
    long = {str(p.relative_to(ROOT)): n for p in sorted((ROOT / tree).rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"over {MAX_LINES} lines: {long}"


def test_tests_mirror_the_package():
    """Each folder of the package has its folder of tests."""
    missing = [f for f in FOLDERS if not (ROOT / "tests" / f).is_dir()]
    assert not missing, f"no tests/<folder> for {missing}"
