"""Where gpuspawner's shared files are (the spawn and home page templates, the spawn form's script
and style, the config snippet): under ``<prefix>/share/gpuspawner/``, as pip installs them, else in
the source checkout (an editable install)."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path

__all__ = ["SharedFilesMissing", "candidates", "shared_dir"]

#: each shared directory: its name under ``<prefix>/share/gpuspawner/`` -> its place in the checkout
CHECKOUT_PLACES = {"templates": Path("share") / "templates", "static": Path("share") / "static",
                   "jupyterhub_config.d": Path("jupyterhub_config.d")}

PACKAGE_DIR = Path(__file__).resolve().parent


class SharedFilesMissing(FileNotFoundError):
    """gpuspawner's shared files are in none of the places looked at; the message lists them."""


def candidates(name: str, prefix: str, package_dir: Path) -> list[Path]:
    """The places ``name`` is looked for, in order:

    1. ``<prefix>/share/gpuspawner/<name>``: pip's data files in the running environment
       (``sys.prefix``, a virtual environment's or the system's);
    2. ``share/gpuspawner/<name>`` beside each directory above the installed package: an install with
       ``--user`` or ``--prefix`` (``~/.local/lib/python3.X/site-packages/gpuspawner`` ->
       ``~/.local/share/gpuspawner``);
    3. the source checkout the package is imported from (an editable install, or the checkout on
       ``sys.path``): ``share/templates``, ``jupyterhub_config.d`` at its top."""
    if name not in CHECKOUT_PLACES:
        raise ValueError(f"no shared directory named {name!r}; known: {', '.join(CHECKOUT_PLACES)}")
    out = [Path(prefix) / "share" / "gpuspawner" / name]
    out += [parent / "share" / "gpuspawner" / name for parent in package_dir.parents]
    out.append(package_dir.parent / CHECKOUT_PLACES[name])
    return list(dict.fromkeys(out))


def _first_dir(places: Iterable[Path]) -> Path | None:
    return next((p for p in places if p.is_dir()), None)


def shared_dir(name: str, prefix: str | None = None, package_dir: Path | None = None) -> Path:
    """The first of :func:`candidates` that exists; ``SharedFilesMissing`` names them all when none does."""
    places = candidates(name, sys.prefix if prefix is None else prefix, package_dir or PACKAGE_DIR)
    found = _first_dir(places)
    if found is None:
        raise SharedFilesMissing(
            f"gpuspawner's {name} directory is missing: looked in {', '.join(map(str, places))}. "
            "Reinstall gpuspawner with pip (it installs them under <prefix>/share/gpuspawner/)")
    return found
