"""The hub's pre-puller: its traits, and the task that keeps one pre-pull DaemonSet per GPU pool."""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any

from traitlets import Bool, Float, TraitError, Unicode, validate
from traitlets.config import Configurable, LazyConfigValue

from gpuspawner.cuda.custom import resolve_check
from gpuspawner.prepull.plan import PrepullSettings, plan
from gpuspawner.prepull.reconcile import Prepuller
from gpuspawner.spawn import cudafit
from gpuspawner.spawn.profiles import build_offers, capacity_problem

log = logging.getLogger("gpuspawner.prepull")

_OWNER = re.compile(r"^(Deployment|StatefulSet|ConfigMap)/[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_IMAGE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9._:/@-]*$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
# the service account's namespace file of a pod (in-cluster), as KubeSpawner reads it
_SA_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


class GPUPrepullSettings(Configurable):
    """The pre-puller's traits (``c.GPUSpawner.gpu_prepull*``), read by the hub at start."""

    gpu_prepull = Bool(
        False,
        config=True,
        help="""
        Keep the images of the GPU profiles warm on the nodes where they can run: one DaemonSet
        per GPU pool, in the hub's namespace, pulling only the images (profile images and image
        choices) whose CUDA the pool's drivers run, on that pool's nodes only (docs/prepull.md).
        Needs the Role ``gpuspawner-prepull`` of deploy/rbac.yaml.

            c.GPUSpawner.gpu_prepull = True
        """,
    )
    gpu_prepull_pause_image = Unicode(
        "registry.k8s.io/pause:3.10",
        config=True,
        help="""
        The image that keeps each pre-pull pod alive after its pulls (a few hundred KB).

            c.GPUSpawner.gpu_prepull_pause_image = "registry.example.com/pause:3.10"
        """,
    )
    gpu_prepull_priority_class = Unicode(
        "",
        config=True,
        help="""
        The PriorityClass of the pre-pull pods; give one below your users' servers so a server
        never waits for a puller ("" : the cluster's default priority).

            c.GPUSpawner.gpu_prepull_priority_class = "gpuspawner-prepull"
        """,
    )
    gpu_prepull_owner = Unicode(
        "",
        config=True,
        help="""
        The object in the hub's namespace the DaemonSets belong to, as ``Kind/name``
        (``Deployment``, ``StatefulSet`` or ``ConfigMap``): Kubernetes deletes them with it. Zero
        to JupyterHub's hub is ``Deployment/hub``. "" : no owner; turning ``gpu_prepull`` off then
        removes them at the hub's next start.

            c.GPUSpawner.gpu_prepull_owner = "Deployment/hub"
        """,
    )
    gpu_prepull_interval = Float(
        60.0,
        config=True,
        help="""
        Seconds between two passes that compare the DaemonSets with the pools and profiles.

            c.GPUSpawner.gpu_prepull_interval = 120
        """,
    )

    @validate("gpu_prepull_owner")
    def _validate_owner(self, proposal):
        value = proposal["value"]
        if value and not _OWNER.match(value):
            raise TraitError(
                f"gpu_prepull_owner must be Kind/name with Kind one of Deployment, StatefulSet, ConfigMap, "
                f"not {value!r}; e.g. c.GPUSpawner.gpu_prepull_owner = \"Deployment/hub\""
            )
        return value

    @validate("gpu_prepull_interval")
    def _validate_interval(self, proposal):
        value = proposal["value"]
        if not 5 <= value <= 86400:
            raise TraitError(f"gpu_prepull_interval must be seconds from 5 to 86400, not {value!r}; "
                             "e.g. c.GPUSpawner.gpu_prepull_interval = 60")
        return value

    @validate("gpu_prepull_pause_image")
    def _validate_pause_image(self, proposal):
        value = proposal["value"]
        if not _IMAGE.match(value):
            raise TraitError(f"gpu_prepull_pause_image must be an image reference, not {value!r}; "
                             "e.g. c.GPUSpawner.gpu_prepull_pause_image = \"registry.k8s.io/pause:3.10\"")
        return value

    @validate("gpu_prepull_priority_class")
    def _validate_priority_class(self, proposal):
        value = proposal["value"]
        if value and not _DNS_SUBDOMAIN.match(value):
            raise TraitError(f"gpu_prepull_priority_class must be a PriorityClass name (lowercase letters, digits, "
                             f"'-' and '.'), not {value!r}; e.g. c.GPUSpawner.gpu_prepull_priority_class = "
                             "\"gpuspawner-prepull\"")
        return value


def spawner_values(config: Any, spawner_class: type, names: tuple[str, ...]) -> dict[str, Any]:
    """The values an admin gave traits ``names`` of ``spawner_class`` in ``config`` (any section of
    its class, base first, as traitlets resolves them), else the traits' defaults."""
    traits = spawner_class.class_traits()
    values: dict[str, Any] = {}
    for name in names:
        value = traits[name].default()
        for section in spawner_class.section_names():
            if config is not None and section in config and name in config[section]:
                raw = config[section][name]
                value = raw.get_value(value) if isinstance(raw, LazyConfigValue) else raw
        values[name] = value
    return values


def hub_namespace(configured: str | None) -> str:
    """Where the servers run: KubeSpawner's ``namespace`` when set, else the hub pod's own, else "default"."""
    if configured:
        return configured
    try:
        with open(_SA_NAMESPACE) as f:
            return f.read().strip() or "default"
    except OSError:
        return "default"


class HubPrepuller:
    """The pre-puller of one hub: builds the plan from the capacity cache and the hub's config."""

    def __init__(self, settings: Any, spawner_class: type, config: Any, cache: Any, daemonsets: Any,
                 owner: dict[str, str] | None) -> None:
        values = spawner_values(config, spawner_class,
                                ("cuda_policy", "cuda_check", "gpu_tolerated_taint_keys", "gpu_max_per_server"))
        self._specs = settings.gpu_profile_specs()
        self._rules = settings.pool_rules()
        self._policy = values["cuda_policy"]
        self._check = resolve_check(values["cuda_check"])
        self._count_limit = values["gpu_max_per_server"]
        self._verdicts = cudafit.VerdictMemo()
        self._cache = cache
        self.settings = PrepullSettings(
            namespace=daemonsets.namespace,
            pause_image=settings.gpu_prepull_pause_image,
            priority_class=settings.gpu_prepull_priority_class or None,
            allowed_taint_keys=tuple(values["gpu_tolerated_taint_keys"]),
            owner=owner,
        )
        self.loop = Prepuller(daemonsets, self.source, log=log, interval=settings.gpu_prepull_interval)

    def _fit(self, image, pool):
        return cudafit.pool_fit(image, pool, self._policy, self._check, self._verdicts)

    async def source(self):
        snapshot = self._cache.snapshot()
        if capacity_problem(snapshot) is not None:
            return None  # unknown or stale pools: touch nothing until they are live again
        offers = build_offers(self._specs, snapshot, self._rules, fit=self._fit, count_limit=self._count_limit,
                              tolerated_taint_keys=self.settings.allowed_taint_keys)
        return plan(offers, snapshot.pools, self.settings)


def _hub_settings(config: Any, spawner_class: Any) -> tuple[Any, type]:
    """(the hub's GPUSpawner settings, the class whose config sections hold them)."""
    from gpuspawner.hub.settings import GPUSpawnerSettings
    from gpuspawner.hub.spawner import capacity_settings_class

    klass = capacity_settings_class(spawner_class)
    return GPUSpawnerSettings.from_hub_config(config, klass), klass


async def _cache_client(settings: Any) -> Any:
    """An ``ApiClient`` configured as the capacity cache's own (in-cluster, else kubeconfig)."""
    from gpuspawner.capacity.cache import _default_api

    return (await _default_api(**settings.kube_api_overrides())).api_client


async def run_for_hub(app: Any, settings_for: Any = _hub_settings, make_client: Any = _cache_client) -> None:
    """Run the pre-puller of the hub ``app`` (JupyterHub) until cancelled, if ``gpu_prepull`` is on.

    ``settings_for(config, spawner_class)``: (the hub's GPUSpawner settings, the class whose
    config sections hold them); ``make_client(settings)``: an ``ApiClient``."""
    from gpuspawner.prepull.kube import KubeDaemonSets, owner_reference

    settings, klass = settings_for(app.config, app.spawner_class)
    if not settings.gpu_prepull:
        return
    namespace = hub_namespace(spawner_values(app.config, klass, ("namespace",)).get("namespace"))
    api_client = await make_client(settings)
    daemonsets = KubeDaemonSets(api_client, namespace)
    owner = None
    while settings.gpu_prepull_owner and owner is None:
        try:
            owner = await owner_reference(api_client, namespace, settings.gpu_prepull_owner)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.error("gpuspawner pre-pull: c.GPUSpawner.gpu_prepull_owner %r in namespace %s could not be "
                      "read (%s); retrying in a minute", settings.gpu_prepull_owner, namespace, e)
            await asyncio.sleep(60)
    cache = settings.shared_capacity_cache()
    puller = HubPrepuller(settings, klass, app.config, cache, daemonsets, owner)
    log.info("gpuspawner pre-pull: keeping GPU images warm per pool in namespace %s", namespace)
    await puller.loop.run()


_running: dict[Any, asyncio.Task] = {}


def start_with_hub() -> None:
    """From the hub's config snippet: once the hub has started, run its pre-puller in its loop.

    Does nothing where no JupyterHub is starting (``gpuspawner doctor --config`` runs the same
    config file). JupyterHub resolves ``_start_future`` when ``start()`` is done; it has no public
    hook for this."""
    from jupyterhub.app import JupyterHub

    if not JupyterHub.initialized():
        return
    app = JupyterHub.instance()
    started = getattr(app, "_start_future", None)
    if started is None:
        return

    def launch(_: Any) -> None:
        if app in _running or started.cancelled() or started.exception() is not None:
            return
        task = asyncio.get_running_loop().create_task(run_for_hub(app),
                                                      name="gpuspawner-prepull")
        _running[app] = task
        task.add_done_callback(_report)

    started.add_done_callback(launch)


def _report(task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is not None:
        e = task.exception()
        log.error("gpuspawner pre-pull stopped: %s: %s", type(e).__name__, e)

