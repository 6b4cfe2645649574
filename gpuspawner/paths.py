"""Where gpuspawner's shared files are, in a source checkout and after ``pip install``.

``pyproject.toml`` installs ``share/templates/*`` and ``jupyterhub_config.d/*`` as data files
under ``<prefix>/share/gpuspawner/`` (setuptools ``data-files``); ``<prefix>`` is ``sys.prefix``
for a virtualenv or system install and ``site.USER_BASE`` for ``pip install --user``. In a source
checkout (or an editable install) the package sits next to the repository's own copies.
"""

from __future__ import annotations

import site
import sys
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent
# repository layout name -> installed name under <prefix>/share/gpuspawner/
_SOURCE_NAMES = {"templates": "share/templates", "jupyterhub_config.d": "jupyterhub_config.d"}


def shared_dirs(kind: str) -> list[Path]:
    """Candidate directories for ``kind`` ("templates" or "jupyterhub_config.d"), best first."""
    dirs = [_PACKAGE_DIR.parent / _SOURCE_NAMES.get(kind, kind)]
    prefixes = [sys.prefix, sys.exec_prefix, sys.base_prefix]
    user_base = getattr(site, "USER_BASE", None)
    if user_base:
        prefixes.append(user_base)
    dirs.extend(Path(prefix) / "share" / "gpuspawner" / kind for prefix in prefixes)
    return dirs


def find_shared(kind: str, filename: str) -> Path | None:
    """The first existing ``<dir>/<filename>`` among :func:`shared_dirs`, or None."""
    for d in shared_dirs(kind):
        candidate = d / filename
        if candidate.is_file():
            return candidate
    return None
