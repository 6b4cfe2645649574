"""The images of each GPU pool's fitting choices (the spawn page's CUDA verdict), and where they are cached.

Read by the pre-puller, ``GET /hub/api/gpus`` (``"images"``) and the spawn page; docs/prepull.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from traitlets.config import LazyConfigValue

from gpuspawner.capacity.model import CapacitySnapshot
from gpuspawner.cuda.custom import resolve_check
from gpuspawner.prepull.plan import pool_images
from gpuspawner.spawn import cuda_fit
from gpuspawner.spawn.cards import image_ready_words
from gpuspawner.spawn.warmnodes import warm_preferences
from gpuspawner.spawn.profiles import ProfileOffer, build_offers


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


class FittingImages:
    """The GPU offers and each pool's fitting images, judged as the spawn page judges them
    (``cuda_policy``, ``cuda_check``), built once per snapshot of the pools."""

    def __init__(self, settings: Any, spawner_class: type, config: Any) -> None:
        values = spawner_values(config, spawner_class,
                                ("cuda_policy", "cuda_check", "gpu_max_per_server", "gpu_tolerated_taint_keys"))
        self._specs = settings.gpu_profile_specs()
        self._rules = settings.pool_rules()
        self._policy = values["cuda_policy"]
        self._check = resolve_check(values["cuda_check"])
        self._count_limit = values["gpu_max_per_server"]
        self._tolerated = tuple(values["gpu_tolerated_taint_keys"])
        self._verdicts = cuda_fit.VerdictMemo()
        self._memo: tuple[Any, dict[str, ProfileOffer], dict[str, tuple[str, ...]]] | None = None

    def _fit(self, image, pool):
        return cuda_fit.pool_fit(image, pool, self._policy, self._check, self._verdicts)

    def _build(self, snapshot: CapacitySnapshot) -> tuple[dict[str, ProfileOffer], dict[str, tuple[str, ...]]]:
        memo = self._memo
        if memo is not None and memo[0] is snapshot.pools:
            return memo[1], memo[2]
        offers = build_offers(self._specs, snapshot, self._rules, fit=self._fit, count_limit=self._count_limit,
                              tolerated_taint_keys=self._tolerated)
        images = pool_images(offers)
        self._memo = (snapshot.pools, offers, images)
        return offers, images

    def offers(self, snapshot: CapacitySnapshot) -> dict[str, ProfileOffer]:
        return self._build(snapshot)[0]

    def by_pool(self, snapshot: CapacitySnapshot) -> dict[str, tuple[str, ...]]:
        """Pool id -> the images of its fitting choices, sorted."""
        return self._build(snapshot)[1]


def images_json(pool_id: str, images: tuple[str, ...], counts: Any) -> dict[str, dict[str, int]]:
    """``"images"`` of one pool in ``GET /hub/api/gpus``: per image reference (as configured),
    ``{"cached_nodes": N, "nodes": M}``: of the pool's M contributing nodes, N hold it
    (``capacity.nodeimages.NodeImages``; no walk over the nodes)."""
    nodes = counts.nodes(pool_id)
    return {image: {"cached_nodes": counts.cached(pool_id, image), "nodes": nodes} for image in images}


def node_images_of(spawner: Any) -> Any:
    """The shared capacity cache's image counts (``NodeImages``), or None when there is no cache."""
    try:
        cache = spawner.shared_capacity_cache()
    except Exception:  # no cache: capacity_snapshot has logged why
        return None
    return getattr(cache, "node_images", None)


def counts_version(spawner: Any) -> int | None:
    """What a spawn form rendered from the image counts depends on: their generation."""
    counts = node_images_of(spawner)
    return None if counts is None else counts.generation


def ready_words(spawner: Any) -> Callable[[str, str], str | None] | None:
    """The spawn form's ``image_ready(pool id, image)``: "Image ready on 3 of 5 nodes", or None (no
    node in the pool, or no counts at all)."""
    counts = node_images_of(spawner)
    if counts is None:
        return None

    def words(pool_id: str, image: str) -> str | None:
        return image_ready_words(counts.cached(pool_id, image), counts.nodes(pool_id))

    return words


def prefer_warm(spawner: Any, selection: Any) -> list[Any]:
    """``node_affinity_preferred`` for a GPU spawn (called once the profile is applied): the admin's
    own terms, then one per node of the chosen pool that holds the server's image
    (``spawn.warmnodes``; docs/prepull.md), unless ``gpu_prefer_warm_nodes`` is off."""
    own = list(spawner._sorted_dict_values(spawner.node_affinity_preferred) or [])
    if not spawner.gpu_prefer_warm_nodes:
        return own
    counts = node_images_of(spawner)
    name = spawner.image  # the profile's and choice's overrides are applied by now: what the pod runs
    if counts is None or not isinstance(name, str) or not name:
        return own
    pool = selection.pool.pool
    return own + warm_preferences(counts.warm_nodes(pool.id, name), pool, selection.gpus)


def pull_context(spawner: Any) -> dict[str, Any]:
    """What a GPU spawn's progress estimates a cold pull with (``SpawnContext``: ``image``,
    ``image_bytes``, ``pull_rate``): the server's image, its size as the nodes that hold it report
    it, ``gpu_image_pull_mb_per_second``."""
    counts = node_images_of(spawner)
    image = spawner.image if isinstance(spawner.image, str) and spawner.image else None
    size = counts.size(image) if counts is not None and image else None
    return {"image": image, "image_bytes": size, "pull_rate": spawner.gpu_image_pull_mb_per_second}
