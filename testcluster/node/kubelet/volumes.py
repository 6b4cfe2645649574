"""A pod's volumes, set up as the kubelet's volume plugins set them up.
Design notes: docs/simulated-nodes.md.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import stat
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping

from .env import ConfigError, expand, field_value, resource_value
from .runtime import Mount

__all__ = ["VolumeError", "ProcessError", "Payload", "atomic_write", "configmap_payload", "secret_payload",
           "downward_payload", "service_account_token", "PodVolumes", "container_mounts", "DEFAULT_MODE",
           "SERVICE_ACCOUNT_DIR", "service_account_source", "service_account_kubeconfig"]

DEFAULT_MODE = 0o644
DATA_DIR = "..data"
# plugin directory names under volumes/ (the kubelet's escaped plugin names)
PLUGIN_DIRS = {"emptyDir": "kubernetes.io~empty-dir", "configMap": "kubernetes.io~configmap",
               "secret": "kubernetes.io~secret", "downwardAPI": "kubernetes.io~downward-api",
               "projected": "kubernetes.io~projected", "hostPath": "kubernetes.io~host-path",
               "persistentVolumeClaim": "kubernetes.io~pvc"}
READ_ONLY_PLUGINS = ("configMap", "secret", "downwardAPI", "projected")
API_AUDIENCE = "https://kubernetes.default.svc.cluster.local"
# where the ServiceAccount admission plugin mounts a pod's kube-api-access-* volume
# (k8s.io/kubernetes/plugin/pkg/admission/serviceaccount/admission.go, DefaultAPITokenMountPath)
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"

# path -> (content, mode)
Payload = dict[str, tuple[bytes, int]]
# (plural, name) -> the stored object, or None when it does not exist
Getter = Callable[[str, str], "dict | None"]


class VolumeError(Exception):
    """``MountVolume.SetUp`` failed: the FailedMount event names the volume and this message."""


class ProcessError(Exception):
    """The volume could not even be processed (an unbound claim): the pod's volumes wait."""


# -- payloads (pure) --------------------------------------------------------------------


def _mode(item: Mapping[str, Any], default: int) -> int:
    m = item.get("mode")
    return int(m) if m is not None else default


def _keyed_payload(data: Mapping[str, bytes], items: list | None, default: int, optional: bool,
                   missing: str) -> Payload:
    if not items:
        return {k: (v, default) for k, v in data.items()}
    out: Payload = {}
    for item in items:
        key = item.get("key")
        if key not in data:
            if optional:
                continue
            raise VolumeError(f"{missing}: {key}")
        out[str(item.get("path") or key)] = (data[key], _mode(item, default))
    return out


def configmap_data(cm: Mapping[str, Any]) -> dict[str, bytes]:
    data = {k: str(v).encode() for k, v in (cm.get("data") or {}).items()}
    data.update({k: base64.b64decode(v) for k, v in (cm.get("binaryData") or {}).items()})
    return data


def secret_data(secret: Mapping[str, Any]) -> dict[str, bytes]:
    data = {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}
    data.update({k: str(v).encode() for k, v in (secret.get("stringData") or {}).items()})
    return data


def configmap_payload(source: Mapping[str, Any], cm: Mapping[str, Any] | None, default: int) -> Payload:
    """``configmap.MakePayload``; ``cm`` None: it does not exist."""
    optional = bool(source.get("optional"))
    if cm is None:
        if optional:
            return {}
        raise VolumeError(f'configmap "{source.get("name", "")}" not found')
    return _keyed_payload(configmap_data(cm), source.get("items"), default, optional,
                          "configmap references non-existent config key")


def secret_payload(source: Mapping[str, Any], secret: Mapping[str, Any] | None, default: int,
                   name_key: str = "secretName") -> Payload:
    """``secret.MakePayload``; ``secret`` None: it does not exist."""
    optional = bool(source.get("optional"))
    if secret is None:
        if optional:
            return {}
        raise VolumeError(f'secret "{source.get(name_key, "")}" not found')
    return _keyed_payload(secret_data(secret), source.get("items"), default, optional,
                          "references non-existent secret key")


def downward_payload(items: list, pod: Mapping[str, Any], default: int,
                     node_allocatable: Mapping[str, Any]) -> Payload:
    """``downwardapi.CollectData``: metadata fields and container resources."""
    out: Payload = {}
    errors: list[str] = []
    containers = {c.get("name"): c for c in (pod.get("spec") or {}).get("containers") or []}
    for item in items:
        path = os.path.normpath(str(item.get("path", "")))
        try:
            if item.get("fieldRef"):
                value = field_value(pod, item["fieldRef"].get("fieldPath", ""), env_var=False)
            elif item.get("resourceFieldRef"):
                ref = item["resourceFieldRef"]
                value = resource_value(containers.get(ref.get("containerName"), {}), ref, node_allocatable)
            else:
                continue
        except ConfigError as e:
            errors.append(str(e))
            continue
        out[path] = (value.encode(), _mode(item, default))
    if errors:
        raise VolumeError(errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]")
    return out


def _b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def service_account_token(pod: Mapping[str, Any], sa: Mapping[str, Any], node: str,
                          audience: str | None, expiration: int, now: float | None = None) -> str:
    """A JWT with the claims of a bound service account token (``serviceaccount/claims.go``);
    the signature is random: this API server verifies no token."""
    now = int(now if now is not None else time.time())
    meta, sa_meta = pod.get("metadata") or {}, sa.get("metadata") or {}
    claims = {
        "aud": [audience or API_AUDIENCE], "exp": now + expiration, "iat": now, "iss": API_AUDIENCE,
        "jti": secrets.token_hex(16), "nbf": now,
        "sub": f"system:serviceaccount:{meta.get('namespace')}:{sa_meta.get('name')}",
        "kubernetes.io": {"namespace": meta.get("namespace"), "node": {"name": node},
                          "pod": {"name": meta.get("name"), "uid": meta.get("uid")},
                          "serviceaccount": {"name": sa_meta.get("name"), "uid": sa_meta.get("uid")}},
    }
    header = {"alg": "RS256", "kid": _b64url(secrets.token_bytes(32))}
    return ".".join((_b64url(json.dumps(header, separators=(",", ":")).encode()),
                     _b64url(json.dumps(claims, separators=(",", ":")).encode()),
                     _b64url(secrets.token_bytes(256))))


# -- the atomic writer -------------------------------------------------------------------


def _check_path(p: str) -> str:
    parts = Path(p).parts
    if not p or os.path.isabs(p) or ".." in parts or any(part.startswith("..") for part in parts):
        raise VolumeError(f"invalid path {p!r}: must be relative and may not contain '..'")
    return p


def atomic_write(target: str, payload: Payload) -> None:
    """Write ``payload`` into ``target`` as ``AtomicWriter.Write`` does: a new
    ``..<timestamp>`` directory, ``..data`` swapped to it by rename, a link per top-level entry,
    the old directory and stale links removed."""
    os.makedirs(target, exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("..%Y_%m_%d_%H_%M_%S.") + str(secrets.randbelow(10**9))
    ts_dir = os.path.join(target, stamp)
    os.mkdir(ts_dir, 0o755)
    for rel, (data, mode) in payload.items():
        path = os.path.join(ts_dir, _check_path(rel))
        os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
        os.chmod(path, mode & 0o7777)
    old = os.readlink(os.path.join(target, DATA_DIR)) if os.path.islink(os.path.join(target, DATA_DIR)) else None
    tmp = os.path.join(target, DATA_DIR + "_tmp")
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(stamp, tmp)
    os.rename(tmp, os.path.join(target, DATA_DIR))
    top = {Path(rel).parts[0] for rel in payload}
    for name in top:
        link = os.path.join(target, name)
        if not os.path.islink(link):
            os.symlink(os.path.join(DATA_DIR, name), link)
    for name in os.listdir(target):
        if name not in top and not name.startswith(".."):
            os.unlink(os.path.join(target, name))
    if old and old != stamp:
        shutil.rmtree(os.path.join(target, old), ignore_errors=True)


# -- a pod's volumes ----------------------------------------------------------------------


@dataclass
class _Volume:
    name: str
    plugin: str
    path: str | None = None   # set up: where its content is
    read_only: bool = False


def plugin_of(volume: Mapping[str, Any]) -> str | None:
    return next((k for k in PLUGIN_DIRS if k in volume), None)


_HOST_PATH_CHECKS = {
    "Directory": (stat.S_ISDIR, "a directory"), "File": (stat.S_ISREG, "a file"),
    "Socket": (stat.S_ISSOCK, "a socket file"), "CharDevice": (stat.S_ISCHR, "a character device"),
    "BlockDevice": (stat.S_ISBLK, "a block device"),
}


def host_path(path: str, kind: str | None) -> str:
    """``hostPath`` with its ``type`` (``pkg/volume/hostpath/host_path.go`` ``checkType``).  With
    no type a missing path is created as a directory, as the runtime does for a bind source."""
    kind = kind or ""
    if kind == "DirectoryOrCreate":
        os.makedirs(path, mode=0o755, exist_ok=True)
        kind = "Directory"
    elif kind == "FileOrCreate":
        if not os.path.exists(path):
            try:
                open(path, "a").close()
                os.chmod(path, 0o644)
            except OSError as e:
                raise VolumeError(f"open {path}: {e.strerror}") from None
        kind = "File"
    elif not kind:
        if not os.path.exists(path):
            os.makedirs(path, exist_ok=True)
        return path
    check = _HOST_PATH_CHECKS.get(kind)
    if check is None:
        raise VolumeError(f"hostPath type check failed: unknown type {kind}")
    try:
        ok = check[0](os.stat(path).st_mode)
    except OSError:
        ok = False
    if not ok:
        raise VolumeError(f"hostPath type check failed: {path} is not {check[1]}")
    return path


def _aggregate(errors: list[str]) -> str:
    # utilerrors.NewAggregate: one error is itself; several are listed in brackets
    return errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"


class PodVolumes:
    """Sets up a pod's volumes (``set_up``), keeps API-data volumes current (``refresh``)."""

    def __init__(self, pod: Mapping[str, Any], base_dir: str, get: Getter, *, node: str,
                 node_allocatable: Mapping[str, Any], disk_dir: str,
                 token: Callable[..., str] = service_account_token):
        self.pod = pod
        self.token = token  # (pod, service account, node, audience, expiration) -> the token
        self.base = base_dir
        self.get = get
        self.node = node
        self.node_allocatable = node_allocatable
        self.disk_dir = disk_dir
        self.ns = (pod.get("metadata") or {}).get("namespace") or "default"
        self.specs = {v.get("name"): v for v in (pod.get("spec") or {}).get("volumes") or []}
        self.volumes: dict[str, _Volume] = {name: _Volume(name, plugin_of(v) or "") for name, v in self.specs.items()}

    @property
    def pending(self) -> list[str]:
        return [name for name, v in self.volumes.items() if v.path is None]

    def set_up(self) -> tuple[dict[str, str], dict[str, str]]:
        """Set up each volume not yet set up: (SetUp errors, processing errors) by volume name."""
        failed, unprocessed = {}, {}
        for name in self.pending:
            try:
                self._set_up(self.volumes[name], self.specs[name])
            except VolumeError as e:
                failed[name] = str(e)
            except ProcessError as e:
                unprocessed[name] = str(e)
        return failed, unprocessed

    def refresh(self) -> dict[str, str]:
        """Write the API-data volumes again (new ConfigMap/Secret content); errors by volume."""
        failed = {}
        for name, v in self.volumes.items():
            if v.path is not None and v.plugin in READ_ONLY_PLUGINS:
                try:
                    atomic_write(v.path, self._payload(v.plugin, self.specs[name][v.plugin] or {}))
                except VolumeError as e:
                    failed[name] = str(e)
        return failed

    def _dir(self, v: _Volume) -> str:
        return os.path.join(self.base, PLUGIN_DIRS[v.plugin], v.name)

    def _set_up(self, v: _Volume, spec: Mapping[str, Any]) -> None:
        source = spec.get(v.plugin) or {}
        if v.plugin == "emptyDir":
            path = self._dir(v)
            os.makedirs(path, exist_ok=True)
            os.chmod(path, 0o777)
        elif v.plugin in READ_ONLY_PLUGINS:
            path = self._dir(v)
            atomic_write(path, self._payload(v.plugin, source))
            v.read_only = True
        elif v.plugin == "hostPath":
            path = host_path(str(source.get("path", "")), source.get("type"))
        elif v.plugin == "persistentVolumeClaim":
            path = self._claim(source)
            v.read_only = bool(source.get("readOnly"))
        else:
            raise ProcessError(f'failed to get Plugin from volumeSpec for volume "{v.name}" '
                               "err=no volume plugin matched")
        v.path = path

    def _payload(self, plugin: str, source: Mapping[str, Any]) -> Payload:
        default = int(source.get("defaultMode", DEFAULT_MODE))
        if plugin == "configMap":
            return configmap_payload(source, self.get("configmaps", source.get("name", "")), default)
        if plugin == "secret":
            return secret_payload(source, self.get("secrets", source.get("secretName", "")), default)
        if plugin == "downwardAPI":
            return downward_payload(source.get("items") or [], self.pod, default, self.node_allocatable)
        return self._projected(source, default)

    def _projected(self, source: Mapping[str, Any], default: int) -> Payload:
        """``projected.collectData``: every source, errors gathered."""
        out: Payload = {}
        errors: list[str] = []
        for src in source.get("sources") or []:
            try:
                if src.get("configMap") is not None:
                    cm = src["configMap"]
                    out.update(configmap_payload(cm, self.get("configmaps", cm.get("name", "")), default))
                elif src.get("secret") is not None:
                    s = src["secret"]
                    out.update(secret_payload(s, self.get("secrets", s.get("name", "")), default, "name"))
                elif src.get("downwardAPI") is not None:
                    out.update(downward_payload(src["downwardAPI"].get("items") or [], self.pod, default,
                                                self.node_allocatable))
                elif src.get("serviceAccountToken") is not None:
                    out.update(self._token(src["serviceAccountToken"], default))
            except VolumeError as e:
                errors.append(str(e))
        if errors:
            raise VolumeError(_aggregate(errors))
        return out

    def _token(self, tp: Mapping[str, Any], mode: int) -> Payload:
        sa_name = (self.pod.get("spec") or {}).get("serviceAccountName") or "default"
        sa = self.get("serviceaccounts", sa_name)
        if sa is None:
            raise VolumeError(f'failed to fetch token: serviceaccounts "{sa_name}" not found')
        token = self.token(self.pod, sa, self.node, tp.get("audience"),
                                      int(tp.get("expirationSeconds") or 3600))
        return {str(tp.get("path", "token")): (token.encode(), mode)}

    def _claim(self, source: Mapping[str, Any]) -> str:
        claim = str(source.get("claimName", ""))
        where = f"error processing PVC {self.ns}/{claim}"
        pvc = self.get("persistentvolumeclaims", claim)
        if pvc is None:
            raise ProcessError(f'{where}: failed to fetch PVC from API server: '
                               f'persistentvolumeclaims "{claim}" not found')
        pv_name = (pvc.get("spec") or {}).get("volumeName")
        if (pvc.get("status") or {}).get("phase") != "Bound" or not pv_name:
            raise ProcessError(f"{where}: PVC is not bound")
        pv = self.get("persistentvolumes", pv_name)
        if pv is None:
            raise ProcessError(f'{where}: failed to fetch PV {pv_name} from API server: '
                               f'persistentvolumes "{pv_name}" not found')
        spec = pv.get("spec") or {}
        if spec.get("hostPath"):
            return host_path(str(spec["hostPath"].get("path", "")), spec["hostPath"].get("type"))
        if spec.get("local"):
            return str(spec["local"].get("path", ""))
        path = os.path.join(self.disk_dir, pv_name)
        os.makedirs(path, exist_ok=True)
        return path


def _sub_path(volume_path: str, sub: str) -> str:
    """The host path of a ``subPath`` (``makeMounts``, ``subpath.SafeMakeDir``): relative, no
    ``..``, resolved inside the volume, created as a directory when missing."""
    if os.path.isabs(sub):
        raise ConfigError(f"unable to provision SubPath `{sub}`: abs paths are not allowed")
    if ".." in Path(sub).parts:
        raise ConfigError(f"unable to provision SubPath `{sub}`: must not contain '..'")
    base = os.path.realpath(volume_path)
    path = os.path.join(volume_path, sub)
    if not os.path.lexists(path):
        os.makedirs(path, mode=0o750, exist_ok=True)
    real = os.path.realpath(path)
    if real != base and not real.startswith(base + os.sep):
        raise ConfigError(f"subpath {real!r} not within volume path {base!r}")
    return real


def container_mounts(spec: Mapping[str, Any], volumes: Mapping[str, "_Volume"], env: Mapping[str, str]) -> list[Mount]:
    """A container's ``volumeMounts`` as the runtime's binds (raises ``env.ConfigError``)."""
    out: list[Mount] = []
    for vm in spec.get("volumeMounts") or []:
        vol = volumes.get(vm.get("name"))
        if vol is None or vol.path is None:
            raise ConfigError(f"cannot find volume {vm.get('name')!r} to mount into container "
                                     f"{spec.get('name')!r}")
        sub = vm.get("subPath") or ""
        if vm.get("subPathExpr"):
            sub = expand(str(vm["subPathExpr"]), env)
        source = _sub_path(vol.path, sub) if sub else vol.path
        out.append(Mount(source, str(vm.get("mountPath", "")), bool(vm.get("readOnly")) or vol.read_only))
    return out


def service_account_source(spec: Mapping[str, Any], volumes: Mapping[str, "_Volume"]) -> str | None:
    """The directory holding the service account files (``token``, ``ca.crt``, ``namespace``) a
    container mounts at ``SERVICE_ACCOUNT_DIR``; None when it mounts none there (or a sub path)."""
    for vm in spec.get("volumeMounts") or []:
        vol = volumes.get(vm.get("name"))
        if (str(vm.get("mountPath", "")).rstrip("/") == SERVICE_ACCOUNT_DIR and vol is not None
                and vol.path is not None and not vm.get("subPath") and not vm.get("subPathExpr")):
            return vol.path
    return None


def service_account_kubeconfig(server: str, source: str, namespace: str) -> str:
    """A kubeconfig (JSON, which is YAML) that reaches the API server as a client's in-cluster
    config does: the service account's token file (read again as the kubelet renews it), the
    cluster's CA from ``ca.crt``, the pod's namespace."""
    return json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "in-cluster",
        "clusters": [{"name": "in-cluster", "cluster": {"server": server,
                                                        "certificate-authority": os.path.join(source, "ca.crt")}}],
        "users": [{"name": "service-account", "user": {"tokenFile": os.path.join(source, "token")}}],
        "contexts": [{"name": "in-cluster", "context": {"cluster": "in-cluster", "user": "service-account",
                                                        "namespace": namespace}}],
    }, indent=2)


def unmountable(source: str, target: str) -> str:
    """Why the volume cannot be mounted when this machine allows no mount namespace (mount-utils'
    wording of a failed mount)."""
    return (f"mount failed: exit status 32\n"
            f"Mounting command: mount\nMounting arguments: -o bind {source} {target}\n"
            f"Output: mount: {target}: permission denied (this machine lets the simulated kubelet "
            "create no mount namespace).")
