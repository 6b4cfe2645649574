"""Where the spawn-page templates are, in a source checkout and after install.

``pyproject.toml`` installs ``share/templates/*`` as data files to
``<prefix>/share/gpuspawner/templates`` (setuptools ``data-files``), where
``<prefix>`` is ``sys.prefix`` for a virtualenv or system install and
``site.USER_BASE`` for ``pip install --user``. In a source checkout (or an
editable install) the package sits next to the repository's
``share/templates``. A directory counts only if it holds ``form.html``.
"""

from __future__ import annotations

import site
import sys
from pathlib import Path

FORM = "form.html"


def candidate_dirs() -> list[Path]:
    package_dir = Path(__file__).resolve().parent
    dirs = [package_dir.parent / "share" / "templates"]
    prefixes = [sys.prefix, sys.exec_prefix, sys.base_prefix]
    user_base = getattr(site, "USER_BASE", None)
    if user_base:
        prefixes.append(user_base)
    for prefix in prefixes:
        dirs.append(Path(prefix) / "share" / "gpuspawner" / "templates")
    return dirs


def template_dirs() -> list[str]:
    """Existing template directories, the most specific first, no duplicates."""
    seen: set[Path] = set()
    found = []
    for d in candidate_dirs():
        try:
            real = d.resolve()
        except OSError:
            continue
        if real in seen or not (real / FORM).is_file():
            continue
        seen.add(real)
        found.append(str(real))
    return found
