"""The spawn form's script and style, served by the hub as files the browser keeps.

Inline, they were ~23 KB of every view of the spawn page (three-quarters of the form), sent again on
each view and to each user. As files under a version named by their content
(``/hub/gpuspawner/static/<name>?v=<hash>``), a browser fetches each once per gpuspawner release;
tornado's ``StaticFileHandler`` marks a versioned URL cacheable for ten years and answers
``If-None-Match``/``If-Modified-Since`` itself. No sign-in: like JupyterHub's own ``/hub/static/``,
they hold nothing of a user or of the cluster (the page's data is in the page).
"""

from __future__ import annotations

import functools
import hashlib

from tornado import web

from gpuspawner.shared import shared_dir

__all__ = ["ASSET_PATH", "FILES", "FormAssetHandler", "asset_url", "handlers"]

#: under the hub's prefix (``/hub/``), as JupyterHub mounts ``extra_handlers``
ASSET_PATH = r"/gpuspawner/static/(.*)"
#: the files the form's templates name (share/static/)
FILES = ("gpuspawner-form.css", "gpuspawner-form.js", "gpuspawner-live.js")


@functools.lru_cache(maxsize=1)
def _versions() -> dict[str, str]:
    """Each file's version: the start of its content's SHA-256, read once per hub process."""
    root = shared_dir("static")
    return {name: hashlib.sha256((root / name).read_bytes()).hexdigest()[:16] for name in FILES}


def asset_url(hub_prefix: str, name: str) -> str:
    """The URL of the asset ``name`` (one of :data:`FILES`) on the hub whose prefix is
    ``hub_prefix`` (``spawner.hub.base_url``, ``/hub/`` or ``/<base_url>/hub/``)."""
    return f"{hub_prefix.rstrip('/')}/gpuspawner/static/{name}?v={_versions()[name]}"


class FormAssetHandler(web.StaticFileHandler):
    """``GET /hub/gpuspawner/static/<name>``: the form's files, and nothing else of the directory."""

    def validate_absolute_path(self, root: str, absolute_path: str) -> str | None:
        if self.path not in FILES:
            raise web.HTTPError(404)
        return super().validate_absolute_path(root, absolute_path)

    def set_extra_headers(self, path: str) -> None:
        self.set_header("X-Content-Type-Options", "nosniff")


@functools.lru_cache(maxsize=1)
def handlers() -> list[tuple]:
    """What the config snippet appends to ``c.JupyterHub.extra_handlers``."""
    return [(ASSET_PATH, FormAssetHandler, {"path": str(shared_dir("static"))})]
