"""A loopback HTTP server that speaks the Kubernetes core/v1 API over a Store.
Design notes: docs/simulated-apiserver.md.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import random
import time
from typing import Any

import yaml
from aiohttp import web

from . import connect, deletion, protobuf, tables
from .tls import self_signed
from .faults import Faults, RequestCounters
from .errors import ApiError, bad_request
from .resources import RESOURCES, SUBRESOURCE_GROUPS, SUBRESOURCES, ResourceInfo, group_versions
from .store import Store
from .watch import Watcher

__all__ = ["ApiServer", "SERVER_VERSION"]

log = logging.getLogger(__name__)

# What GET /version reports: a release the bundled kubectl (1.32) supports
# without a version-skew warning.
SERVER_VERSION = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.0",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2024-12-11T00:00:00Z",
    "goVersion": "go1.23.3",
    "compiler": "gc",
    "platform": "linux/amd64",
}

_JSON = "application/json"
# subresources that only take one write: (plural, subresource) -> (method, audit verb)
_WRITE_SUBRESOURCES = {
    ("pods", "binding"): ("POST", "create"),
    ("pods", "eviction"): ("POST", "create"),
    ("namespaces", "finalize"): ("PUT", "update"),
}
_PAGE_CHUNK = 250  # items serialized between two yields to the event loop (~10 ms)
_NOT_FOUND = "the server could not find the requested resource"


def _json_bytes(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def _status_response(err: ApiError) -> web.Response:
    headers = {}
    if err.retry_after is not None:
        headers["Retry-After"] = str(err.retry_after)
    return web.Response(status=err.code, body=_json_bytes(err.status()), content_type=_JSON, headers=headers)


def _parse_bool(name: str, value: str | None) -> bool:
    # Go strconv.ParseBool, as the query-parameter codec uses it.
    if value is None:
        return False
    if value in ("1", "t", "T", "true", "TRUE", "True", ""):
        return True
    if value in ("0", "f", "F", "false", "FALSE", "False"):
        return False
    raise bad_request(f'strconv.ParseBool: parsing "{value}": invalid syntax ({name})')


def _parse_int(name: str, value: str | None) -> int | None:
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise bad_request(f'strconv.ParseInt: parsing "{value}": invalid syntax ({name})') from None


def _wants_table(request: web.Request) -> bool:
    # kubectl: "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;..."
    for part in request.headers.get("Accept", "").split(","):
        params = {p.split("=", 1)[0].strip(): p.split("=", 1)[1].strip()
                  for p in part.split(";")[1:] if "=" in p}
        if params.get("as") == "Table" and params.get("g") == "meta.k8s.io" and params.get("v") == "v1":
            return True
    return False


def _check_loopback(host: str) -> None:
    if host == "localhost":
        return
    try:
        ok = ipaddress.ip_address(host).is_loopback
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"the simulated API server listens on loopback only; got host {host!r} "
                         "(use 127.0.0.1 or another 127.0.0.0/8 address)")


class _Route:
    __slots__ = ("info", "namespace", "name", "sub")

    def __init__(self, info: ResourceInfo, namespace: str | None, name: str | None, sub: str | None) -> None:
        self.info, self.namespace, self.name, self.sub = info, namespace, name, sub

    @property
    def resource_label(self) -> str:
        return self.info.plural + (f"/{self.sub}" if self.sub else "")


def _route(tail: str, served: dict[str, ResourceInfo]) -> _Route:
    """Resolve the path after ``/api/v1/`` or ``/apis/{group}/{version}/`` (installer.go's
    registered paths); ``served`` is that group-version's resources by plural."""
    # request.path is already percent-decoded by aiohttp.
    seg = tail.strip("/").split("/") if tail.strip("/") else []
    nf = ApiError(404, "NotFound", _NOT_FOUND, details={})
    if not seg:
        raise nf
    if seg[0] == "namespaces" and len(seg) >= 3 and seg[2] in served and served[seg[2]].namespaced:
        ns, plural, rest = seg[1], seg[2], seg[3:]
        info = served[plural]
        if len(rest) > 2 or not ns:
            raise nf
        name = rest[0] if rest else None
        sub = rest[1] if len(rest) == 2 else None
        if name == "":
            raise nf
        return _Route(info, ns, name, sub)
    info = served.get(seg[0])
    if info is None or len(seg) > 3:
        raise nf
    name = seg[1] if len(seg) >= 2 else None
    sub = seg[2] if len(seg) == 3 else None
    if info.namespaced and name is not None:
        raise nf  # /api/v1/pods/x: namespaced objects live under /namespaces/{ns}/
    return _Route(info, None, name, sub)


class _RefusingProtocol(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()


class ApiServer:
    """The Kubernetes API over HTTP on loopback, backed by ``store``; over HTTPS with a
    self-signed CA and serving certificate (``tls=True``, see ``tls.py``), as a real API server."""

    def __init__(self, store: Store, host: str = "127.0.0.1", port: int = 0, *,
                 bookmark_interval: float = 60.0, min_request_timeout: float = 1800.0, tls: bool = False) -> None:
        _check_loopback(host)
        if bookmark_interval <= 0:
            raise ValueError("bookmark_interval must be positive (seconds)")
        self.store = store
        self.host, self.port = host, port
        self.bookmark_interval = bookmark_interval
        self.min_request_timeout = min_request_timeout
        self.faults = Faults()
        self.faults._close_watches = self._close_http_watches
        self.counters = RequestCounters()
        self.url: str | None = None
        # tls.ServingCert when serving HTTPS: its CA goes into the kubeconfig
        self.serving_cert = self_signed(host) if tls else None
        # the node agent pods/log, pods/exec and pods/attach reach (connect.py): the simulated kubelet
        self.kubelet: Any = None
        self._watches: set[Watcher] = set()
        self._runner: web.AppRunner | None = None
        self._server: asyncio.base_events.Server | None = None
        self._encoded: dict[int, tuple[dict[str, Any], str, bytes]] = {}

    # -- lifecycle --
    async def start(self) -> str:
        if self._runner is not None:
            raise RuntimeError("ApiServer already started")
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # handler_cancellation: a client that hangs up ends its watch handler.
        # shutdown_timeout: stop() does not wait a minute for a stalled request.
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=2.0)
        await self._runner.setup()
        http = self._runner.server
        assert http is not None

        def factory() -> asyncio.Protocol:
            if self.faults.refuse_this_connection():
                return _RefusingProtocol()
            return http()

        loop = asyncio.get_running_loop()
        ssl_context = self.serving_cert.server_context() if self.serving_cert else None
        self._server = await loop.create_server(factory, self.host, self.port, reuse_address=True, ssl=ssl_context)
        sock = self._server.sockets[0]
        self.port = sock.getsockname()[1]
        self.url = f"{'https' if ssl_context else 'http'}://{self.host}:{self.port}"
        return self.url

    async def stop(self) -> None:
        """Stop accepting, end the watches, close every connection."""
        self._close_http_watches()
        server, self._server = self._server, None
        if server is not None:
            server.close()
        if self._runner is not None:
            await self._runner.cleanup()  # closes the open connections
            self._runner = None
        if server is not None:
            # On Python 3.12+ this waits for the connections, hence after cleanup.
            await server.wait_closed()

    async def __aenter__(self) -> "ApiServer":
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()

    def _close_http_watches(self) -> int:
        ws = list(self._watches)
        for w in ws:
            w.close()
        return len(ws)

    @property
    def open_watches(self) -> int:
        return len(self._watches)

    # -- dispatch --
    async def _handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        try:
            if path.startswith("/_sim/"):
                return await self._sim(request)
            if path in ("/version", "/version/"):
                return web.json_response(SERVER_VERSION)
            if path in ("/healthz", "/readyz", "/livez"):
                return web.Response(text="ok")
            if path in ("/api", "/api/"):
                return web.json_response({
                    "kind": "APIVersions",
                    "versions": ["v1"],
                    "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0",
                                                    "serverAddress": f"{self.host}:{self.port}"}],
                })
            if path == "/openapi/v3":
                return web.json_response({"paths": {gv: {"serverRelativeURL": f"/openapi/v3/{gv}?hash=SIM"}
                                                    for gv in self._openapi_paths()}})
            if path == "/openapi/v3/api/v1":
                return web.json_response(self._openapi("api/v1"))
            if path in ("/apis", "/apis/"):
                return web.json_response({"kind": "APIGroupList", "apiVersion": "v1",
                                          "groups": [self._api_group(g) for g in self._groups()]})
            if path.startswith("/openapi/v3/apis/"):
                gv = path[len("/openapi/v3/"):]
                if gv in self._openapi_paths():
                    return web.json_response(self._openapi(gv))
            for prefix, served in self._served().items():
                if path == prefix or path == prefix + "/":
                    return web.json_response(self._resource_list(prefix))
                if path.startswith(prefix + "/"):
                    return await self._resource_request(request, path[len(prefix) + 1:], served)
            for group in self._groups():
                if path in (f"/apis/{group}", f"/apis/{group}/"):
                    return web.json_response(dict(self._api_group(group), kind="APIGroup", apiVersion="v1"))
            raise ApiError(404, "NotFound", _NOT_FOUND, details={})
        except ApiError as e:
            return _status_response(e)
        except (asyncio.CancelledError, ConnectionResetError):
            raise
        except Exception as e:  # a bug must not kill the connection without an answer
            log.exception("simulated apiserver: %s %s failed", request.method, path)
            return _status_response(ApiError(500, "InternalError", f"Internal error occurred: {e}",
                                             details={"causes": [{"message": str(e)}]}))

    # -- discovery --
    @staticmethod
    def _served() -> dict[str, dict[str, ResourceInfo]]:
        """URL prefix (``/api/v1``, ``/apis/{group}/{version}``) -> its resources by plural."""
        return {infos[0].url_prefix: {i.plural: i for i in infos} for infos in group_versions().values()}

    @staticmethod
    def _groups() -> list[str]:
        return sorted({i.group for i in RESOURCES.values() if i.group})

    @staticmethod
    def _api_group(group: str) -> dict[str, Any]:
        """One entry of ``/apis`` (metav1.APIGroup): one served version, preferred."""
        versions = sorted({i.version for i in RESOURCES.values() if i.group == group})
        gvs = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        return {"name": group, "versions": gvs, "preferredVersion": gvs[0]}

    @staticmethod
    def _openapi_paths() -> list[str]:
        return [infos[0].url_prefix.lstrip("/") for infos in group_versions().values()]

    def _resource_list(self, prefix: str) -> dict[str, Any]:
        verbs = ["create", "delete", "get", "list", "patch", "update", "watch"]
        served = self._served()[prefix]
        resources: list[dict[str, Any]] = []
        group_version = ""
        for info in sorted(served.values(), key=lambda i: i.plural):
            group_version = info.api_version
            entry: dict[str, Any] = {"name": info.plural, "singularName": info.singular,
                                     "namespaced": info.namespaced, "kind": info.kind,
                                     "verbs": verbs}
            if info.short_names:
                entry["shortNames"] = list(info.short_names)
            if info.categories:
                entry["categories"] = list(info.categories)
            resources.append(entry)
            for sub, kind, sub_verbs in SUBRESOURCES.get(info.plural, ()):
                entry = {"name": f"{info.plural}/{sub}", "singularName": "", "namespaced": info.namespaced}
                group = SUBRESOURCE_GROUPS.get((info.plural, sub))
                if group:
                    entry["group"], entry["version"] = group
                resources.append(dict(entry, kind=kind, verbs=list(sub_verbs)))
            if info.status_subresource:
                resources.append({"name": f"{info.plural}/status", "singularName": "",
                                  "namespaced": info.namespaced, "kind": info.kind,
                                  "verbs": ["get", "patch", "update"]})
        resources.sort(key=lambda r: r["name"])
        return {"kind": "APIResourceList", "groupVersion": group_version, "resources": resources}

    def _openapi(self, gv: str) -> dict[str, Any]:
        """A minimal OpenAPI v3 document for one group-version: PATCH operations only.

        kubectl (create/apply with --validate=strict, the default) reads it to
        learn that the server validates fields itself: cli-runtime
        query_param_verifier_v3.go looks for a PATCH operation tagged with the
        kind's x-kubernetes-group-version-kind that takes ``fieldValidation``.
        Without it kubectl refuses to create ("failed to download openapi").
        Schemas are not served, so ``kubectl explain`` does not work.
        """
        paths: dict[str, Any] = {}
        for info in self._served()["/" + gv].values():
            base = f"{info.url_prefix}/namespaces/{{namespace}}/" if info.namespaced else f"{info.url_prefix}/"
            paths[f"{base}{info.plural}/{{name}}"] = {"patch": {
                "operationId": f"patch{'Namespaced' if info.namespaced else ''}{info.kind}",
                "parameters": [{"name": "fieldValidation", "in": "query", "schema": {"type": "string"}}],
                "responses": {"200": {"description": "OK"}},
                "x-kubernetes-action": "patch",
                "x-kubernetes-group-version-kind": {"group": info.group, "version": info.version,
                                                    "kind": info.kind},
            }}
        return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": SERVER_VERSION["gitVersion"]},
                "paths": paths, "components": {}}

    async def _resource_request(self, request: web.Request, tail: str,
                                served: dict[str, ResourceInfo]) -> web.StreamResponse:
        route = _route(tail, served)
        q = request.query
        method = request.method
        watching = method == "GET" and route.name is None and _parse_bool("watch", q.get("watch"))
        verb = self._verb(method, route, watching)
        self.counters.record(verb, route.resource_label)
        stall = self.faults.take_stall(verb, route.resource_label)
        if stall:
            await asyncio.sleep(stall)
        rule = self.faults.take_failure(verb, route.resource_label)
        if rule is not None:
            err = self._forbidden(verb, route) if rule.code == 403 else self._injected(rule.code, rule.retry_after)
            if verb == "watch" and rule.code == 410:
                return await self._error_event_stream(request, err)
            raise err
        if q.get("dryRun"):
            raise bad_request("dryRun is not supported by the simulated API server")
        if route.sub in connect.STREAM_SUBRESOURCES:
            return await self._pod_stream(request, route)
        if verb == "watch":
            return await self._watch(request, route)
        if verb == "list":
            return await self._list(request, route)
        if verb == "get":
            return self._object_response(request, route, self._get(route))
        if verb == "create":
            return await self._create(request, route)
        if verb == "update":
            body = await self._read_body(request, route.info)
            if route.sub == "finalize":
                obj = self.store.finalize_namespace(str(route.name), body)
            else:
                obj = self.store.replace(route.info.plural, route.name, body, route.namespace, route.sub)
            return self._object_response(request, route, obj)
        if verb == "patch":
            raw = await request.read()
            obj = self.store.patch(route.info.plural, route.name, raw, request.headers.get("Content-Type", ""),
                                   route.namespace, route.sub)
            return self._object_response(request, route, obj)
        return await self._delete(request, route)

    @staticmethod
    def _verb(method: str, route: _Route, watching: bool) -> str:
        not_allowed = ApiError(405, "MethodNotAllowed",
                               "the server does not allow this method on the requested resource")
        if route.sub in connect.STREAM_SUBRESOURCES and route.info.plural == "pods" and route.name is not None:
            if method not in connect.STREAM_SUBRESOURCES[route.sub]:
                raise not_allowed
            return "create" if method == "POST" else "get"
        write_only = _WRITE_SUBRESOURCES.get((route.info.plural, route.sub or ""))
        if route.sub not in (None, "status") and write_only is None:
            raise ApiError(404, "NotFound", _NOT_FOUND, details={})
        if route.sub == "status" and not route.info.status_subresource:
            raise ApiError(404, "NotFound", _NOT_FOUND, details={})
        if write_only is not None:
            if route.name is None or method != write_only[0]:
                raise not_allowed
            return write_only[1]
        if route.name is None:
            if method == "GET":
                return "watch" if watching else "list"
            if method == "POST" and (route.namespace is not None or not route.info.namespaced):
                return "create"
            raise not_allowed
        if route.sub == "status" and method not in ("GET", "PUT", "PATCH"):
            raise not_allowed
        verb = {"GET": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method)
        if verb is None:
            raise not_allowed
        return verb

    @staticmethod
    def _forbidden(verb: str, route: _Route) -> ApiError:
        """RBAC's refusal, worded as the authorization filter words it (endpoints/handlers/
        responsewriters/errors.go ``forbiddenMessage``). No authentication here: the user is
        ``system:anonymous``."""
        what = route.info.plural + (f' "{route.name}"' if route.name else "")
        scope = f'in the namespace "{route.namespace}"' if route.namespace else "at the cluster scope"
        message = (f'{what} is forbidden: User "system:anonymous" cannot {verb} resource '
                   f'"{route.resource_label}" in API group "{route.info.group}" {scope}')
        details: dict[str, Any] = {"kind": route.info.plural}
        if route.name:
            details["name"] = route.name
        return ApiError(403, "Forbidden", message, details=details)

    @staticmethod
    def _injected(code: int, retry_after: int) -> ApiError:
        if code == 410:
            return ApiError(410, "Expired", "The resourceVersion for the provided list is too old.")
        if code == 429:
            # The max-in-flight filter's answer (filters/maxinflight.go).
            return ApiError(429, "TooManyRequests", "Too many requests, please try again later.",
                            details={}, retry_after=retry_after)
        if code == 503:
            return ApiError(503, "ServiceUnavailable", "the server is currently unable to handle the request",
                            retry_after=retry_after)
        return ApiError(500, "InternalError", "Internal error occurred: injected fault",
                        details={"causes": [{"message": "injected fault"}]})

    async def _pod_stream(self, request: web.Request, route: _Route) -> web.StreamResponse:
        """GET pods/{name}/log, pods/{name}/exec and pods/{name}/attach (connect.py)."""
        pod = self.store.get("pods", route.name, route.namespace)
        handler = {"log": connect.pod_log, "exec": connect.pod_exec, "attach": connect.pod_attach}[str(route.sub)]
        return await handler(request, pod, self.kubelet)

    # -- bodies --
    async def _read_body(self, request: web.Request, info: ResourceInfo) -> dict[str, Any]:
        data = self._decode(await request.read(), request.headers.get("Content-Type"), info.kind)
        if not isinstance(data, dict):
            raise bad_request(f"the body of the request must be a JSON object ({info.kind})")
        return data

    @staticmethod
    def _decode(raw: bytes, content_type: str | None, kind: str) -> Any:
        """A request body in JSON, YAML or the Kubernetes protobuf encoding (``protobuf.py``)."""
        ctype = (content_type or _JSON).split(";", 1)[0].strip().lower()
        try:
            if ctype in (_JSON, "*/*", ""):
                return json.loads(raw or b"null")
            if ctype in ("application/yaml", "application/x-yaml", "text/yaml"):
                return yaml.safe_load(raw)
            if ctype == protobuf.PROTOBUF:
                return protobuf.decode_object(raw)
        except (ValueError, yaml.YAMLError) as e:
            raise bad_request(f"the body of the request could not be decoded as {kind}: {e}") from None
        except KeyError as e:
            raise ApiError(415, "UnsupportedMediaType",
                           f"the body of the request was in an unknown format - accepted media types include: "
                           f"application/json, application/yaml (the simulated API server decodes protobuf "
                           f"only for {', '.join(protobuf.kinds())}; this body is {e.args[0]})") from None
        raise ApiError(415, "UnsupportedMediaType",
                       "the body of the request was in an unknown format - accepted media types include: "
                       "application/json, application/yaml, application/vnd.kubernetes.protobuf")

    # -- verbs --
    def _get(self, route: _Route) -> dict[str, Any]:
        if route.name is None:
            raise ApiError(404, "NotFound", _NOT_FOUND, details={})
        return self.store.get(route.info.plural, route.name, route.namespace)

    def _object_response(self, request: web.Request, route: _Route, obj: dict[str, Any],
                         status: int = 200) -> web.Response:
        if obj.get("kind") != "Status" and _wants_table(request):
            meta = {"resourceVersion": obj.get("metadata", {}).get("resourceVersion", "")}
            obj = tables.table_for(route.info.plural, route.info.kind, [obj], meta, self.store._clock(),
                                   request.query.get("includeObject", "Metadata"),
                                   api_version=route.info.api_version)
        return web.Response(status=status, body=_json_bytes(obj), content_type=_JSON)

    async def _create(self, request: web.Request, route: _Route) -> web.Response:
        body = await self._read_body(request, route.info)
        if route.sub == "binding":
            assert route.name is not None
            if (body.get("metadata") or {}).get("name") not in (None, "", route.name):
                raise bad_request("name in URL does not match name in Binding object")
            target = body.get("target") or {}
            if target.get("kind") not in (None, "", "Node"):
                raise ApiError(422, "Invalid", f'Binding "{route.name}" is invalid: target.kind: '
                               f'Invalid value: "{target.get("kind")}": must be empty or \'Node\'')
            annotations = (body.get("metadata") or {}).get("annotations")
            out = self.store.bind(route.name, str(target.get("name") or ""), route.namespace, annotations)
            return web.Response(status=201, body=_json_bytes(out), content_type=_JSON)
        if route.sub == "eviction":
            assert route.name is not None and route.namespace is not None
            out = self.store.evict(route.name, route.namespace, body)
            return web.Response(status=201, body=_json_bytes(out), content_type=_JSON)
        obj = self.store.create(route.info.plural, body, route.namespace)
        return self._object_response(request, route, obj, status=201)

    async def _delete(self, request: web.Request, route: _Route) -> web.Response:
        """DELETE (handlers/delete.go): a body is the DeleteOptions, else the query parameters are."""
        assert route.name is not None
        raw = await request.read()
        if raw.strip():
            opts = deletion.from_body(self._decode(raw, request.headers.get("Content-Type"), "DeleteOptions"))
        else:
            opts = deletion.from_query(request.query)
        out = self.store.delete(route.info.plural, route.name, route.namespace, options=opts)
        return web.Response(status=200, body=_json_bytes(out), content_type=_JSON)

    async def _list(self, request: web.Request, route: _Route) -> web.StreamResponse:
        q = request.query
        info = route.info
        limit = _parse_int("limit", q.get("limit"))
        meta, items = await self.store.list_page_async(
            info.plural, route.namespace, q.get("labelSelector"), q.get("fieldSelector"), limit,
            q.get("continue"), q.get("resourceVersion"), resource_version_match=q.get("resourceVersionMatch"),
        )
        as_table = _wants_table(request)
        resp = web.StreamResponse(status=200, headers={"Content-Type": _JSON})
        await resp.prepare(request)
        if as_table:
            head = {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": meta,
                    "columnDefinitions": tables.table_columns(info.plural)}
            key = "rows"
            now = self.store._clock()
            include = q.get("includeObject", "Metadata")

            def encode(o: dict[str, Any]) -> dict[str, Any]:
                return tables.table_row(info.plural, info.kind, o, now, include, info.api_version)
        else:
            head = {"kind": info.list_kind, "apiVersion": info.api_version, "metadata": meta}
            key = "items"

            def encode(o: dict[str, Any]) -> dict[str, Any]:
                return o
        # Serialize page by page so a list of 150,000 pods never holds the loop long.
        await resp.write(_json_bytes(head)[:-1] + b',"' + key.encode() + b'":[')
        for start in range(0, len(items), _PAGE_CHUNK):
            chunk = b",".join(_json_bytes(encode(o)) for o in items[start:start + _PAGE_CHUNK])
            await resp.write((b"," if start else b"") + chunk)
            await asyncio.sleep(0)
        await resp.write(b"]}")
        await resp.write_eof()
        return resp

    # -- watch --
    async def _error_event_stream(self, request: web.Request, err: ApiError) -> web.StreamResponse:
        """A watch that ends at once with one ``ERROR`` event in a 200 stream (``newErrWatcher``).

        A client that hung up meanwhile ends it quietly, as :meth:`_watch` does: there is no one
        left to tell, and the failed write is not the server's error."""
        resp = web.StreamResponse(status=200, headers={"Content-Type": _JSON})
        resp.enable_chunked_encoding()
        try:
            await resp.prepare(request)
            await resp.write(_json_bytes({"type": "ERROR", "object": err.status()}) + b"\n")
            await resp.write_eof()
        except ConnectionError:  # ConnectionResetError, aiohttp's ClientConnectionResetError
            pass
        return resp

    def _encode_event(self, etype: str, obj: dict[str, Any]) -> bytes:
        # Many watchers receive the same stored object: encode it once.
        hit = self._encoded.get(id(obj))
        if hit is not None and hit[0] is obj and hit[1] == etype:
            return hit[2]
        line = _json_bytes({"type": etype, "object": obj}) + b"\n"
        if len(self._encoded) >= 4096:
            self._encoded.clear()
        self._encoded[id(obj)] = (obj, etype, line)
        return line

    async def _watch(self, request: web.Request, route: _Route) -> web.StreamResponse:
        q = request.query
        info = route.info
        timeout = _parse_int("timeoutSeconds", q.get("timeoutSeconds"))
        if timeout is None or timeout <= 0:
            # handlers/watch.go: no timeout asked -> minRequestTimeout * [1, 2).
            timeout_s = self.min_request_timeout * (1.0 + random.random())
        else:
            timeout_s = float(timeout)
        bookmarks = _parse_bool("allowWatchBookmarks", q.get("allowWatchBookmarks"))
        # a watch-list (kubectl 1.37's delete --wait, client-go's WatchListClient): the state, then
        # the bookmark that ends the initial events
        initial = bool(_parse_bool("sendInitialEvents", q.get("sendInitialEvents"))) and bool(bookmarks)
        try:
            w = self.store.watch(info.plural, route.namespace, q.get("resourceVersion"), q.get("labelSelector"),
                                 q.get("fieldSelector"), bookmarks, copy_objects=False, send_initial_events=initial)
        except ApiError as e:
            if e.code == 410:
                # cacher.Watch: past authn/authz and parsing, errors travel as an
                # ERROR event in a 200 stream (newErrWatcher).
                return await self._error_event_stream(request, e)
            raise
        w.set_bookmark_interval(self.bookmark_interval)
        w.set_timeout(timeout_s)
        deadline = time.monotonic() + timeout_s
        as_table = _wants_table(request)
        include = q.get("includeObject", "Metadata")
        self._watches.add(w)
        resp = web.StreamResponse(status=200, headers={"Content-Type": _JSON})
        resp.enable_chunked_encoding()
        try:
            await resp.prepare(request)
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                item = await w.next_raw(timeout=left)
                if item is None:
                    break
                etype, obj = item
                if as_table and etype != "BOOKMARK":
                    table = tables.table_for(info.plural, info.kind, [obj],
                                             {"resourceVersion": obj["metadata"].get("resourceVersion", "")},
                                             self.store._clock(), include, api_version=info.api_version)
                    line = _json_bytes({"type": etype, "object": table}) + b"\n"
                else:
                    line = self._encode_event(etype, obj)
                await resp.write(line)
            await resp.write_eof()
        except (ConnectionResetError, ConnectionError):
            pass
        finally:
            w.close()
            self._watches.discard(w)
        return resp

    # -- /_sim/: test hooks --
    async def _sim(self, request: web.Request) -> web.Response:
        path, method = request.path, request.method
        try:
            body = await request.json() if request.can_read_body else {}
        except ValueError:
            return web.json_response({"error": "the body must be JSON"}, status=400)
        if not isinstance(body, dict):
            return web.json_response({"error": "the body must be a JSON object"}, status=400)
        try:
            if path == "/_sim/counters":
                if method == "GET":
                    return web.json_response({"counts": self.counters.to_json()})
                if method == "DELETE":
                    self.counters.reset()
                    return web.json_response({"counts": []})
            elif path == "/_sim/faults":
                if method == "GET":
                    return web.json_response(self.faults.to_json())
                if method == "DELETE":
                    self.faults.clear()
                    return web.json_response(self.faults.to_json())
            elif path == "/_sim/faults/fail" and method == "POST":
                self.faults.fail_next(int(body.get("count", 1)), int(body.get("code", 500)),
                                      verb=body.get("verb"), resource=body.get("resource"),
                                      retry_after=int(body.get("retryAfter", 1)))
                return web.json_response(self.faults.to_json())
            elif path == "/_sim/faults/stall" and method == "POST":
                count = body.get("count")
                self.faults.stall(float(body["seconds"]), verb=body.get("verb"), resource=body.get("resource"),
                                  count=None if count is None else int(count))
                return web.json_response(self.faults.to_json())
            elif path == "/_sim/faults/close-watches" and method == "POST":
                return web.json_response({"closed": self.faults.close_watches()})
            elif path == "/_sim/faults/refuse" and method == "POST":
                seconds, count = body.get("seconds"), body.get("connections")
                self.faults.refuse_connections(bool(body.get("refuse", True)),
                                               seconds=None if seconds is None else float(seconds),
                                               count=None if count is None else int(count))
                return web.json_response(self.faults.to_json())
            elif path == "/_sim/bookmarks" and method == "POST":
                interval = float(body["interval"])
                if not interval > 0:
                    raise ValueError("interval must be a positive number of seconds")
                self.bookmark_interval = interval
                for w in self._watches:
                    w.set_bookmark_interval(interval)
                return web.json_response({"interval": interval})
            elif path == "/_sim/state" and method == "GET":
                return web.json_response({"resourceVersion": self.store.resource_version,
                                          "oldestResourceVersion": self.store.oldest_resource_version,
                                          "openWatches": self.open_watches})
        except (KeyError, TypeError, ValueError) as e:
            return web.json_response({"error": f"bad request to {path}: {e}"}, status=400)
        return web.json_response({"error": f"no such test hook: {method} {path}"}, status=404)

