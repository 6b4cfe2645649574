"""``GPUHomeSettings``: where the home page reads each user's GPU use now (the culler's Prometheus)."""

from __future__ import annotations

from urllib.parse import urlsplit

from traitlets import TraitError, Unicode, validate
from traitlets.config import Configurable


class GPUHomeSettings(Configurable):
    """The home page's source of GPU use: the Prometheus server ``gpuspawner cull`` reads."""

    gpu_prometheus_url = Unicode(
        None,
        allow_none=True,
        config=True,
        help="""
        The Prometheus server that scrapes the DCGM exporters, the one ``gpuspawner cull
        --prometheus-url`` reads (docs/culling.md): the home page shows each user's running GPU
        servers with their GPU use and memory now, read from it (one instant query per view, 3 s at
        most). None (the default): the servers are listed without their use, and the page says why.

            c.GPUSpawner.gpu_prometheus_url = "http://prometheus-server.monitoring:80"
        """,
    )

    @validate("gpu_prometheus_url")
    def _validate_prometheus_url(self, proposal):
        value = proposal.value
        if value is None:
            return value
        parts = urlsplit(value) if isinstance(value, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.netloc or parts.query:
            raise TraitError(f"c.GPUSpawner.gpu_prometheus_url: {value!r} is not a Prometheus server's URL: "
                             "write e.g. 'http://prometheus-server.monitoring:80'")
        return value.rstrip("/")
