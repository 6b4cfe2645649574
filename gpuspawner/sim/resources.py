"""The resources the simulated API server serves: names, kinds, scopes and API groups.
Design notes: docs/simulated-apiserver.md.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ResourceInfo", "RESOURCES", "DEFAULT_NAMESPACES", "IMMORTAL_NAMESPACES",
           "GENERATE_NAME_ALPHABET", "MAX_GENERATED_BASE",
           "group_versions", "SUBRESOURCES", "SUBRESOURCE_GROUPS"]


# --- resources ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ResourceInfo:
    plural: str
    singular: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    status_subresource: bool = False
    # the delete response carries the object (ReturnDeletedObject in
    # pkg/registry/core/<kind>/storage/storage.go; a Success Status otherwise)
    returns_deleted_object: bool = False
    # "" is the core group, served under /api/v1; any other under /apis/{group}/{version}
    group: str = ""
    version: str = "v1"
    # kubectl's categories (``kubectl get all`` lists the "all" category)
    categories: tuple[str, ...] = ()

    @property
    def list_kind(self) -> str:
        return self.kind + "List"

    @property
    def api_version(self) -> str:
        """The objects' ``apiVersion``: ``v1`` for core, else ``group/version``."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def url_prefix(self) -> str:
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"


RESOURCES: dict[str, ResourceInfo] = {
    r.plural: r
    for r in (
        ResourceInfo("configmaps", "configmap", "ConfigMap", True, ("cm",)),
        ResourceInfo("events", "event", "Event", True, ("ev",)),
        ResourceInfo("leases", "lease", "Lease", True, group="coordination.k8s.io"),
        ResourceInfo("namespaces", "namespace", "Namespace", False, ("ns",), True, True),
        ResourceInfo("nodes", "node", "Node", False, ("no",), True),
        ResourceInfo("persistentvolumeclaims", "persistentvolumeclaim", "PersistentVolumeClaim",
                     True, ("pvc",), True, True),
        ResourceInfo("persistentvolumes", "persistentvolume", "PersistentVolume", False, ("pv",), True, True),
        # No kind served here keeps metadata.generation in 1.32, the version
        # /version reports (pods gained it in 1.33, KEP-5067).
        ResourceInfo("pods", "pod", "Pod", True, ("po",), True, True, categories=("all",)),
        ResourceInfo("secrets", "secret", "Secret", True),
        ResourceInfo("serviceaccounts", "serviceaccount", "ServiceAccount", True, ("sa",), False, True),
        ResourceInfo("services", "service", "Service", True, ("svc",), True, True, categories=("all",)),
        # resource.k8s.io/v1 (Dynamic Resource Allocation, GA in 1.34): pkg/registry/resource/*/storage
        # (ReturnDeletedObject: true; only ResourceClaim has a status subresource)
        ResourceInfo("deviceclasses", "deviceclass", "DeviceClass", False, (), False, True,
                     group="resource.k8s.io"),
        ResourceInfo("resourceclaims", "resourceclaim", "ResourceClaim", True, (), True, True,
                     group="resource.k8s.io"),
        ResourceInfo("resourceclaimtemplates", "resourceclaimtemplate", "ResourceClaimTemplate", True, (), False,
                     True, group="resource.k8s.io"),
        ResourceInfo("resourceslices", "resourceslice", "ResourceSlice", False, (), False, True,
                     group="resource.k8s.io"),
        # storage.k8s.io/v1: pkg/registry/storage/storageclass/storage (no status subresource)
        ResourceInfo("storageclasses", "storageclass", "StorageClass", False, ("sc",), False, True,
                     group="storage.k8s.io"),
    )
}


# Subresources other than status, as discovery lists them: plural -> (name, kind, verbs).
SUBRESOURCES: dict[str, tuple[tuple[str, str, tuple[str, ...]], ...]] = {
    "pods": (("attach", "PodAttachOptions", ("create", "get")), ("binding", "Binding", ("create",)),
             ("eviction", "Eviction", ("create",)), ("exec", "PodExecOptions", ("create", "get")),
             ("log", "Pod", ("get",))),
    "namespaces": (("finalize", "Namespace", ("update",)),),
}
# Subresources whose kind lives in another API group, as discovery names it:
# (plural, subresource) -> (group, version) (pods/eviction takes a policy/v1 Eviction).
SUBRESOURCE_GROUPS: dict[tuple[str, str], tuple[str, str]] = {
    ("pods", "eviction"): ("policy", "v1"),
}


def group_versions() -> dict[str, list[ResourceInfo]]:
    """The served resources by ``apiVersion`` (``v1`` first, then groups in name order)."""
    out: dict[str, list[ResourceInfo]] = {}
    for info in sorted(RESOURCES.values(), key=lambda i: (i.group != "", i.group, i.plural)):
        out.setdefault(info.api_version, []).append(info)
    return out


DEFAULT_NAMESPACES = ("default", "kube-node-lease", "kube-public", "kube-system")
# plugin/pkg/admission/namespace/lifecycle: these may not be deleted.
IMMORTAL_NAMESPACES = frozenset({"default", "kube-system", "kube-public"})

# k8s.io/apiserver/pkg/storage/names/generate.go: 5 characters from the
# alphabet of k8s.io/apimachinery/pkg/util/rand (no vowels, no 0/1/3).
GENERATE_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
MAX_GENERATED_BASE = 63 - 5
