"""``GPUSpawnTraits``: GPUSpawner's own traits (taints, capacity waits, CUDA, quotas), validated at assignment."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from traitlets import Any as AnyTrait
from traitlets import Bool, Dict, Float, Integer, List, TraitError, Unicode, default, observe, validate
from traitlets.config import Configurable

from gpuspawner.cuda import POLICIES, decide
from gpuspawner.cuda.custom import resolve_check
from gpuspawner.hub import server_requests
from gpuspawner.hub import parsed_config as frozen
from gpuspawner.hub.parsed_config import freeze, parsed, remember, thaw
from gpuspawner.hub.settings import fingerprint
from gpuspawner.hub.templates import template_dirs
from gpuspawner.spawn.access import AccessRules
from gpuspawner.spawn.profiles import GPUProfileSpec, PoolRule
from gpuspawner.spawn.quota import QuotaPolicy
from gpuspawner.spawn.resource_requests import REQUEST_TRAITS

__all__ = ["GPUSpawnTraits", "SpawnConfig", "GPU_COUNT_LIMIT_MAX", "applied_in_load_user_options"]

# the largest gpu_max_per_server accepted: every count up to it is a choice on the spawn form
GPU_COUNT_LIMIT_MAX = 1024


def applied_in_load_user_options(spawner, user_options) -> None:
    """GPUSpawner's default ``apply_user_options``: nothing is applied here.

    JupyterHub (5.3+) calls ``Spawner.apply_user_options`` before ``start``
    and logs "Received unhandled user_options" when it is unset
    (jupyterhub/spawner.py ``_run_apply_user_options``).  GPUSpawner validates
    and applies user options (``profile``, ``gpu_pool``, ``gpus`` and the
    profile's options) in ``load_user_options``, KubeSpawner's seam, which
    ``start`` calls with the capacity of that moment; applying them here as
    well would apply them twice.  An admin's own ``apply_user_options``
    (a callable, or a dict of option name -> trait) replaces this default and
    runs as JupyterHub documents, before ``load_user_options``.
    """
    return None


# the traits a SpawnConfig is read from: assigning any of them reads it anew
CONFIG_TRAITS = (
    "gpu_profiles", "gpu_pool_rules", "gpu_admit_without_capacity", "gpu_max_per_server", "cuda_policy",
    "cuda_check", "gpu_kueue_queues", "gpu_allow_multiple_shares", "gpu_quota", "gpu_quota_by_group",
    "gpu_quota_admin", "gpu_tolerated_taint_keys", *REQUEST_TRAITS,
)
_interned: dict[str, SpawnConfig] = {}  # spawners configured alike share one SpawnConfig (and page cache entries)


@dataclass(frozen=True, eq=False)
class SpawnConfig:
    """The configuration a spawn page and a spawn read, parsed once (compared by identity)."""

    key: str  # the fingerprint it was interned under
    specs: tuple[GPUProfileSpec, ...]
    pool_rules: tuple[PoolRule, ...]
    access_rules: AccessRules
    queue_rules: tuple[Any, ...]
    quota: QuotaPolicy
    requests: dict[str, dict]  # per GPU profile and image, what its pod asks of a node besides GPUs
    tracked: tuple[tuple[int, ...], ...]  # every distinct request, sorted (what the capacity cache counts)


class GPUSpawnTraits(Configurable):
    """The traits ``GPUSpawner`` adds for a spawn (first in its bases: its defaults win over KubeSpawner's)."""

    gpu_admit_without_capacity = Bool(
        False,
        config=True,
        help="""
        When GPU capacity is unknown (the cache has not synced, lost its watch,
        or lacks cluster-wide read rights), refuse GPU spawns with a 503
        (False, the default) or admit them to the pools last seen without
        checking what is free (True): the scheduler then decides, and a pod
        may wait Pending.

            c.GPUSpawner.gpu_admit_without_capacity = True
        """,
    )
    gpu_full_pool_grace = Float(
        30.0,
        config=True,
        help="""
        Seconds a GPU server's pod may wait when the scheduler finds no room for
        its GPUs (``Insufficient nvidia.com/gpu``) although it was admitted on
        counts that had room (they were out of date, or another workload took
        the GPUs meanwhile). The hub then re-lists the cluster, and when no node
        of the pool has the GPUs and the pool cannot add nodes, the spawn fails
        with a message that says so instead of waiting out ``start_timeout``.
        The default covers Kubernetes' default termination grace period (30 s),
        so GPUs held by pods that are shutting down are waited for.

            c.GPUSpawner.gpu_full_pool_grace = 60
        """,
    )
    gpu_capacity_sync_timeout = Float(
        5.0,
        config=True,
        help="""
        Seconds the spawn page and a spawn wait for the capacity cache's first
        sync before treating capacity as unknown. Keep it below
        ``c.JupyterHub.slow_spawn_timeout`` (10 s), so a refused REST spawn is
        answered with its 4xx/5xx rather than a 202 and a later failure.

            c.GPUSpawner.gpu_capacity_sync_timeout = 5
        """,
    )

    gpu_capacity_page_max_age = Float(
        2.0,
        config=True,
        help="""
        How old (seconds) the GPU counts on the spawn page may be. On a big
        cluster the counts change many times a second; the page then builds
        its offers (pools, counts, CUDA fit) once per interval for all users
        and serves a rendered form again while nothing on it changed,
        instead of rebuilding both on every view. A view past half the
        interval has both renewed in the background after its answer, so the
        views after it do not wait for the rebuild. The page's live refresh and
        ``GET /hub/api/gpus`` always show the current counts, and a spawn is
        always checked against them. 0 builds the offers on every view.

            c.GPUSpawner.gpu_capacity_page_max_age = 2
        """,
    )

    cuda_policy = Unicode(
        "minor",
        config=True,
        help="""
        How strictly an image's CUDA must fit a node's NVIDIA driver
        (docs/cuda-compatibility.md): ``strict`` accepts only backward
        compatibility (driver CUDA >= image CUDA); ``minor`` (the default) also
        minor-version compatibility, with a warning in the spawn progress;
        ``forward`` also the image's cuda-compat package on data-center GPUs.

            c.GPUSpawner.cuda_policy = "strict"
        """,
    )
    cuda_check = AnyTrait(
        decide,
        config=True,
        help="""
        The CUDA compatibility decision: a callable ``(ImageCuda, NodeCuda,
        policy) -> Verdict`` (see ``gpuspawner.cuda``), or its import string.
        The default is ``gpuspawner.cuda.decide``. It is called once per image
        and distinct driver of each pool a profile offers (nodes with the same
        driver, CUDA and compute capability share one verdict; ``node.name``
        is None), and its verdicts are remembered for the life of the hub, so
        it must decide from the driver facts alone.

            from gpuspawner.cuda import decide, Facts
            facts = Facts(enforce_require=True)
            c.GPUSpawner.cuda_check = lambda image, node, policy: decide(image, node, policy, facts)
            # or: c.GPUSpawner.cuda_check = "mysite.cuda:check"
        """,
    )
    cuda_probe = Bool(
        False,
        config=True,
        help="""
        Before a GPU server starts, run ``gpuspawner probe`` in an init container
        with the same GPUs: it confirms on the node that the driver is visible,
        that the GPUs the server asked for are there and that the driver fits
        the image. A failure is the spawn error the user sees.

            c.GPUSpawner.cuda_probe = True
        """,
    )
    cuda_probe_image = Unicode(
        None,
        allow_none=True,
        config=True,
        help="""
        The image of the probe init container; it must have gpuspawner (and
        nvidia-ml-py) installed. None (the default) uses the server's own image.

            c.GPUSpawner.cuda_probe_image = "ghcr.io/example/gpuspawner-probe:1.0"
        """,
    )

    gpu_quota = Integer(
        None,
        allow_none=True,
        config=True,
        help="""
        The most GPUs one user may hold at once across all their servers
        (named servers included), counting running and starting servers.
        None (the default) is no limit. A spawn that would go over it is
        refused with 403 and a message saying what the user holds. Groups
        can be given their own limit with ``gpu_quota_by_group``; admins have
        none unless ``gpu_quota_admin`` is set.

            c.GPUSpawner.gpu_quota = 2
        """,
    )
    gpu_quota_by_group = frozen.Dict(
        config=True,
        help="""
        Per-group GPU quotas that replace ``gpu_quota`` for members of a
        JupyterHub group: ``{group: GPUs}``, None for no limit. A user in
        several listed groups gets the most generous of them.

            c.GPUSpawner.gpu_quota_by_group = {"research": 8, "students": 1, "staff": None}
        """,
    )
    gpu_max_per_server = Integer(
        16,
        config=True,
        help="""
        The most GPUs (or MIG slices, or shared GPU replicas) one server may
        ask for, whatever a node reports. The spawn form lists each count as a
        choice and validation checks against it, so a bound keeps a node that
        claims absurd numbers (a misconfigured device plugin) from making
        every page view slow. A profile's ``max_gpus`` can only lower it.
        The default, 16, covers the largest GPU nodes sold (8 or 16 GPUs);
        raise it if users need more MIG slices or replicas in one server.

            c.GPUSpawner.gpu_max_per_server = 8
        """,
    )
    gpu_quota_admin = Integer(
        None,
        allow_none=True,
        config=True,
        help="""
        The GPU quota of JupyterHub admins. None (the default) is no limit;
        admins are not subject to ``gpu_quota`` or ``gpu_quota_by_group``.

            c.GPUSpawner.gpu_quota_admin = 16
        """,
    )
    @validate("gpu_max_per_server")
    def _validate_max_per_server(self, proposal):
        value = proposal.value
        if not 1 <= value <= GPU_COUNT_LIMIT_MAX:
            raise TraitError(
                f"gpu_max_per_server must be a whole number of GPUs from 1 to {GPU_COUNT_LIMIT_MAX}, "
                f"not {value!r}; e.g. c.GPUSpawner.gpu_max_per_server = 8"
            )
        return value

    @validate("gpu_quota", "gpu_quota_by_group", "gpu_quota_admin")
    def _validate_quota(self, proposal):
        arg = {"gpu_quota": "default", "gpu_quota_by_group": "by_group", "gpu_quota_admin": "admin"}
        value = freeze(proposal.value, proposal.trait.name)
        try:
            QuotaPolicy.from_config(**{arg[proposal.trait.name]: thaw(value)})
        except ValueError as e:
            raise TraitError(str(e)) from None
        # the policy with the other two as they are now (each was checked when it was assigned)
        values = tuple(value if name == proposal.trait.name else getattr(self, name) for name in arg)
        try:
            remember(self, "gpu_quota", values, QuotaPolicy.from_config(values[0], thaw(values[1]), values[2]))
        except ValueError:
            pass  # read when first asked for (gpu_quota_policy), as a default value is
        return value

    def gpu_quota_policy(self) -> QuotaPolicy:
        """``gpu_quota``, ``gpu_quota_by_group`` and ``gpu_quota_admin``, read once per assignment of any."""
        return parsed(self, "gpu_quota", ("gpu_quota", "gpu_quota_by_group", "gpu_quota_admin"),
                      lambda default, by_group, admin: QuotaPolicy.from_config(default, thaw(by_group), admin))

    # the Prometheus registry spawn outcomes are counted in; None: the one
    # /hub/metrics serves (a seam for tests, which pass their own)
    metrics_registry = None

    @default("apply_user_options")
    def _apply_user_options_default(self):
        return applied_in_load_user_options

    @default("additional_profile_form_template_paths")
    def _default_template_paths(self):
        return template_dirs()

    @validate("cuda_policy")
    def _validate_cuda_policy(self, proposal):
        if proposal.value not in POLICIES:
            raise TraitError(
                f"cuda_policy must be one of {', '.join(POLICIES)} (default minor), not {proposal.value!r}"
            )
        return proposal.value

    @validate("cuda_check")
    def _validate_cuda_check(self, proposal):
        try:
            return resolve_check(proposal.value)
        except ValueError as e:
            raise TraitError(str(e)) from None

    @validate("cuda_probe_image")
    def _validate_probe_image(self, proposal):
        if proposal.value is not None and not proposal.value.strip():
            raise TraitError("cuda_probe_image must be an image reference, or None for the server's image")
        return proposal.value

    @validate("gpu_capacity_sync_timeout", "gpu_full_pool_grace", "gpu_capacity_page_max_age")
    def _validate_sync_timeout(self, proposal):
        if not proposal.value >= 0 or proposal.value == float("inf"):
            raise TraitError(f"{proposal.trait.name} must be 0 or more seconds, not {proposal.value!r}")
        return proposal.value


    @observe(*CONFIG_TRAITS)
    def _drop_spawn_config(self, change):
        self.__dict__.pop("_spawn_config", None)

    def spawn_config(self) -> SpawnConfig:
        """This spawner's configuration, parsed when first asked for after an assignment; spawners
        configured alike get the same object."""
        config = self.__dict__.get("_spawn_config")
        if config is not None:
            return config
        defaults = server_requests.spawner_defaults(self)
        key = fingerprint(*(getattr(self, name, None) for name in CONFIG_TRAITS))
        config = _interned.get(key)
        if config is None:
            specs = self.gpu_profile_specs()
            requests = server_requests.requests_of(specs, defaults)
            config = SpawnConfig(
                key=key, specs=specs, pool_rules=self.pool_rules(), access_rules=self.access_rules(),
                queue_rules=self.queue_rules(), quota=self.gpu_quota_policy(), requests=requests,
                tracked=tuple(sorted(server_requests.all_requests(requests))),
            )
            if len(_interned) >= 64:
                _interned.clear()
            _interned[key] = config
        self.__dict__["_spawn_config"] = config
        return config
