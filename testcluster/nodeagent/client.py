"""A small Kubernetes API client over aiohttp: kubeconfig, requests, paged lists, watches, discovery.

It speaks the plain HTTP API (JSON, merge patches, ``?watch=1`` streams) to any API server, and
decodes large bodies off the event loop.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Mapping
from urllib.parse import quote

import aiohttp
import yaml

__all__ = ["ApiError", "Client", "KubeconfigError", "Resource", "MERGE", "path_for"]

MERGE = "application/merge-patch+json"
BIG_BODY = 256 * 1024  # bytes: a body this large is decoded in a thread, not on the loop


class KubeconfigError(ValueError):
    """A kubeconfig the agent cannot use; the message says what to fix."""


class ApiError(Exception):
    """The API server refused a request: ``code`` is the HTTP status, ``reason`` the Status reason."""

    def __init__(self, code: int, reason: str, message: str, status: Mapping[str, Any] | None = None):
        self.code, self.reason, self.status = code, reason, dict(status or {})
        super().__init__(f"{code} {reason}: {message}")


@dataclass(frozen=True)
class Resource:
    """Where a kind lives: its API group/version, plural and scope."""

    api_version: str
    plural: str
    namespaced: bool


# the kinds the agent itself writes or reads (the rest are found through discovery)
KNOWN = {
    "Namespace": Resource("v1", "namespaces", False),
    "Node": Resource("v1", "nodes", False),
    "Pod": Resource("v1", "pods", True),
    "Event": Resource("v1", "events", True),
    "ConfigMap": Resource("v1", "configmaps", True),
    "Secret": Resource("v1", "secrets", True),
    "ServiceAccount": Resource("v1", "serviceaccounts", True),
    "PersistentVolumeClaim": Resource("v1", "persistentvolumeclaims", True),
    "PersistentVolume": Resource("v1", "persistentvolumes", False),
    "Lease": Resource("coordination.k8s.io/v1", "leases", True),
    "ResourceSlice": Resource("resource.k8s.io/v1", "resourceslices", False),
    "ResourceClaim": Resource("resource.k8s.io/v1", "resourceclaims", True),
    "DeviceClass": Resource("resource.k8s.io/v1", "deviceclasses", False),
    "ResourceClaimTemplate": Resource("resource.k8s.io/v1", "resourceclaimtemplates", True),
    "DaemonSet": Resource("apps/v1", "daemonsets", True),
}
BY_PLURAL = {r.plural: r for r in KNOWN.values()}


def path_for(res: Resource, namespace: str | None = None, name: str | None = None,
             subresource: str | None = None) -> str:
    """``/api/v1/namespaces/ns/pods/name/status`` and the like."""
    base = "/api/v1" if res.api_version == "v1" else f"/apis/{res.api_version}"
    p = base
    if res.namespaced and namespace:
        p += f"/namespaces/{quote(namespace, safe='')}"
    p += f"/{res.plural}"
    if name:
        p += f"/{quote(name, safe='')}"
    if subresource:
        p += f"/{subresource}"
    return p


def _data_or_file(entry: Mapping[str, Any], key: str, base: Path) -> bytes | None:
    if entry.get(f"{key}-data"):
        try:
            return base64.b64decode(entry[f"{key}-data"])
        except ValueError as e:
            raise KubeconfigError(f"{key}-data is not base64: {e}") from None
    if entry.get(key):
        p = Path(entry[key])
        p = p if p.is_absolute() else base / p
        try:
            return p.read_bytes()
        except OSError as e:
            raise KubeconfigError(f"{key} {p}: {e.strerror or e}") from None
    return None


def read_kubeconfig(path: str | Path) -> dict[str, Any]:
    """The current context's server, CA, client certificate and token, from a kubeconfig file."""
    p = Path(path)
    try:
        doc = yaml.safe_load(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise KubeconfigError(f"cannot read the kubeconfig {p}: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        raise KubeconfigError(f"the kubeconfig {p} is not YAML: {e}") from None
    if not isinstance(doc, dict):
        raise KubeconfigError(f"the kubeconfig {p} is not a map (a kubectl config file)")
    ctx_name = doc.get("current-context")
    contexts = {c.get("name"): c.get("context") or {} for c in doc.get("contexts") or [] if isinstance(c, dict)}
    if ctx_name not in contexts:
        raise KubeconfigError(f"the kubeconfig {p} has no context {ctx_name!r} (its current-context)")
    ctx = contexts[ctx_name]
    clusters = {c.get("name"): c.get("cluster") or {} for c in doc.get("clusters") or [] if isinstance(c, dict)}
    users = {u.get("name"): u.get("user") or {} for u in doc.get("users") or [] if isinstance(u, dict)}
    cluster = clusters.get(ctx.get("cluster"))
    if not cluster or not cluster.get("server"):
        raise KubeconfigError(f"the kubeconfig {p}: context {ctx_name!r} names no cluster with a server")
    user = users.get(ctx.get("user")) or {}
    base = p.resolve().parent
    token = user.get("token")
    if not token and user.get("tokenFile"):
        token = (base / user["tokenFile"]).read_text().strip()
    return {"server": str(cluster["server"]).rstrip("/"),
            "ca": _data_or_file(cluster, "certificate-authority", base),
            "insecure": bool(cluster.get("insecure-skip-tls-verify")),
            "cert": _data_or_file(user, "client-certificate", base),
            "key": _data_or_file(user, "client-key", base),
            "token": token}


def ssl_context(cfg: Mapping[str, Any]) -> ssl.SSLContext | bool:
    if not cfg["server"].startswith("https://"):
        return False
    if cfg["insecure"]:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    elif cfg["ca"]:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # the cluster's CA only
        ctx.load_verify_locations(cadata=cfg["ca"].decode())
    else:
        ctx = ssl.create_default_context()  # the machine's CAs
    if cfg["cert"] and cfg["key"]:
        # ssl loads a client certificate from files only: a private folder, removed at once
        with tempfile.TemporaryDirectory(prefix="nodeagent-tls-") as d:
            cert, key = os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")
            for path, data in ((cert, cfg["cert"]), (key, cfg["key"])):
                fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
            ctx.load_cert_chain(cert, key)
    return ctx


async def _decode(raw: bytes) -> Any:
    if not raw:
        return None
    if len(raw) >= BIG_BODY:
        return await asyncio.to_thread(json.loads, raw)
    return json.loads(raw)


class Client:
    """One aiohttp session to the API server of a kubeconfig."""

    def __init__(self, kubeconfig: str | Path, *, connections: int = 64):
        self.config = read_kubeconfig(kubeconfig)
        self.server: str = self.config["server"]
        self.connections = connections
        self._session: aiohttp.ClientSession | None = None
        self._discovered: dict[str, dict[str, Resource]] = {}

    async def open(self) -> "Client":
        headers = {"Accept": "application/json", "User-Agent": "gpuspawner-nodeagent"}
        if self.config["token"]:
            headers["Authorization"] = f"Bearer {self.config['token']}"
        # reading certificates takes 10s of ms: not on the loop
        conn = aiohttp.TCPConnector(limit=self.connections, ssl=await asyncio.to_thread(ssl_context, self.config))
        self._session = aiohttp.ClientSession(connector=conn, headers=headers,
                                              timeout=aiohttp.ClientTimeout(total=None, sock_connect=10))
        return self

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("the client is not open")
        return self._session

    async def request(self, method: str, path: str, *, params: Mapping[str, Any] | None = None,
                      body: Any = None, content_type: str = "application/json", timeout: float = 60) -> Any:
        """One request; the decoded JSON answer, or ``ApiError`` with the server's Status."""
        data = None
        headers = {}
        if body is not None:
            data = json.dumps(body, separators=(",", ":")).encode()
            headers["Content-Type"] = content_type
        async with self.session.request(method, self.server + path, params=params, data=data, headers=headers,
                                        timeout=aiohttp.ClientTimeout(total=timeout)) as r:
            raw = await r.read()
            if r.status >= 400:
                raise _error(r.status, raw)
            return await _decode(raw)

    async def get(self, res: Resource, name: str, namespace: str | None = None) -> dict:
        return await self.request("GET", path_for(res, namespace, name))

    async def create(self, res: Resource, obj: Mapping[str, Any], namespace: str | None = None) -> dict:
        return await self.request("POST", path_for(res, namespace), body=obj)

    async def patch(self, res: Resource, name: str, patch: Mapping[str, Any], namespace: str | None = None,
                    subresource: str | None = None) -> dict:
        return await self.request("PATCH", path_for(res, namespace, name, subresource), body=patch,
                                  content_type=MERGE)

    async def delete(self, res: Resource, name: str, namespace: str | None = None,
                     options: Mapping[str, Any] | None = None) -> Any:
        return await self.request("DELETE", path_for(res, namespace, name),
                                  body={"apiVersion": "v1", "kind": "DeleteOptions", **(options or {})})

    async def list(self, res: Resource, *, namespace: str | None = None, field_selector: str | None = None,
                   label_selector: str | None = None, page: int = 500) -> tuple[str, list[dict]]:
        """Every object, in pages; returns (resourceVersion, items)."""
        items: list[dict] = []
        params: dict[str, str] = {"limit": str(page)}
        if field_selector:
            params["fieldSelector"] = field_selector
        if label_selector:
            params["labelSelector"] = label_selector
        while True:
            doc = await self.request("GET", path_for(res, namespace), params=params)
            items.extend(doc.get("items") or [])
            meta = doc.get("metadata") or {}
            if not meta.get("continue"):
                return str(meta.get("resourceVersion") or ""), items
            params["continue"] = meta["continue"]

    async def watch(self, res: Resource, resource_version: str, *, namespace: str | None = None,
                    field_selector: str | None = None, label_selector: str | None = None,
                    timeout_seconds: int = 300) -> AsyncIterator[dict]:
        """Watch events from ``resource_version``; ends when the server closes the stream.
        A 410 Gone (as an answer or an ERROR event) raises ``ApiError`` with code 410."""
        params = {"watch": "1", "resourceVersion": resource_version, "allowWatchBookmarks": "true",
                  "timeoutSeconds": str(timeout_seconds)}
        if field_selector:
            params["fieldSelector"] = field_selector
        if label_selector:
            params["labelSelector"] = label_selector
        async with self.session.get(self.server + path_for(res, namespace), params=params,
                                    timeout=aiohttp.ClientTimeout(total=None, sock_read=timeout_seconds + 30)) as r:
            if r.status >= 400:
                raise _error(r.status, await r.read())
            async for line in r.content:
                if not line.strip():
                    continue
                ev = await _decode(line)
                if ev.get("type") == "ERROR":
                    st = ev.get("object") or {}
                    raise ApiError(int(st.get("code") or 500), st.get("reason") or "", st.get("message") or "", st)
                yield ev

    async def resource(self, api_version: str, kind: str) -> Resource:
        """The plural and scope of ``kind`` in ``api_version`` (discovery, cached)."""
        known = KNOWN.get(kind)
        if known is not None and known.api_version == api_version:
            return known
        if api_version not in self._discovered:
            path = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            try:
                doc = await self.request("GET", path)
            except ApiError as e:
                if e.code == 404:
                    raise ApiError(404, "NotFound", f"the API server serves no {api_version}") from None
                raise
            self._discovered[api_version] = {
                r["kind"]: Resource(api_version, r["name"], bool(r.get("namespaced")))
                for r in doc.get("resources") or [] if "/" not in r.get("name", "")}
        found = self._discovered[api_version].get(kind)
        if found is None:
            raise ApiError(404, "NotFound", f"the API server serves no kind {kind} in {api_version}")
        return found


def _error(status: int, raw: bytes) -> ApiError:
    try:
        st = json.loads(raw)
    except ValueError:
        st = None
    if isinstance(st, dict) and st.get("kind") == "Status":
        return ApiError(status, st.get("reason") or "", st.get("message") or "", st)
    return ApiError(status, "", raw[:500].decode("utf-8", "replace"))
