"""What doctor reads from the cluster: nodes, pods, DRA objects and the hub's access rights.
Design notes: docs/troubleshooting.md.
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass
from typing import Any

from gpuspawner.doctor.dra_state import DRA_GROUP, REQUIRED_DRA_NAMESPACED_RBAC, REQUIRED_DRA_RBAC, DraState
from gpuspawner.doctor.rbac import REQUIRED_NAMESPACED_RBAC, REQUIRED_RBAC, RbacCheck, RbacFacts
from gpuspawner.doctor.kueue import ADMISSION_GATE, VISIBILITY_APISERVICE, KueueState, probe_pod
from gpuspawner.kube.api_errors import explain, status_of

__all__ = ["GatherError", "ClusterState", "gather", "parse_service_account"]

_SA_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


class GatherError(Exception):
    """Doctor cannot read the cluster; the message is one line saying why and what to do."""


@dataclass
class ClusterState:
    server: str
    nodes: list[dict] | None  # None: listing was forbidden
    pods: list[dict] | None
    rbac: RbacFacts
    dra: DraState | None = None  # None: not read (DraState.served says whether the cluster has DRA)
    kueue: KueueState | None = None  # None: not read (the hub queues no pool through Kueue)


def parse_service_account(text: str) -> tuple[str, str]:
    """``"jhub/hub"`` or ``"system:serviceaccount:jhub:hub"`` -> ``("jhub", "hub")``."""
    value = (text or "").strip()
    prefix = "system:serviceaccount:"
    if value.startswith(prefix):
        parts = value[len(prefix):].split(":")
    else:
        parts = value.split("/")
    if len(parts) != 2 or not all(parts):
        raise ValueError(
            f"--hub-service-account {text!r}: give NAMESPACE/NAME, e.g. jhub/hub "
            "(Zero to JupyterHub names the hub's ServiceAccount 'hub')"
        )
    return parts[0], parts[1]


class _Forbidden(Exception):
    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


#: where Kubernetes mounts a pod's service account token (kubernetes.io/docs/tasks/run-application/
#: access-api-from-pod/): with ``KUBERNETES_SERVICE_HOST``, the sign that doctor runs in a cluster
SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"


def credentials_source(kubeconfig: str | None, server: str | None) -> tuple[str, str | None]:
    """Which credentials doctor uses: ``("kubeconfig", path)``, ``("in-cluster", None)`` or
    ``("none", None)`` (a bare ``--server``), in the order of the module's docstring."""
    if kubeconfig:
        return "kubeconfig", kubeconfig
    if server:
        return "none", None
    if os.environ.get("KUBECONFIG"):
        return "kubeconfig", os.environ["KUBECONFIG"]
    if os.environ.get("KUBERNETES_SERVICE_HOST") and os.path.isfile(SERVICE_ACCOUNT_TOKEN):
        return "in-cluster", None
    return "kubeconfig", os.path.expanduser("~/.kube/config")


async def _configure(kubeconfig: str | None, context: str | None, server: str | None) -> Any:
    from kubernetes_asyncio import client, config
    from kubernetes_asyncio.config.config_exception import ConfigException

    cfg = client.Configuration()
    kind, path = credentials_source(kubeconfig, server)
    try:
        if kind == "in-cluster":
            config.load_incluster_config(client_configuration=cfg)
        elif kind == "kubeconfig":
            if not os.path.isfile(path) and os.pathsep not in path:
                raise ConfigException(f"{path} does not exist")
            await config.load_kube_config(
                config_file=path, context=context, client_configuration=cfg, persist_config=False
            )
    except (ConfigException, OSError, ValueError, TypeError, KeyError) as e:
        where = "the pod's service account (in-cluster)" if kind == "in-cluster" else path
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise GatherError(
            f"cannot load Kubernetes credentials from {where}: {reason}; pass --kubeconfig PATH "
            "(and --context NAME) or --server URL, or run doctor in a pod"
        ) from None
    if server:
        cfg.host = server.rstrip("/")
    return cfg


class _Reader:
    def __init__(self, api_client: Any, server: str, timeout: float, page_size: int):
        from kubernetes_asyncio import client

        self.core = client.CoreV1Api(api_client)
        self.authz = client.AuthorizationV1Api(api_client)
        self.server = server
        self.timeout = timeout
        self.page_size = page_size

    async def _call(self, fn: Any, **params: Any) -> tuple[int, bytes]:
        import aiohttp

        try:
            resp = await asyncio.wait_for(
                fn(_preload_content=False, _request_timeout=self.timeout, **params), self.timeout + 5
            )
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as e:
            reason = str(e) or type(e).__name__
            raise GatherError(
                f"cannot reach the Kubernetes API at {self.server}: {reason}; check --server/--kubeconfig "
                "and that the cluster is up"
            ) from None
        try:
            body = await resp.read()
        finally:
            resp.release()
        return resp.status, body

    async def list_all(self, what: str, fn: Any = None) -> list[dict]:
        """Every object, page by page (``fn``: the list call, default for nodes or pods); raises _Forbidden on 403."""
        fn = fn or (self.core.list_node if what == "nodes" else self.core.list_pod_for_all_namespaces)
        for _attempt in range(3):
            items: list[dict] = []
            token: str | None = None
            while True:
                params: dict[str, Any] = {"limit": self.page_size}
                if token:
                    params["_continue"] = token
                code, body = await self._call(fn, **params)
                if code == 410 and token:
                    break  # the continue token expired: list again from the start
                if code == 401:
                    raise GatherError(
                        f"listing {what} at {self.server}: {explain(status_of(code, body))}; refresh the "
                        "credentials (e.g. re-run your cloud's get-credentials command) or pass --kubeconfig"
                    )
                if code == 403:
                    raise _Forbidden(status_of(code, body).text)
                if code != 200:
                    raise GatherError(f"listing {what} at {self.server} failed: {explain(status_of(code, body))}")
                try:
                    doc = json.loads(body)
                except ValueError:
                    raise GatherError(f"listing {what} at {self.server}: the answer is not JSON") from None
                items.extend(i for i in doc.get("items") or () if isinstance(i, dict))
                token = (doc.get("metadata") or {}).get("continue") or None
                if not token:
                    return items
        raise GatherError(f"listing {what} at {self.server}: the list kept expiring (410 Gone); try again")

    async def review(self, verb: str, resource: str, namespace: str | None,
                     subject: tuple[str, str] | None, group: str = "") -> RbacCheck | None:
        """One access review; None when the server has no authorization API (404)."""
        attrs: dict[str, Any] = {"verb": verb, "resource": resource, "group": group}
        if namespace:
            attrs["namespace"] = namespace
        if subject is None:
            how = "SelfSubjectAccessReview"
            body = {"apiVersion": "authorization.k8s.io/v1", "kind": how, "spec": {"resourceAttributes": attrs}}
            code, raw = await self._call(self.authz.create_self_subject_access_review, body=body)
        else:
            how = "SubjectAccessReview"
            ns, name = subject
            # the identity the API server gives a service account's token
            # (kubernetes.io "Service accounts": username and groups)
            spec = {
                "resourceAttributes": attrs,
                "user": f"system:serviceaccount:{ns}:{name}",
                "groups": ["system:serviceaccounts", f"system:serviceaccounts:{ns}", "system:authenticated"],
            }
            body = {"apiVersion": "authorization.k8s.io/v1", "kind": how, "spec": spec}
            code, raw = await self._call(self.authz.create_subject_access_review, body=body)
        if code == 404:
            return None
        if code in (401, 403):
            return RbacCheck(verb, resource, namespace, None, how,
                             f"may not create {how}s: {status_of(code, raw).text}")
        if code not in (200, 201):
            return RbacCheck(verb, resource, namespace, None, how, status_of(code, raw).text)
        try:
            status = json.loads(raw).get("status") or {}
        except (ValueError, AttributeError):
            return RbacCheck(verb, resource, namespace, None, how, "unreadable answer")
        allowed = bool(status.get("allowed")) and not status.get("denied")
        return RbacCheck(verb, resource, namespace, allowed, how, str(status.get("reason") or ""))

    async def probe_watch(self, what: str) -> RbacCheck:
        """Fallback: open a watch, read only its status code, close it."""
        import aiohttp

        fn = self.core.list_node if what == "nodes" else self.core.list_pod_for_all_namespaces
        try:
            resp = await asyncio.wait_for(
                fn(watch=True, timeout_seconds=1, _preload_content=False, _request_timeout=self.timeout),
                self.timeout,
            )
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as e:
            return RbacCheck("watch", what, None, None, "watch call", str(e) or type(e).__name__)
        try:
            code = resp.status
            body = await resp.read() if code in (401, 403) else b""
        finally:
            resp.close()
        if code in (401, 403):
            return RbacCheck("watch", what, None, False, "watch call", status_of(code, body).text)
        return RbacCheck("watch", what, None, code == 200, "watch call", "" if code == 200 else f"HTTP {code}")


def _hub_namespace(service_account: tuple[str, str] | None) -> str | None:
    if service_account:
        return service_account[0]
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        try:
            with open(_SA_NAMESPACE_FILE, encoding="utf-8") as f:
                return f.read().strip() or None
        except OSError:
            return None
    return None


async def _list_both(reader: _Reader) -> tuple[dict[str, list[dict] | None], dict[str, RbacCheck]]:
    """Nodes and pods (None when forbidden), and what each list call says of the rights."""
    found: dict[str, list[dict] | None] = {}
    listed: dict[str, RbacCheck] = {}
    for what in ("nodes", "pods"):
        try:
            found[what] = await reader.list_all(what)
        except _Forbidden as e:
            found[what] = None
            listed[what] = RbacCheck("list", what, None, False, "list call", e.message)
        else:
            listed[what] = RbacCheck("list", what, None, True, "list call")
    return found, listed


async def _by_trying(reader: _Reader, nodes: list[dict] | None, listed: dict[str, RbacCheck]) -> list[RbacCheck]:
    """Without an authorization API: the rights the calls themselves show."""
    checks = [listed["nodes"], listed["pods"]]
    name = (nodes[0].get("metadata") or {}).get("name") if nodes else None
    if name:
        code, body = await reader._call(reader.core.read_node, name=name)
        checks.append(RbacCheck("get", "nodes", None, code == 200 if code != 404 else None,
                                "get call", "" if code == 200 else status_of(code, body).text))
    for what in ("nodes", "pods"):
        if listed[what].allowed:
            checks.append(await reader.probe_watch(what))
    return checks


async def _rbac_checks(reader: _Reader, hub_service_account: tuple[str, str] | None, namespace: str | None,
                       nodes: list[dict] | None, listed: dict[str, RbacCheck]) -> tuple[list[RbacCheck], bool]:
    """An access review per right the hub needs (``namespace``: the hub's, for its Role's rights);
    the calls themselves when there is no review API.  Also says whether the server answers reviews."""
    wanted: list[tuple[str, str, str | None]] = [(v, r, None) for v, r in REQUIRED_RBAC]
    if namespace:
        wanted += [(v, r, namespace) for v, r in REQUIRED_NAMESPACED_RBAC]
    first = await reader.review(*wanted[0], hub_service_account)
    if first is not None:
        rest = await asyncio.gather(*(reader.review(v, r, ns, hub_service_account) for v, r, ns in wanted[1:]))
        return [first] + [
            c if c is not None else RbacCheck(v, r, ns, None, first.how, "the access review answered 404")
            for c, (v, r, ns) in zip(rest, wanted[1:])
        ], True
    if hub_service_account is not None:
        return [RbacCheck(v, r, ns, None, "SubjectAccessReview", "the API server has no authorization.k8s.io/v1 API")
                for v, r, ns in wanted], False
    return await _by_trying(reader, nodes, listed), False


def _subject(hub_service_account: tuple[str, str] | None, kubeconfig: str | None, server: str | None) -> str:
    if hub_service_account is not None:
        return f"the hub's service account system:serviceaccount:{hub_service_account[0]}:{hub_service_account[1]}"
    if os.environ.get("KUBERNETES_SERVICE_HOST") and not (kubeconfig or server):
        return "this pod's service account"
    return "the credentials doctor runs with"


async def gather(
    *,
    kubeconfig: str | None = None,
    context: str | None = None,
    server: str | None = None,
    hub_service_account: tuple[str, str] | None = None,
    page_size: int = 500,
    timeout: float = 30.0,
    kueue: bool = False,
    kueue_namespace: str | None = None,
    kueue_queue: str | None = None,
) -> ClusterState:
    """Read nodes, pods, DRA objects and the hub's access rights; raises :class:`GatherError`."""
    from kubernetes_asyncio import client

    cfg = await _configure(kubeconfig, context, server)
    url = cfg.host
    async with client.ApiClient(configuration=cfg) as api_client:
        reader = _Reader(api_client, url, timeout, page_size)
        found, listed = await _list_both(reader)
        namespace = _hub_namespace(hub_service_account)
        checks, reviews = await _rbac_checks(reader, hub_service_account, namespace, found["nodes"], listed)
        rbac = RbacFacts(_subject(hub_service_account, kubeconfig, server), tuple(checks))
        dra = await _gather_dra(reader, api_client, hub_service_account, namespace, reviews=reviews)
        queued = None
        if kueue:  # the servers' namespace: the config's, else the hub's service account's
            queued = await _gather_kueue(reader, api_client, kueue_namespace or namespace or "default", kueue_queue)
        return ClusterState(server=url, nodes=found["nodes"], pods=found["pods"], rbac=rbac, dra=dra, kueue=queued)


async def _gather_kueue(reader: _Reader, api_client: Any, namespace: str, queue: str | None = None) -> KueueState:
    """LocalQueues (of ``namespace``), ClusterQueues and ResourceFlavors when the cluster serves
    ``kueue.x-k8s.io/v1beta2``, and whether the visibility APIService is Available."""
    from functools import partial

    from kubernetes_asyncio import client

    custom = client.CustomObjectsApi(api_client)
    code, body = await reader._call(partial(api_client.call_api, "/apis/kueue.x-k8s.io/v1beta2", "GET",
                                            response_types_map={200: "object"}, auth_settings=["BearerToken"],
                                            _return_http_data_only=True))
    if code != 200:
        return KueueState(served=False, namespace=namespace)
    state = KueueState(served=True, namespace=namespace)
    lists = (("local_queues", partial(custom.list_namespaced_custom_object, "kueue.x-k8s.io", "v1beta2", namespace,
                                      "localqueues")),
             ("cluster_queues", partial(custom.list_cluster_custom_object, "kueue.x-k8s.io", "v1beta2", "clusterqueues")),
             ("flavors", partial(custom.list_cluster_custom_object, "kueue.x-k8s.io", "v1beta2", "resourceflavors")))
    for attr, fn in lists:
        try:
            setattr(state, attr, await reader.list_all(attr.replace("_", " "), fn))
        except _Forbidden:
            setattr(state, attr, None)
    api = client.ApiregistrationV1Api(api_client)
    code, body = await reader._call(api.read_api_service, name=VISIBILITY_APISERVICE)
    if code == 200:
        try:
            cond = next((c for c in (json.loads(body).get("status") or {}).get("conditions") or ()
                         if isinstance(c, dict) and c.get("type") == "Available"), None)
        except ValueError:
            cond = None
        state.visibility = bool(cond and cond.get("status") == "True")
        if not state.visibility:
            state.visibility_reason = (f"{cond.get('reason')}: {cond.get('message')}" if cond
                                       else "the APIService has no Available condition")
    elif code == 404:
        state.visibility, state.visibility_reason = False, f"the APIService {VISIBILITY_APISERVICE} does not exist"
    if queue is not None:
        await _probe_webhook(reader, state, queue)
    return state


async def _probe_webhook(reader: _Reader, state: KueueState, queue: str) -> None:
    """Create a queued pod with ``dryRun=All``: Kueue's webhook must answer and gate it."""
    from functools import partial

    code, body = await reader._call(partial(reader.core.create_namespaced_pod, state.namespace, probe_pod(queue),
                                            dry_run="All"))
    if code in (401, 403):
        return  # doctor may not create pods here: not checked
    try:
        doc = json.loads(body)
    except ValueError:
        doc = {}
    if code != 201:
        state.webhook, state.webhook_reason = False, explain(status_of(code, body))
        return
    gates = (doc.get("spec") or {}).get("schedulingGates") or ()
    if any(isinstance(g, dict) and g.get("name") == ADMISSION_GATE for g in gates):
        state.webhook = True
    else:
        state.webhook, state.webhook_reason = False, (
            f"a pod with label kueue.x-k8s.io/queue-name={queue} in namespace {state.namespace} was admitted "
            f"without Kueue's scheduling gate {ADMISSION_GATE}: Kueue's pod webhook is not configured for it "
            "(integrations.frameworks without \"pod\", or managedJobsNamespaceSelector leaves the namespace out)")


# (resource, ResourceV1Api list method, DraState field)
_DRA_LISTS = (("deviceclasses", "list_device_class", "classes"), ("resourceslices", "list_resource_slice", "slices"),
              ("resourceclaims", "list_resource_claim_for_all_namespaces", "claims"))


async def _gather_dra(reader: _Reader, api_client: Any, subject: tuple[str, str] | None,
                      namespace: str | None, *, reviews: bool) -> DraState:
    """DeviceClasses, ResourceSlices and ResourceClaims when the cluster serves
    ``resource.k8s.io/v1`` (discovery: ``GET /apis/resource.k8s.io/v1``), and the hub's DRA rights."""
    from kubernetes_asyncio import client

    api = client.ResourceV1Api(api_client)
    code, body = await reader._call(api.get_api_resources)
    try:
        names = {r.get("name") for r in json.loads(body).get("resources") or ()} if code == 200 else set()
    except (ValueError, AttributeError):
        names = set()
    if not all(what in names for what, _, _ in _DRA_LISTS):
        return DraState(served=False)
    state = DraState(served=True)
    checks: list[RbacCheck] = []
    for what, method, attr in _DRA_LISTS:
        try:
            setattr(state, attr, await reader.list_all(what, getattr(api, method)))
        except _Forbidden as e:
            checks.append(RbacCheck("list", what, None, False, "list call", e.message))
    if reviews:
        wanted = [(v, r, None) for v, r in REQUIRED_DRA_RBAC]
        if namespace:
            wanted += [(v, r, namespace) for v, r in REQUIRED_DRA_NAMESPACED_RBAC]
        found = await asyncio.gather(*(reader.review(v, r, ns, subject, DRA_GROUP) for v, r, ns in wanted))
        checks = [c for c in found if c is not None]
    state.rbac = tuple(checks)
    return state
