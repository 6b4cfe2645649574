"""``GPUSpawnerSettings``: the GPUSpawner settings that ``GET /hub/api/gpus`` reads too."""

from __future__ import annotations

import functools
import json
import logging
import weakref
from typing import Any

from traitlets import Bool, Dict, Float, List, TraitError, Unicode, Union, validate
from traitlets.config import Config

from gpuspawner.cull.idle_timeouts import CullRules, RulesError, RulesFile, describe, rule_for, rules_from_mapping
from gpuspawner.hub import gpu_metrics, hub_log
from gpuspawner.hub import parsed_config as frozen
from gpuspawner.hub.parsed_config import freeze, parsed, remember, thaw
from gpuspawner.hub.homesettings import GPUHomeSettings
from gpuspawner.hub.prepull import GPUPrepullSettings
from gpuspawner.hub.gpu_hours_settings import GPUHourSettings
from gpuspawner.spawn.access import AccessRules
from gpuspawner.capacity import cache as cache_module
from gpuspawner.capacity.cache import CapacityCache
from gpuspawner.capacity.config import CapacityConfig, DeclaredPool, check_names
from gpuspawner.capacity.taintrule import DEFAULT_TOLERATED_TAINT_KEYS, check_tolerated_keys
from gpuspawner.spawn.profiles import GPUProfileSpec, PoolRule
from gpuspawner.hub.kueue_settings import KueueSettings
from gpuspawner.hub.listen_wait import ListenWaitSettings

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
        gpu_metrics.install(snapshot=cache.snapshot)
    except Exception as e:  # metrics never stop a spawn
        log.error("gpuspawner metrics could not read GPU capacity: %s", e)
        return
    _metrics_cache = weakref.ref(cache)


def _names_or_default(help: str) -> frozen.List:
    """A list-of-names knob whose None (its default) keeps gpuspawner's own
    list (``capacity.config.CapacityConfig``'s field defaults)."""
    return frozen.List(Unicode(), default_value=None, allow_none=True, config=True, help=help)


def fingerprint(*values: Any) -> str:
    """A comparable text of configuration values (dicts, lists, strings, numbers; anything else,
    such as a callable, by its ``repr``, which names the object). Dicts whose keys cannot be
    sorted together (say ``1`` and ``"a"``) are written in their own order."""
    try:
        return json.dumps(values, sort_keys=True, separators=(",", ":"), default=repr)
    except TypeError:
        return json.dumps(values, separators=(",", ":"), default=repr)


# the CapacityConfig field each list-of-names trait becomes
_CAPACITY_FIELDS = {"gpu_node_group_labels": "node_group_labels", "gpu_dra_drivers": "dra_drivers"}
# KubeSpawner's settings of its API client -> the capacity cache's client's keyword arguments
_KUBE_API = {"k8s_api_host": "host", "k8s_api_ssl_ca_cert": "ssl_ca_cert", "k8s_api_verify_ssl": "verify_ssl"}


# the traits a CapacityConfig is read from
_CAPACITY_TRAITS = ("gpu_declared_pools", "gpu_reservation_ttl", "gpu_capacity_stall_timeout", "gpu_resources",
                    "gpu_resource_prefixes", "gpu_node_group_labels", "gpu_dra_drivers", "gpu_tolerated_taint_keys")


def _profile_specs(raw: Any) -> tuple[GPUProfileSpec, ...]:
    """``gpu_profiles`` read into specs; a mistake (or a slug used twice) raises ``ValueError``."""
    specs = tuple(GPUProfileSpec.from_config(d, where=f"gpu_profiles[{i}]") for i, d in enumerate(raw))
    seen: set[str] = set()
    for i, spec in enumerate(specs):
        if spec.slug in seen:
            raise ValueError(f"gpu_profiles[{i}]: slug {spec.slug!r} is used twice; slugs must be unique")
        seen.add(spec.slug)
    return specs


def _pool_rules(value: Any) -> tuple[PoolRule, ...]:
    return tuple(PoolRule.from_config(r, where=f"gpu_pool_rules[{i}]") for i, r in enumerate(thaw(value)))


def _declared_pools(value: Any) -> tuple[DeclaredPool, ...]:
    """``gpu_declared_pools`` read into pools; a mistake raises ``TraitError`` naming the item."""
    out = []
    for i, d in enumerate(thaw(value)):
        try:
            out.append(DeclaredPool.from_config(d))
        except (ValueError, TypeError) as e:
            raise TraitError(f"gpu_declared_pools[{i}]: {e}") from None
    return tuple(out)


def _cull_source(value: Any) -> CullRules | RulesFile | None:
    """``gpu_cull_rules`` read: the rules of a dict, or a rules file read once (``RulesError`` if bad)."""
    if isinstance(value, str):
        source = RulesFile(value)
        source.read()
        return source
    return rules_from_mapping(thaw(value), "gpu_cull_rules") if value is not None else None


#: the class's former name: ``c.GPUCapacitySettings.<knob>`` in a config keeps working
LEGACY_SECTION = "GPUCapacitySettings"


class GPUSpawnerSettings(GPUHourSettings, KueueSettings, GPUPrepullSettings, GPUHomeSettings, ListenWaitSettings):
    """The GPUSpawner settings both the spawner and ``GET /hub/api/gpus`` read.

    ``GPUSpawner`` inherits them, so an admin writes ``c.GPUSpawner.<knob>``;
    the REST handler, which has no spawner, rebuilds them from the hub's
    config with :meth:`from_hub_config`.
    """

    @classmethod
    def section_names(cls) -> list[str]:
        """traitlets' config sections of the class (its MRO, base first), with
        :data:`LEGACY_SECTION` right before this class's own, as it stood when it bore the name."""
        names = super().section_names()
        i = names.index("GPUSpawnerSettings")
        return names[:i] + [LEGACY_SECTION] + names[i:]

    gpu_tolerated_taint_keys = frozen.List(
        Unicode(),
        default_value=list(DEFAULT_TOLERATED_TAINT_KEYS),
        config=True,
        help="""
        Taint keys (or globs) a GPU server may tolerate on its pool's nodes.
        The defaults are the usual GPU taints: ``nvidia.com/gpu`` (GKE, EKS
        GPU NodePools, self-managed), ``amd.com/gpu``, ``sku=gpu`` (the AKS
        recipe) and AKS spot nodes. ``node.kubernetes.io/*`` is never
        tolerated, and a wildcard that would match any key (``*``) is refused.
        A node with a NoSchedule or NoExecute taint whose key is not
        one of these takes no server, so its GPUs are not counted as free.

            c.GPUSpawner.gpu_tolerated_taint_keys = ["nvidia.com/gpu", "example.com/reserved"]
        """,
    )

    @validate("gpu_tolerated_taint_keys")
    def _validate_taint_keys(self, proposal):
        try:
            check_tolerated_keys(proposal.value)
        except ValueError as e:
            raise TraitError(f"gpu_tolerated_taint_keys: {e}") from None
        return freeze(proposal.value, "gpu_tolerated_taint_keys")

    gpu_resources = _names_or_default(
        """
        Extended resource names that are GPUs. None keeps gpuspawner's default
        (``nvidia.com/gpu``, ``nvidia.com/gpu.shared``, ``amd.com/gpu``). Only
        names that look like a device's are accepted: ``<vendor domain>/<name>``
        with a dot in the domain; ``cpu``, ``memory``, ``ephemeral-storage``,
        ``pods``, ``hugepages-*`` and ``kubernetes.io/*`` are refused.

            c.GPUSpawner.gpu_resources = ["nvidia.com/gpu", "amd.com/gpu"]
        """
    )
    gpu_resource_prefixes = _names_or_default(
        """
        Prefixes of extended resource names that are GPUs (MIG slices under the
        NVIDIA device plugin's "mixed" strategy). None keeps the default
        (``nvidia.com/mig-``). Each starts with a vendor's domain and ``/``.

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
    gpu_dra_drivers = _names_or_default(
        """
        Dynamic Resource Allocation drivers whose devices are GPUs (``ResourceSlice.spec.driver``).
        On a cluster that serves ``resource.k8s.io/v1`` their devices form DRA pools, offered beside
        the device-plugin pools (docs/dra.md). None keeps the default (``gpu.nvidia.com``, NVIDIA's
        DRA driver); an empty list turns DRA pools off.

            c.GPUSpawner.gpu_dra_drivers = ["gpu.nvidia.com", "gpu.example.com"]
        """
    )
    gpu_declared_pools = frozen.List(
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
    gpu_capacity_gc_freeze = Bool(
        True,
        config=True,
        help="""
        Once the capacity cache has read the cluster, move everything the hub
        process holds then (its modules, the hub's objects, the cache's
        records) out of reach of Python's cyclic garbage collector
        (``gc.freeze``). A full collection walks every object it tracks: in a
        hub watching thousands of nodes that is a stall of ~180 ms for every
        user, which this keeps to a few milliseconds (docs/capacity.md,
        "Garbage collection"). The records stay freed by reference counting
        when an event replaces them. Turn it off if something else in the hub
        manages ``gc`` itself.

            c.GPUSpawner.gpu_capacity_gc_freeze = False
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
        ``"healthy": false``). Each watch asks the API server to end it within
        half this time (and after 5 s at the least), and its end counts as the
        server speaking, so a healthy API server is heard from in time even
        where nothing changes; keep it at 20 or more.

            c.GPUSpawner.gpu_capacity_stall_timeout = 90
        """,
    )
    gpu_image_pull_seconds = Float(
        600.0,
        config=True,
        help="""
        Seconds an image pull may take on a new node, counted into the start
        timeout of a spawn that waits for a pool to scale up (with the pool's
        declared ``minutes``). CUDA notebook images are often 12-20 GB.

            c.GPUSpawner.gpu_image_pull_seconds = 900
        """,
    )
    gpu_image_pull_mb_per_second = Float(
        60.0,
        config=True,
        help="""
        How fast a node pulls an image, in MB (10^6 bytes) per second, download and unpacking
        together: the progress page estimates a pull on a node that does not hold the server's
        image from the image's size (as other nodes report it in ``status.images``) at this
        rate ("15 GB image, about 4 min"). ``gpu_image_pull_seconds`` stays the time a pull may
        take at most.

            c.GPUSpawner.gpu_image_pull_mb_per_second = 100
        """,
    )
    gpu_prefer_warm_nodes = Bool(
        True,
        config=True,
        help="""
        Whether a GPU server's pod prefers the nodes of its pool that already hold its image
        (``status.images``): one preferred node affinity term per such node, by name, after the
        admin's own ``node_affinity_preferred``; never a requirement. Turn it off to leave the
        choice among a pool's nodes to the scheduler alone (its ImageLocality score still counts).

            c.GPUSpawner.gpu_prefer_warm_nodes = False
        """,
    )
    gpu_start_timeout_max = Float(
        3600.0,
        config=True,
        help="""
        The longest start timeout gpuspawner gives a spawn that waits for a
        pool to scale up: ``start_timeout`` is raised to the pool's declared
        scale-up ``minutes`` plus ``gpu_image_pull_seconds``, up to this. A
        declared pool that needs longer is reported at hub start and by
        ``gpuspawner doctor``.

            c.GPUSpawner.gpu_start_timeout_max = 1800
        """,
    )
    gpu_allow_multiple_shares = Bool(
        False,
        config=True,
        help="""
        Whether one server may take more than one share of a time-sliced GPU
        (nodes whose device plugin advertises each GPU several times,
        ``nvidia.com/gpu.sharing-strategy: time-slicing``). Off by default:
        every share sees the whole GPU and its whole memory, so a second share
        adds no memory and little speed while keeping others off the GPU. MPS
        shares (each a slice of memory) and MIG slices are not bounded by it.

            c.GPUSpawner.gpu_allow_multiple_shares = True
        """,
    )
    gpu_pool_rules = frozen.List(
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

    gpu_profiles = frozen.List(
        Dict(),
        config=True,
        help="""
        GPU profiles, offered after the admin's own ``profile_list``. Each
        has a ``slug`` and optionally ``display_name``, ``description``,
        ``default``, ``kubespawner_override`` (as in ``profile_list``),
        ``pools`` (``include``/``exclude`` lists of globs on pool ids), ``max_gpus``
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
        value = freeze(proposal.value, "gpu_profiles")
        raw = thaw(value)
        try:
            specs = _profile_specs(raw)
            AccessRules.from_config(raw)
        except ValueError as e:
            raise TraitError(str(e)) from None
        remember(self, "gpu_profiles", (value,), specs)  # parsed here, once: never per view
        return value

    @validate("gpu_image_pull_seconds", "gpu_start_timeout_max")
    def _validate_wait_seconds(self, proposal):
        value = proposal["value"]
        name = proposal["trait"].name
        if not value >= 0 or value != value or (name == "gpu_start_timeout_max" and value <= 0):
            raise TraitError(f"{name} must be a number of seconds above 0, like 600, not {value!r}")
        return value

    @validate("gpu_image_pull_mb_per_second")
    def _validate_pull_rate(self, proposal):
        value = proposal["value"]
        if not 0.1 <= value <= 100000:
            raise TraitError(f"gpu_image_pull_mb_per_second must be MB per second from 0.1 to 100000, like 60, "
                             f"not {value!r}")
        return value

    @validate("gpu_pool_rules")
    def _validate_pool_rules(self, proposal):
        value = freeze(proposal.value, "gpu_pool_rules")
        try:
            rules = _pool_rules(value)
            AccessRules.from_config((), thaw(value))
        except ValueError as e:
            raise TraitError(str(e)) from None
        remember(self, "gpu_pool_rules", (value,), rules)
        return value

    @validate("gpu_resources", "gpu_resource_prefixes", "gpu_node_group_labels", "gpu_dra_drivers")
    def _validate_names(self, proposal):
        value, name = proposal.value, proposal.trait.name
        if value is not None:
            try:
                check_names(_CAPACITY_FIELDS.get(name, name), value)
            except ValueError as e:
                raise TraitError(f"{name}: {e}") from None
        return freeze(value, name)

    @validate("gpu_reservation_ttl", "gpu_capacity_stall_timeout")
    def _validate_ttl(self, proposal):
        if not proposal.value > 0 or proposal.value == float("inf"):
            raise TraitError(
                f"{proposal.trait.name} must be a positive number of seconds, not {proposal.value!r}"
            )
        return proposal.value

    @validate("gpu_declared_pools")
    def _validate_declared(self, proposal):
        value = freeze(proposal.value, "gpu_declared_pools")
        remember(self, "gpu_declared_pools", (value,), _declared_pools(value))
        return value

    gpu_cull_rules = frozen.Union(
        [Dict(), Unicode()],
        default_value=None,
        allow_none=True,
        config=True,
        help="""
        The idle rules ``gpuspawner cull`` applies (docs/culling.md), so that the
        spawn form tells users the rule for the profile and pool they pick, and
        ``GET /hub/api/gpus`` gives each pool's as ``idle_rule``. Either the rules
        themselves (a dict, as in a rules file) or the path of the rules file the
        culler reads (``gpuspawner cull --config FILE``; read again when its
        modification time changes, so the page follows edits). None (the default):
        nothing is shown.

            c.GPUSpawner.gpu_cull_rules = {
                "idle_timeout": "1h",
                "profiles": {"gpu-training": {"idle_timeout": "4h"}},
            }
            # or: c.GPUSpawner.gpu_cull_rules = "/etc/gpuspawner/cull.yaml"

        Keep it the same as the culler's: its ``--idle-timeout`` flag overrides
        the file's default, and this setting does not see that flag.
        """,
    )

    @validate("gpu_cull_rules")
    def _validate_cull_rules(self, proposal):
        value = freeze(proposal.value, "gpu_cull_rules")
        try:
            remember(self, "gpu_cull_rules", (value,), _cull_source(value))
        except RulesError as e:
            raise TraitError(f"c.GPUSpawner.gpu_cull_rules: {e}") from None
        return value

    def cull_rules(self) -> CullRules | None:
        """The culler's rules (None: not configured, or the file became unreadable: logged once per
        change of the file). A rules file is read again only when its modification time changes."""
        try:
            source = parsed(self, "gpu_cull_rules", ("gpu_cull_rules",), _cull_source)
            return source.read() if isinstance(source, RulesFile) else source
        except RulesError as e:
            if self.__dict__.get("_gpu_cull_rules_error") != str(e):
                self.__dict__["_gpu_cull_rules_error"] = str(e)
                log.error("c.GPUSpawner.gpu_cull_rules: %s; the spawn form shows no idle rule", e)
            return None

    def idle_rule(self, profile: str | None, pool: str | None, rules: CullRules | None = None) -> str | None:
        """The idle rule for a GPU server of ``profile`` on ``pool``, in users' words (None: no rules)."""
        rules = rules if rules is not None else self.cull_rules()
        return describe(rule_for(rules, profile, pool)) if rules is not None else None

    @classmethod
    def from_hub_config(cls, config: Config, spawner_class: type[GPUSpawnerSettings]) -> GPUSpawnerSettings:
        """The settings an admin gave ``c.<spawner class>`` (or any section of
        its class, base first, as traitlets resolves them) in ``config``.

        ``spawner_class`` is the hub's spawner class when it is a ``GPUSpawnerSettings``
        subclass, else ``GPUSpawner`` (whose sections the docs tell an admin to write):
        :func:`gpuspawner.hub.spawner.capacity_settings_class` picks it."""
        names = set(GPUSpawnerSettings.class_trait_names(config=True))
        merged = Config()
        kube_api: dict[str, Any] = {}
        for name in spawner_class.section_names():
            if config is not None and name in config:
                section = config[name]
                merged.merge(Config({k: v for k, v in section.items() if k in names}))
                kube_api.update({k: v for k, v in section.items() if k in _KUBE_API})
        settings = GPUSpawnerSettings(config=Config({"GPUSpawnerSettings": merged}))
        settings.__dict__["_kube_api_config"] = kube_api
        return settings

    def kube_api_overrides(self) -> dict[str, Any]:
        """KubeSpawner's ``k8s_api_host``, ``k8s_api_ssl_ca_cert`` and ``k8s_api_verify_ssl`` where
        the hub sets them, as keyword arguments of the capacity cache's own client."""
        given = self.__dict__.get("_kube_api_config")  # settings read from the hub's config
        if given is None:  # a spawner: its own traits
            given = {k: getattr(self, k) for k in _KUBE_API if hasattr(self, k)}
        return {_KUBE_API[k]: v for k, v in given.items() if v is not None and v != ""}

    def pool_rules(self) -> tuple[PoolRule, ...]:
        """``gpu_pool_rules``, parsed when assigned."""
        return parsed(self, "gpu_pool_rules", ("gpu_pool_rules",), _pool_rules)

    def gpu_profile_specs(self) -> tuple[GPUProfileSpec, ...]:
        """The GPU profiles, parsed when ``gpu_profiles`` was assigned (every view and spawn asks for them)."""
        return parsed(self, "gpu_profiles", ("gpu_profiles",), lambda value: _profile_specs(thaw(value)))

    def access_rules(self) -> AccessRules:
        """The ``allowed_groups`` of ``gpu_profiles`` and ``gpu_pool_rules`` (read once per assignment of either)."""
        return parsed(self, "access_rules", ("gpu_profiles", "gpu_pool_rules"),
                      lambda profiles, rules: AccessRules.from_config(thaw(profiles), thaw(rules)))

    def capacity_config(self) -> CapacityConfig:
        """The ``CapacityConfig`` these settings describe (built once per assignment of its settings)."""
        return parsed(self, "capacity_config", _CAPACITY_TRAITS, self._build_capacity_config)

    def _build_capacity_config(self, *values: Any) -> CapacityConfig:
        given = dict(zip(_CAPACITY_TRAITS, values))
        kwargs: dict[str, Any] = {
            "declared_pools": parsed(self, "gpu_declared_pools", ("gpu_declared_pools",), _declared_pools),
            "reservation_ttl": given["gpu_reservation_ttl"],
            "stall_timeout": given["gpu_capacity_stall_timeout"],
        }
        for name, field in (
            ("gpu_resources", "gpu_resources"),
            ("gpu_resource_prefixes", "gpu_resource_prefixes"),
            ("gpu_node_group_labels", "node_group_labels"),
            ("gpu_dra_drivers", "dra_drivers"),
            ("gpu_tolerated_taint_keys", "tolerated_taint_keys"),
        ):
            if given[name] is not None:
                kwargs[field] = tuple(given[name])
        return CapacityConfig(**kwargs)

    def shared_capacity_cache(self):
        """The process's shared ``CapacityCache`` (started on first use).

        The first call also points ``/hub/metrics``' capacity series at it,
        whoever asks first: a spawner (spawn page, spawn) or ``GET /hub/api/gpus``.

        A spawn-page view asks several times: while the configuration is the object it was
        found with (``capacity_config`` is parsed once per assignment of its settings) and that
        cache is still the running loop's shared one, it is returned at once."""
        config = self.capacity_config()
        found = self.__dict__.get("_gpu_shared_cache")
        if found is not None and found[0] is config and CapacityCache.current() is found[1]:
            return found[1]
        log_ = getattr(self, "log", None)  # a spawner's: the hub's logger (a settings object has none)
        if log_ is not None:
            hub_log.adopt(log_)
        overrides = self.kube_api_overrides()
        # the cache's own client, never KubeSpawner's shared one nor the client's default configuration
        factory = functools.partial(cache_module._default_api, **overrides) if overrides else None
        cache = CapacityCache.shared(config, api_factory=factory, gc_freeze=self.gpu_capacity_gc_freeze)
        _serve_capacity_metrics(cache)
        self.__dict__["_gpu_shared_cache"] = (config, cache)
        return cache
