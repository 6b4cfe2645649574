"""Who a container's process runs as: the securityContext's runAsUser, runAsGroup, fsGroup and
supplementalGroups over the image's user, and whether this machine can switch to it.
Design notes: docs/simulated-nodes.md.
"""

from __future__ import annotations

import functools
import os
import stat
import sys
from dataclasses import dataclass
from typing import Any, Callable, Mapping

__all__ = ["RunAs", "RunAsError", "IMAGE_USERS", "image_user", "image_dirs", "resolve", "for_process", "prepare"]

#: image repository prefix -> the (uid, gid) of its ``USER``: the Jupyter Docker Stacks (and
#: JupyterHub's singleuser image, built on them) run as jovyan, ``NB_UID=1000``, ``NB_GID=100``
#: (jupyter/docker-stacks, images/docker-stacks-foundation/Dockerfile); other images run as root
IMAGE_USERS: dict[str, tuple[int, int]] = {
    prefix: (1000, 100) for prefix in (
        "quay.io/jupyter/", "docker.io/jupyter/", "jupyter/",
        "quay.io/jupyterhub/singleuser", "docker.io/jupyterhub/singleuser", "jupyterhub/singleuser")
}


class RunAsError(Exception):
    """The container cannot run as asked; ``reason`` is the waiting reason a kubelet gives."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class RunAs:
    uid: int
    gid: int
    groups: tuple[int, ...] = ()
    explicit: bool = False  # the securityContext names the user or a group (not only the image)

    def config(self) -> dict[str, Any]:
        """What the runtime's shim switches to before ``execve``, and the stand-in image's
        directories it makes reachable to that user in the container's mount namespace."""
        return {"uid": self.uid, "gid": self.gid, "groups": list(self.groups), "reach": list(image_dirs())}


@functools.lru_cache(maxsize=1)
def image_dirs() -> tuple[str, ...]:
    """The stand-in image's files: the Python environment running the node agent (its prefixes,
    its interpreter's directory, what it imports from)."""
    found = [sys.prefix, sys.exec_prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable)),
             *(p for p in sys.path if p)]
    return tuple(dict.fromkeys(os.path.realpath(p) for p in found if os.path.isdir(p)))


def image_user(image: str) -> tuple[int, int]:
    """The (uid, gid) the image runs as; root for an image not in ``IMAGE_USERS``.  Pure."""
    name = image.split("@", 1)[0]
    return next((ids for prefix, ids in IMAGE_USERS.items() if name.startswith(prefix)), (0, 0))


def _int(sc: Mapping[str, Any], key: str) -> int | None:
    v = sc.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def resolve(pod: Mapping[str, Any], container: Mapping[str, Any]) -> RunAs:
    """The container's user and groups as a kubelet gives them to the runtime: the container's
    securityContext over the pod's, else the image's user; without runAsGroup, the image's group
    when the user is the image's, else 0; fsGroup and supplementalGroups as supplementary groups.
    Raises ``RunAsError`` when ``runAsNonRoot`` forbids the result (the kubelet's wording,
    pkg/kubelet/kuberuntime/security_context_others.go).  Pure."""
    psc = (pod.get("spec") or {}).get("securityContext") or {}
    csc = container.get("securityContext") or {}
    img_uid, img_gid = image_user(str(container.get("image") or ""))
    uid, gid = _int(csc, "runAsUser"), _int(csc, "runAsGroup")
    uid = uid if uid is not None else _int(psc, "runAsUser")
    gid = gid if gid is not None else _int(psc, "runAsGroup")
    groups = [g for g in [_int(psc, "fsGroup"), *(psc.get("supplementalGroups") or [])]
              if isinstance(g, int) and not isinstance(g, bool) and g >= 0]
    explicit = uid is not None or gid is not None or bool(groups)
    non_root = csc.get("runAsNonRoot", psc.get("runAsNonRoot"))
    name = container.get("name", "")
    meta = pod.get("metadata") or {}
    where = f'(pod: "{meta.get("name", "")}_{meta.get("namespace", "")}({meta.get("uid", "")})", container: {name})'
    if non_root is True and uid == 0:
        raise RunAsError("CreateContainerConfigError", f"container's runAsUser breaks non-root policy {where}")
    if uid is None:
        uid = img_uid
        if non_root is True and uid == 0:
            raise RunAsError("CreateContainerConfigError", f"container has runAsNonRoot and image will run as root {where}")
    if gid is None:
        gid = img_gid if uid == img_uid else 0
    return RunAs(uid, gid, tuple(dict.fromkeys(groups)), explicit)


def _reachable(path: str, uid: int, gids: set[int], stat_fn: Callable[[str], os.stat_result]) -> bool:
    """Whether ``uid`` (in ``gids``) may traverse every directory down to ``path`` and read it."""
    parts = os.path.realpath(path).split("/")
    for i in range(1, len(parts) + 1):
        p = "/".join(parts[:i]) or "/"
        try:
            st = stat_fn(p)
        except OSError:
            return False
        need = 4 if i == len(parts) and not stat.S_ISDIR(st.st_mode) else 1
        bits = st.st_mode >> 6 if st.st_uid == uid else st.st_mode >> 3 if st.st_gid in gids else st.st_mode
        if uid != 0 and not bits & need:
            return False
    return True


def for_process(run_as: RunAs, needs: list[str], *, euid: int | None = None, egid: int | None = None,
                stat_fn: Callable[[str], os.stat_result] = os.stat) -> RunAs | None:
    """What the shim switches to: None when the process runs as this process's own user.

    Without root, asking for another user or group is a ``RunAsError`` (CreateContainerError); the
    image's user alone runs as one's own, as a rootless runtime maps it.  As root, the image's user
    is taken only when it can reach ``needs`` (without a mount namespace: the stand-in image's
    directories and the kubelet's), else the container runs as root as before."""
    euid = os.geteuid() if euid is None else euid
    egid = os.getegid() if egid is None else egid
    if (run_as.uid, run_as.gid) == (euid, egid) and not run_as.groups:
        return None
    if euid != 0:
        if not run_as.explicit:
            return None
        theirs = set(os.getgroups()) | {egid}
        if run_as.uid == euid and run_as.gid == egid and set(run_as.groups) <= theirs:
            return None
        raise RunAsError("CreateContainerError",
                         f"the node agent runs as uid {euid} gid {egid}, not root, and cannot start a process as "
                         f"uid {run_as.uid} gid {run_as.gid}" + (f" groups {list(run_as.groups)}" if run_as.groups
                                                                  else "")
                         + ": run the node agent as root, or drop runAsUser, runAsGroup, fsGroup and "
                           "supplementalGroups from the pod's securityContext")
    if not run_as.explicit and not all(_reachable(p, run_as.uid, {run_as.gid}, stat_fn) for p in needs):
        return None
    return run_as


def prepare(kubelet_dirs: list[str], pod_dir: str, files: list[str]) -> None:
    """As root, before another user's process starts: the kubelet's directories traversable, the
    pod's directory (the container's ``$HOME``) writable as ``/tmp`` is, and the termination
    message file writable by anyone, as the kubelet makes it (kuberuntime_container.go, 0666)."""
    for d in kubelet_dirs:
        os.chmod(d, stat.S_IMODE(os.stat(d).st_mode) | 0o111)
    os.chmod(pod_dir, 0o1777)
    for f in files:
        if os.path.exists(f):
            os.chmod(f, 0o666)
