"""``GPUCapacitySettings``: the capacity knobs the spawner and ``GET /hub/api/gpus`` share.

``GPUSpawner`` inherits these traits (an admin writes ``c.GPUSpawner.<knob>``);
the REST handler, which has no spawner instance, rebuilds them from the hub's
config with :meth:`GPUCapacitySettings.from_hub_config`.  No JupyterHub import:
traitlets, the pure rule layers, and ``metrics`` for ``/hub/metrics``'
capacity series; the capacity cache (kubernetes_asyncio) is imported only
when :meth:`GPUCapacitySettings.shared_capacity_cache` first runs.
"""

from __future__ import annotations

import logging
import weakref
from typing import Any

from traitlets import Dict, Float, List, TraitError, Unicode, validate
from traitlets.config import Config, Configurable

from gpuspawner.hub import metrics
from gpuspawner.spawn.access import AccessRules
from gpuspawner.capacity.config import CapacityConfig, DeclaredPool
from gpuspawner.spawn.profiles import GPUProfileSpec, PoolRule

log = logging.getLogger(__name__)

# the cache whose snapshot /hub/metrics reads (one per process; see _serve_capacity_metrics)
_metrics_cache: weakref.ref | None = None


def _serve_capacity_metrics(cache: Any) -> None:
    """Register gpuspawner's collector on the registry ``/hub/metrics``
    serves, reading capacity from ``cache`` (the first time it is seen)."""
    global _metrics_cache
    if _metrics_cache is not None and _metrics_cache() is cache:
        return
    try:
        metrics.install(snapshot=cache.snapshot)
    except Exception as e:  # metrics never stop a spawn
        log.error("gpuspawner metrics could not read GPU capacity: %s", e)
        return
    _metrics_cache = weakref.ref(cache)


def _names_or_default(help: str) -> List:
    """A list-of-names knob whose None (its default) keeps gpuspawner's own
    list (``capacity.config.CapacityConfig``'s field defaults)."""
    return List(Unicode(), default_value=None, allow_none=True, config=True, help=help)


class GPUCapacitySettings(Configurable):
    """The capacity knobs both the spawner and ``GET /hub/api/gpus`` read.

    ``GPUSpawner`` inherits them, so an admin writes ``c.GPUSpawner.<knob>``;
    the REST handler, which has no spawner, rebuilds them from the hub's
    config with :meth:`from_hub_config`.
    """

    gpu_resources = _names_or_default(
        """
        Extended resource names that are GPUs. None keeps gpuspawner's default
        (``nvidia.com/gpu``, ``nvidia.com/gpu.shared``, ``amd.com/gpu``).

            c.GPUSpawner.gpu_resources = ["nvidia.com/gpu", "amd.com/gpu"]
        """
    )
    gpu_resource_prefixes = _names_or_default(
        """
        Prefixes of extended resource names that are GPUs (MIG slices under the
        NVIDIA device plugin's "mixed" strategy). None keeps the default
        (``nvidia.com/mig-``).

            c.GPUSpawner.gpu_resource_prefixes = ["nvidia.com/mig-"]
        """
    )
    gpu_node_group_labels = _names_or_default(
        """
        Node labels that name a node group (GKE node pool, EKS node group, AKS
        agent pool, Karpenter NodePool...); the first one a node carries splits
        its GPUs into their own pool. None keeps the default list.

            c.GPUSpawner.gpu_node_group_labels = ["cloud.google.com/gke-nodepool", "example.com/rack"]
        """
    )
    gpu_declared_pools = List(
        Dict(),
        config=True,
        help="""
        Pools the cluster autoscaler can create from zero nodes, which the
        watch cannot discover while they are empty. Each dict is read by
        ``gpuspawner.capacity.config.DeclaredPool.from_config``.

            c.GPUSpawner.gpu_declared_pools = [{
                "resource": "nvidia.com/gpu", "product": "NVIDIA-H100-80GB-HBM3",
                "node_group_label": "cloud.google.com/gke-nodepool", "node_group": "h100",
                "labels": {"cloud.google.com/gke-nodepool": "h100"},
                "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
                "gpus_per_node": 8, "max_nodes": 4, "minutes": 6,
            }]
        """,
    )
    gpu_reservation_ttl = Float(
        300.0,
        config=True,
        help="""
        Seconds GPUs handed to a spawn stay counted as taken before the watch
        shows its pod (then the pod itself counts).

            c.GPUSpawner.gpu_reservation_ttl = 600
        """,
    )
    gpu_capacity_stall_timeout = Float(
        90.0,
        config=True,
        help="""
        Seconds the hub's watch on the cluster may stay silent before it is
        treated as stuck and restarted, and before the GPU figures count as
        stale (spawns are then refused, or admitted unchecked with
        ``gpu_admit_without_capacity``, and ``GET /hub/api/gpus`` says
        ``"healthy": false``). The Kubernetes API server sends a watch bookmark
        about once a minute, so keep it above 60.

            c.GPUSpawner.gpu_capacity_stall_timeout = 90
        """,
    )
    gpu_pool_rules = List(
        Dict(),
        config=True,
        help="""
        How discovered pools are shown: rename, order or hide them by pool id
        (``<node group>:<product>:<resource>``) or glob. A pool takes the first
        rule it matches; pools appear in rule order, unmatched pools last.

            c.GPUSpawner.gpu_pool_rules = [
                {"match": "h100:*", "display_name": "H100 80 GB"},
                {"match": "*:nvidia.com/mig-*", "hide": True},
            ]

        A rule may also set ``allowed_groups``: the JupyterHub groups that may
        see and use the pools it matches (empty: everyone; admins always may).
        A pool's groups come from the first matching rule that sets the key,
        so a rule that only renames never opens a pool (docs/access.md).

            c.GPUSpawner.gpu_pool_rules = [
                {"match": "h100:*", "allowed_groups": ["research", "staff"]},
                {"match": "*:nvidia.com/mig-*", "allowed_groups": []},
                {"match": "*", "allowed_groups": ["gpu-users"]},
            ]
        """,
    )

    gpu_profiles = List(
        Dict(),
        config=True,
        help="""
        GPU profiles, offered after the admin's own ``profile_list``. Each
        has a ``slug`` and optionally ``display_name``, ``description``,
        ``default``, ``kubespawner_override`` (as in ``profile_list``),
        ``pools`` (``include``/``exclude`` globs on pool ids), ``max_gpus``
        (per server), ``profile_options`` (as in ``profile_list``; the
        options ``gpu_pool`` and ``gpus`` are added by gpuspawner) and
        ``allowed_groups`` (JupyterHub groups that may see and use the
        profile; absent or empty: everyone; admins always may; see
        docs/access.md).

            c.GPUSpawner.gpu_profiles = [{
                "slug": "gpu",
                "display_name": "GPU server",
                "kubespawner_override": {"image": "quay.io/jupyter/pytorch-notebook:cuda12-latest"},
                "pools": {"exclude": ["*:nvidia.com/mig-*"]},
                "max_gpus": 4,
            }]
        """,
    )
    @validate("gpu_profiles")
    def _validate_gpu_profiles(self, proposal):
        slugs = set()
        for i, d in enumerate(proposal.value):
            try:
                spec = GPUProfileSpec.from_config(d, where=f"gpu_profiles[{i}]")
            except ValueError as e:
                raise TraitError(str(e)) from None
            if spec.slug in slugs:
                raise TraitError(f"gpu_profiles[{i}]: slug {spec.slug!r} is used twice; slugs must be unique")
            slugs.add(spec.slug)
        try:
            AccessRules.from_config(proposal.value)
        except ValueError as e:
            raise TraitError(str(e)) from None
        return proposal.value

    @validate("gpu_pool_rules")
    def _validate_pool_rules(self, proposal):
        try:
            for i, rule in enumerate(proposal.value):
                PoolRule.from_config(rule, where=f"gpu_pool_rules[{i}]")
            AccessRules.from_config((), proposal.value)
        except ValueError as e:
            raise TraitError(str(e)) from None
        return proposal.value

    @validate("gpu_resources", "gpu_resource_prefixes", "gpu_node_group_labels")
    def _validate_names(self, proposal):
        value = proposal.value
        if value is not None and not all(v.strip() for v in value):
            raise TraitError(f"{proposal.trait.name} may not contain empty names: {value!r}")
        return value

    @validate("gpu_reservation_ttl", "gpu_capacity_stall_timeout")
    def _validate_ttl(self, proposal):
        if not proposal.value > 0 or proposal.value == float("inf"):
            raise TraitError(
                f"{proposal.trait.name} must be a positive number of seconds, not {proposal.value!r}"
            )
        return proposal.value

    @validate("gpu_declared_pools")
    def _validate_declared(self, proposal):
        for i, d in enumerate(proposal.value):
            try:
                DeclaredPool.from_config(d)
            except (ValueError, TypeError) as e:
                raise TraitError(f"gpu_declared_pools[{i}]: {e}") from None
        return proposal.value

    @classmethod
    def from_hub_config(cls, config: Config, spawner_class: type) -> GPUCapacitySettings:
        """The settings an admin gave ``c.<spawner class>`` (or any class in
        its MRO, base first, as traitlets resolves sections) in ``config``.

        ``spawner_class`` is the hub's spawner class when it is a ``GPUCapacitySettings``
        subclass, else ``GPUSpawner`` (whose sections the docs tell an admin to write):
        :func:`gpuspawner.hub.spawner.capacity_settings_class` picks it."""
        names = set(GPUCapacitySettings.class_trait_names(config=True))
        merged = Config()
        for klass in reversed(spawner_class.mro()):
            name = klass.__name__
            if issubclass(klass, Configurable) and config is not None and name in config:
                section = config[name]
                merged.merge(Config({k: v for k, v in section.items() if k in names}))
        return GPUCapacitySettings(config=Config({"GPUCapacitySettings": merged}))

    def pool_rules(self) -> tuple[PoolRule, ...]:
        return tuple(PoolRule.from_config(r) for r in self.gpu_pool_rules)

    def gpu_profile_specs(self) -> tuple[GPUProfileSpec, ...]:
        return tuple(GPUProfileSpec.from_config(d) for d in self.gpu_profiles)

    def access_rules(self) -> AccessRules:
        """The ``allowed_groups`` of ``gpu_profiles`` and ``gpu_pool_rules``."""
        return AccessRules.from_config(self.gpu_profiles, self.gpu_pool_rules)

    def capacity_config(self) -> CapacityConfig:
        """The ``CapacityConfig`` these settings describe (built once)."""
        cached = self.__dict__.get("_gpu_capacity_config")
        if cached is not None:
            return cached
        kwargs: dict[str, Any] = {
            "declared_pools": tuple(DeclaredPool.from_config(d) for d in self.gpu_declared_pools),
            "reservation_ttl": self.gpu_reservation_ttl,
            "stall_timeout": self.gpu_capacity_stall_timeout,
        }
        for field, value in (
            ("gpu_resources", self.gpu_resources),
            ("gpu_resource_prefixes", self.gpu_resource_prefixes),
            ("node_group_labels", self.gpu_node_group_labels),
        ):
            if value is not None:
                kwargs[field] = tuple(value)
        config = CapacityConfig(**kwargs)
        self.__dict__["_gpu_capacity_config"] = config
        return config

    def shared_capacity_cache(self):
        """The process's shared ``CapacityCache`` (started on first use; the
        cache module is imported only then, as ``gpuspawner.capacity`` does).

        The first call also points ``/hub/metrics``' capacity series at it,
        whoever asks first: a spawner (spawn page, spawn) or ``GET /hub/api/gpus``."""
        from gpuspawner.capacity.cache import CapacityCache

        cache = CapacityCache.shared(self.capacity_config())
        _serve_capacity_metrics(cache)
        return cache
