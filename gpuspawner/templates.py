"""The spawn form's templates: where they are, in a source checkout and after
install, and the autoescaping Jinja2 environment that renders them.

``pyproject.toml`` installs ``share/templates/*`` as data files to
``<prefix>/share/gpuspawner/templates`` (setuptools ``data-files``), where
``<prefix>`` is ``sys.prefix`` for a virtualenv or system install and
``site.USER_BASE`` for ``pip install --user``. In a source checkout (or an
editable install) the package sits next to the repository's
``share/templates``. A directory counts only if it holds ``form.html``.

The form is rendered with autoescaping on: node labels and admin strings
reach the page (KubeSpawner 7.1 renders ``profile_list`` without it,
kubespawner/spawner.py ``_render_options_form``).
"""

from __future__ import annotations

import functools
import site
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from jinja2 import ChoiceLoader, Environment, FileSystemLoader, PackageLoader

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


@functools.lru_cache(maxsize=8)
def form_environment(paths: tuple[str, ...]) -> Environment:
    """One autoescaping Jinja2 environment per template path list, so
    templates are compiled once (KubeSpawner builds one per render).
    KubeSpawner's own templates come last, as its renderer has them: a
    ``profile_form_template`` written for KubeSpawner may include its
    ``style.css``."""
    env = Environment(
        loader=ChoiceLoader([FileSystemLoader(list(paths)), PackageLoader("kubespawner", "templates")]),
        autoescape=True,
    )
    # keep profile order in |tojson, as KubeSpawner does
    env.policies["json.dumps_kwargs"] = {"sort_keys": False}
    return env


def render_form(paths: Iterable[str], source: str | None, **context: Any) -> str:
    """Render the spawn form: ``source`` (``profile_form_template``, a
    template string) when the admin set one, else ``form.html`` from the
    first of ``paths`` (``additional_profile_form_template_paths``) that has it."""
    env = form_environment(tuple(paths))
    template = env.from_string(source) if source else env.get_template(FORM)
    return template.render(**context)
