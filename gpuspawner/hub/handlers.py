"""``GET /hub/api/gpus``: the GPU pools and what is free, for any signed-in user."""

from __future__ import annotations

import copy
import json

from jupyterhub.apihandlers.base import APIHandler
from tornado import web
from traitlets.config import LazyConfigValue

from gpuspawner.spawn.access import principal_of, visible_pools
from gpuspawner.capacity.model import CapacitySnapshot
from gpuspawner.spawn.profiles import present_pools
from gpuspawner.hub.poolimages import FittingImages, images_json
from gpuspawner.hub import server_requests
from gpuspawner.spawn.tolerations import refused_by_taint
from gpuspawner.hub.settings import GPUSpawnerSettings
from gpuspawner.hub import hub_log
from gpuspawner.hub.spawner import capacity_settings_class
from gpuspawner.queue.pools import pool_queue

API_PATH = r"/api/gpus"
#: The JupyterHub custom scope ``GET /hub/api/gpus`` needs (``c.JupyterHub.custom_scopes``)
SCOPE = "custom:gpus:read"
SCOPE_DEFINITION = {
    "description": "Read the GPU pools, what is free in them and why a server may not fit (GET /hub/api/gpus).",
}


class GPUCapacityHandler(APIHandler):
    """JSON: ``{"pools": [...], "synced": bool, "healthy": bool, "error": str | null,
    "age_seconds": float}``: ``healthy`` is true and ``error`` null only while the
    figures are live (``CapacitySnapshot.to_json``)."""

    # the hub's config does not change while it runs: build its settings once, not per request
    # (the memo holds the config it was built from, so another hub's config is never mistaken for it)
    _settings_memo: tuple[object, object, GPUSpawnerSettings] | None = None

    def capacity_settings(self) -> GPUSpawnerSettings:
        spawner_class = self.settings.get("spawner_class")
        memo = GPUCapacityHandler._settings_memo
        if memo is not None and memo[0] is self.config and memo[1] is spawner_class:
            return memo[2]
        settings = GPUSpawnerSettings.from_hub_config(self.config, capacity_settings_class(spawner_class))
        GPUCapacityHandler._settings_memo = (self.config, spawner_class, settings)
        return settings

    _requests_memo: tuple[object, dict] | None = None

    def profile_requests(self, settings: GPUSpawnerSettings) -> dict:
        """Per GPU profile, what its pods ask of a node besides GPUs (once per hub config)."""
        memo = GPUCapacityHandler._requests_memo
        if memo is None or memo[0] is not settings:
            requests = server_requests.requests_of(settings.gpu_profile_specs(),
                                                   server_requests.config_defaults(self.config))
            memo = GPUCapacityHandler._requests_memo = (settings, requests)
        return memo[1]

    _images_memo: tuple[object, object, FittingImages] | None = None

    def fitting_images(self, settings: GPUSpawnerSettings) -> FittingImages:
        """Each pool's fitting images, judged as the spawn page judges them (one per hub config)."""
        spawner_class = self.settings.get("spawner_class")
        memo = GPUCapacityHandler._images_memo
        if memo is None or memo[0] is not self.config or memo[1] is not spawner_class:
            fitting = FittingImages(settings, capacity_settings_class(spawner_class), self.config)
            memo = GPUCapacityHandler._images_memo = (self.config, spawner_class, fitting)
        return memo[2]

    def capacity_snapshot(self, settings: GPUSpawnerSettings, requests=None) -> CapacitySnapshot:
        hub_log.adopt(self.log)  # the capacity cache's lines in the hub's log, with time and level
        try:
            cache = settings.shared_capacity_cache()
            if requests:  # count where each profile's server fits, as the spawn page does
                cache.track_requests(server_requests.all_requests(requests))
            return cache.snapshot()
        except Exception as e:
            self.log.error("GET /hub/api/gpus: the GPU capacity cache could not start: %s: %s", type(e).__name__, e)
            return CapacitySnapshot(
                pools=(), synced=False, age_seconds=0.0, generation=0, healthy=False,
                error="the hub could not start watching the cluster (the hub's log has the details)",
            )

    async def get(self):
        if self.current_user is None:
            raise web.HTTPError(
                403, "sign in, or send an API token (header 'Authorization: token <token>'), to read GPU capacity"
            )
        if SCOPE not in (self.expanded_scopes or ()):
            raise web.HTTPError(
                403, f"reading GPU capacity needs the scope {SCOPE}: JupyterHub's user role has it with "
                "gpuspawner's config snippet; an admin grants it to other roles and services (docs/access.md)"
            )
        settings = self.capacity_settings()
        specs = settings.gpu_profile_specs()
        requests = self.profile_requests(settings)
        snapshot = self.capacity_snapshot(settings, requests)
        presented = present_pools(snapshot.pools, settings.pool_rules())
        names = {pool.id: name for pool, name in presented}
        visible = tuple(pool for pool, _name in presented)
        # a user sees the pools they may use (allowed_groups); admins see all
        visible = visible_pools(
            visible, settings.access_rules(), principal_of(self.current_user), settings.gpu_profile_specs()
        )
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        body = snapshot.to_json(visible)
        queues, kueue = settings.queue_rules(), settings.kueue_view()
        counts = kueue.queue_counts if kueue is not None else (lambda queue: None)
        for pool in body["pools"]:  # gpu_kueue_queues: each pool's Kueue LocalQueue and its figures, or null
            pool["queue"] = pool_queue(queues, pool["id"], counts)
        for pool_view, pool in zip(visible, body["pools"]):
            pool["display_name"] = names.get(pool["id"], pool["display_name"])  # an admin's name wins
            # per GPU profile: true, or why the pool's nodes can never hold its server (CPU, memory)
            pool["fits_profiles"] = server_requests.fits_profiles(pool_view, specs, requests)
            # null, or why no server lands on any node of the pool: a taint none tolerates, and the fix
            pool["refused_by_taint"] = refused_by_taint(pool_view, settings.gpu_tolerated_taint_keys)
        # per pool, where the images of its fitting choices are cached (docs/prepull.md)
        fitting = self.fitting_images(settings).by_pool(snapshot)
        counts = settings.shared_capacity_cache().node_images if snapshot.synced else None
        for pool in body["pools"]:
            pool["images"] = images_json(pool["id"], fitting.get(pool["id"], ()), counts) if counts is not None else {}
        rules = settings.cull_rules()
        if rules is not None:  # gpu_cull_rules: each pool's idle rule (no profile: the pool's or the default)
            for pool in body["pools"]:
                pool["idle_rule"] = settings.idle_rule(None, pool["id"], rules)
        self.finish(json.dumps(body))


# what the config snippet appends to c.JupyterHub.extra_handlers
handlers = [(API_PATH, GPUCapacityHandler)]


def grant_scope(c) -> None:
    """Define :data:`SCOPE` in ``c.JupyterHub.custom_scopes`` and grant it to JupyterHub's ``user``
    role, with that role's default ``self``, unless the config already defines a ``user`` role
    (then the admin's role is left as it is: add the scope to it to keep the endpoint for users)."""
    # .update/.append work on what the config holds, a dict or list the admin set or traitlets'
    # lazy value (other snippets extend them the same way)
    c.JupyterHub.custom_scopes.update({SCOPE: SCOPE_DEFINITION})
    roles = c.JupyterHub.load_roles
    # (get_value on a copy: traitlets keeps the first value it computes, later appends would be lost)
    given = copy.deepcopy(roles).get_value([]) if isinstance(roles, LazyConfigValue) else roles
    if not any(isinstance(r, dict) and r.get("name") == "user" for r in given):
        roles.append({"name": "user", "description": "Standard user privileges, and reading GPU capacity",
                      "scopes": ["self", SCOPE]})
