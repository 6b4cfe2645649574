"""Module docstrings say in a few lines what a module holds; the design goes in docs/."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "gpuspawner"
MAX_LINES = 8


def docstring_lines(path: Path) -> int:
    """Lines of the module's docstring, blank ones inside it included (0 when it has none)."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")), clean=False)
    return len(doc.strip().splitlines()) if doc else 0


def too_long(package: Path) -> list[str]:
    return sorted(f"{p.relative_to(package.parent)}: {n} lines"
                  for p in package.rglob("*.py") if (n := docstring_lines(p)) > MAX_LINES)


def test_no_product_module_docstring_is_over_eight_lines():
    assert too_long(PACKAGE) == [], "cut these docstrings to what the module holds; move the why to docs/"


@pytest.mark.parametrize(("lines", "flagged"), [(1, False), (8, False), (9, True), (30, True)],
                         ids=["one-line", "eight-lines", "nine-lines", "design-document"])
def test_the_check_flags_a_docstring_over_eight_lines(tmp_path, lines, flagged):
    package = tmp_path / "pkg"
    package.mkdir()
    body = "\n".join(f"line {n}" for n in range(lines))
    (package / "mod.py").write_text(f'"""{body}\n"""\n\nX = 1\n', encoding="utf-8")
    assert too_long(package) == (["pkg/mod.py: %d lines" % lines] if flagged else [])


def test_a_module_without_docstring_counts_zero(tmp_path):
    (tmp_path / "mod.py").write_text("X = 1\n", encoding="utf-8")
    assert docstring_lines(tmp_path / "mod.py") == 0
