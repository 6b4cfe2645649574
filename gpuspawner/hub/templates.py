"""The spawn form's templates and the autoescaping Jinja2 environment that renders them."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from jinja2 import ChoiceLoader, Environment, FileSystemLoader, PackageLoader

from gpuspawner.hub import form_assets
from gpuspawner.shared import shared_dir

FORM = "form.html"


@functools.lru_cache(maxsize=1)
def template_dir() -> Path:
    """gpuspawner's templates (``gpuspawner.shared``: the installed ones, else the checkout's)."""
    return shared_dir("templates")


def template_dirs() -> list[str]:
    """The directories KubeSpawner's ``additional_profile_form_template_paths`` gets: gpuspawner's own."""
    return [str(template_dir())]


def hub_template_dir() -> str:
    """The directory the config snippet adds to ``c.JupyterHub.template_paths``: JupyterHub's pages
    gpuspawner extends (``home.html``: why Kueue stopped a server)."""
    return str(template_dir() / "hub")


@functools.lru_cache(maxsize=8)
def form_environment(paths: tuple[str, ...]) -> Environment:
    """One autoescaping Jinja2 environment per template path list, so
    templates are compiled once (KubeSpawner builds one per render) and
    never looked up on disk again.
    KubeSpawner's own templates come last, as its renderer has them: a
    ``profile_form_template`` written for KubeSpawner may include its
    ``style.css``."""
    env = Environment(
        loader=ChoiceLoader([FileSystemLoader(list(paths)), PackageLoader("kubespawner", "templates")]),
        autoescape=True,
        # the templates are installed files that do not change while the hub runs: no stat() of
        # each one on every render (Jinja2's default), a system call per file per view
        auto_reload=False,
    )
    # keep profile order in |tojson, as KubeSpawner does
    env.policies["json.dumps_kwargs"] = {"sort_keys": False}
    return env


def render_form(paths: Iterable[str], source: str | None, hub_prefix: str = "/hub/", **context: Any) -> str:
    """Render the spawn form: ``source`` (``profile_form_template``, a
    template string) when the admin set one, else ``form.html`` from the
    first of ``paths`` (``additional_profile_form_template_paths``) that has it.
    The context also has ``asset_url(name)``: the URL of the form's style or
    script on the hub whose prefix is ``hub_prefix`` (``form_assets``)."""
    env = form_environment(tuple(paths))
    template = env.from_string(source) if source else env.get_template(FORM)
    return template.render(asset_url=functools.partial(form_assets.asset_url, hub_prefix), **context)
