"""``FaultProxy``: ``gpuspawner-cluster faultproxy`` in front of a running control plane's API
server, kubeconfigs that reach the API server through it, and its control endpoint (error answers
with Retry-After, refused connections, stalled and cut watches, replies cut mid-body, request
counts)."""

from __future__ import annotations

import json
import os
import pathlib
import urllib.error
import urllib.request
from typing import Any

import yaml

from testcluster.launcher import ControlPlaneError, Launched, find_binary, free_port


class FaultProxyError(RuntimeError):
    """The control endpoint refused a request (the message says what to fix) or cannot be reached."""


class FaultProxy(Launched):
    """The fault proxy in front of the control plane whose data directory is ``data_dir``.

    It serves ``https://127.0.0.1:<port>`` with a certificate of the cluster's CA, so a kubeconfig
    of the cluster keeps its CA and credentials and only changes its server (``kubeconfig_through``).
    A client certificate of the cluster's CA is passed on as its user and groups (kube-apiserver's
    request-header authentication, through the front proxy's certificate); a bearer token as is.
    ``<data_dir>/faultproxy.kubeconfig`` is the admin kubeconfig through the proxy.
    """

    what = "gpuspawner-cluster faultproxy"
    log_name = "faultproxy.log"

    def __init__(self, data_dir: str | os.PathLike[str], port: int | None = None, *,
                 control_port: int | None = None, ready_timeout: float = 30.0, binary: str | None = None) -> None:
        super().__init__(data_dir, port, ready_timeout=ready_timeout, binary=binary)
        self.control_port = control_port or free_port()
        self.kubeconfig = self.data_dir / "faultproxy.kubeconfig"

    @property
    def control_url(self) -> str:
        return f"http://127.0.0.1:{self.control_port}"

    def command(self) -> list[str]:
        return [self.binary or find_binary(), "faultproxy", f"--data-dir={self.data_dir}", f"--port={self.port}",
                f"--control-port={self.control_port}", "--exit-on-stdin-close"]

    def wait_ready(self) -> None:
        super().wait_ready()
        self.kubeconfig_through(self.data_dir / "admin.kubeconfig", self.kubeconfig)

    def kubeconfig_through(self, source: str | os.PathLike[str], dest: str | os.PathLike[str]) -> pathlib.Path:
        """Write ``source`` (a kubeconfig of this cluster) to ``dest`` with every cluster's server set
        to the proxy; credentials and CA stay."""
        try:
            config = yaml.safe_load(pathlib.Path(source).read_text())
            clusters = config["clusters"]
            for entry in clusters:
                entry["cluster"]["server"] = self.server
        except (OSError, yaml.YAMLError, KeyError, TypeError) as e:
            raise ControlPlaneError(f"{source} is not a kubeconfig with clusters to point at the proxy: {e}") from e
        dest = pathlib.Path(dest)
        tmp = dest.with_name(dest.name + ".tmp")
        tmp.write_text(yaml.safe_dump(config))
        tmp.chmod(0o600)
        tmp.replace(dest)
        return dest

    # -- the control endpoint --
    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.control_url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return json.load(r)
        except urllib.error.HTTPError as e:
            try:
                why = json.load(e).get("error", "")
            except ValueError:
                why = ""
            raise FaultProxyError(f"{method} {path} answered {e.code}: {why}") from None
        except OSError as e:
            raise FaultProxyError(f"the fault proxy's control endpoint {self.control_url} cannot be reached: {e}") from e

    def fail(self, code: int = 500, count: int = 1, *, verb: str | None = None, resource: str | None = None,
             retry_after: int = 1) -> dict:
        """Answer the next ``count`` matching requests with ``code`` (403, 410, 429, 500, 502, 503,
        504); 429 and 503 carry ``Retry-After: retry_after``."""
        return self._call("POST", "/faults/fail", _rule(verb, resource, code=code, count=count, retryAfter=retry_after))

    def stall(self, seconds: float, *, verb: str | None = None, resource: str | None = None,
              count: int | None = None) -> dict:
        """Hold matching requests ``seconds`` (or until ``clear()``) before passing them on: a held
        watch delivers nothing, no bookmark either."""
        return self._call("POST", "/faults/stall", _rule(verb, resource, seconds=seconds, count=count))

    def cut(self, count: int = 1, *, verb: str | None = None, resource: str | None = None) -> dict:
        """Pass the next ``count`` matching requests on to the API server, which carries them out,
        and cut each reply short: its status line, its headers (its real ``Content-Length``, or
        chunked) and the first half of its body, then the connection is closed (over HTTP/2, which
        kubectl speaks, the stream is reset): aiohttp raises ``ClientPayloadError``. Watches,
        followed logs and upgrades (exec, attach, port-forward) pass whole, the rule kept."""
        return self._call("POST", "/faults/cut", _rule(verb, resource, count=count))

    def refuse(self, on: bool = True, *, seconds: float | None = None, connections: int | None = None) -> dict:
        """Reset new connections: until ``refuse(False)``, for ``seconds``, or the next ``connections``."""
        body: dict[str, Any] = {"refuse": on}
        if seconds is not None:
            body["seconds"] = seconds
        if connections is not None:
            body["connections"] = connections
        return self._call("POST", "/faults/refuse", body)

    def close_watches(self) -> int:
        """End every watch open through the proxy; how many were ended."""
        return self._call("POST", "/faults/close-watches")["closed"]

    def clear(self) -> dict:
        """Remove every rule; held requests go on to the API server."""
        return self._call("DELETE", "/faults")

    def state(self) -> dict:
        return self._call("GET", "/faults")

    def counts(self, verb: str | None = None, resource: str | None = None) -> int:
        """Requests passed since the last ``reset_counts()`` matching ``verb`` and ``resource``."""
        return sum(n for (v, r), n in self.counters().items()
                   if (verb is None or v == verb)
                   and (resource is None or r == resource or r.startswith(resource + "/")))

    def counters(self) -> dict[tuple[str, str], int]:
        """Requests passed since the last ``reset_counts()``, by ``(verb, resource)``."""
        return {(c["verb"], c["resource"]): c["count"] for c in self._call("GET", "/counters")["counts"]}

    def reset_counts(self) -> None:
        self._call("DELETE", "/counters")


def _rule(verb: str | None, resource: str | None, **fields: Any) -> dict[str, Any]:
    body = {k: v for k, v in fields.items() if v is not None}
    if verb is not None:
        body["verb"] = verb
    if resource is not None:
        body["resource"] = resource
    return body
