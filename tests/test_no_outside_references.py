"""Nothing in the repository cites a file outside it or an issue number: name the primary source."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Each pattern is written so that its own source text does not match it (this file is checked too).
FORBIDDEN = {
    "a style guide outside the repository": re.compile(r"STYLE\.md"),
    "notes kept outside the repository": re.compile(
        r"shared[/]reference|\.\./shared\b|\breference\s+(?:notes|data|section|file)\b|\bref\s+§"
        r"|cuda-compat-and-gpu-label[s]|dra-dcgm-kueu[e]|sharing-kueue-budgets-prepul[l]"),
    "an issue number": re.compile(r"(?i)\bissues?\s+#?\d+|\(#\d+"),
}


def tracked_files(root: Path) -> list[Path]:
    """Every file git tracks under ``root``; without git, every file but those under .git."""
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True, timeout=60).stdout
        return [root / name for name in out.decode().split("\0") if name]
    except (OSError, subprocess.SubprocessError):
        return [p for p in root.rglob("*") if p.is_file() and ".git" not in p.relative_to(root).parts]


def outside_references(root: Path) -> list[str]:
    hits = []
    for path in tracked_files(root):
        try:
            data = path.read_bytes()
        except OSError:  # listed by git but deleted in the work tree
            continue
        if b"\0" in data:
            continue
        for n, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
            for what, pattern in FORBIDDEN.items():
                if pattern.search(line):
                    hits.append(f"{path.relative_to(root)}:{n}: {what}: {line.strip()[:120]}")
    return hits


def test_nothing_cites_a_file_outside_the_repository_or_an_issue_number():
    assert outside_references(ROOT) == []


SAMPLES = [
    ("STYLE" + ".md #7", True),
    ("see ../" + "shared/" + "reference/x.md", True),
    ("the project's reference " + "notes, section 4.1", True),
    ("labels (ref " + "§4.1)", True),
    ("cuda-compat-and-gpu-" + "labels.md", True),
    ("Targets (issue " + "#7): page p99", True),
    ("as issue " + "16 asks", True),
    ("fixed (" + "#20)", True),
    ("claim default/c: selector #0 on device gpu-0", False),
    ("color: #333;", False),
    ("PKCS#8 PEM", False),
    ("the PR https://github.com/kubernetes/kubernetes/pull/134740", False),
    ("docs/test-cluster.md", False),
]


@pytest.mark.parametrize(("line", "flagged"), SAMPLES, ids=[
    "style-guide", "shared-path", "reference-notes", "ref-section", "reference-file-name", "issue-hash",
    "issue-number", "hash-in-parentheses", "cel-selector-index", "css-colour", "pkcs8", "upstream-pull",
    "own-doc"])
def test_the_check_tells_outside_references_from_ordinary_text(tmp_path, line, flagged):
    (tmp_path / "a.md").write_text(f"# Title\n\n{line}\n", encoding="utf-8")
    (tmp_path / "b.bin").write_bytes(b"\0" + line.encode())
    hits = outside_references(tmp_path)
    assert (hits != []) is flagged, hits
    assert all(h.startswith("a.md:3: ") for h in hits)
