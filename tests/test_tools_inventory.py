"""The tree holds tools, not one-offs: every script in ``scripts/`` and ``benchmarks/`` is named in
README.md or docs/*.md and by a test, and nothing outside ``tests/`` imports from ``tests/``."""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TOOLS = sorted(
    p.relative_to(REPO).as_posix()
    for folder in ("scripts", "benchmarks")
    for p in (REPO / folder).iterdir()
    if p.suffix in (".py", ".sh")
)
TESTS_MODULES = {p.stem for p in (REPO / "tests").glob("*.py")}  # conftest, test_*, helpers


def _docs_text() -> str:
    return "\n".join(
        p.read_text(encoding="utf-8") for p in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    )


def _tests_text() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in sorted((REPO / "tests").glob("test_*.py")))


def test_the_inventory_is_what_the_tree_holds() -> None:
    assert "scripts/probe.py" in TOOLS and "benchmarks/bench.py" in TOOLS
    assert not any(Path(t).stem in {"fault_measure", "input_probes", "levers"} for t in TOOLS)


@pytest.mark.parametrize("tool", TOOLS)
def test_every_tool_is_documented(tool: str) -> None:
    name = Path(tool).name
    assert re.search(rf"(?<![\w/]){re.escape(name)}|{re.escape(tool)}", _docs_text()), (
        f"{tool}: named in neither README.md nor docs/*.md; say there what it does and how to run it"
    )


@pytest.mark.parametrize("tool", TOOLS)
def test_every_tool_is_named_by_a_test(tool: str) -> None:
    stem = Path(tool).stem
    assert re.search(rf"\b{re.escape(stem)}\b", _tests_text()), f"{tool}: no tests/test_*.py names it"


def _python_files_outside_tests() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [REPO / f for f in listed if not f.startswith("tests/") and (REPO / f).is_file()]


def test_nothing_outside_tests_imports_from_tests() -> None:
    offenders = []
    for path in _python_files_outside_tests():
        source = path.read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(source, filename=str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                if top == "tests" or top in TESTS_MODULES:
                    offenders.append(f"{path.relative_to(REPO)}:{node.lineno}: imports {name}")
        for n, line in enumerate(source.splitlines(), 1):  # sys.path.insert(0, ".../tests") and the like
            if "sys.path" in line and re.search(r"""["']tests["']|/tests\b""", line):
                offenders.append(f"{path.relative_to(REPO)}:{n}: puts tests/ on sys.path")
    assert not offenders, "\n".join(offenders)
