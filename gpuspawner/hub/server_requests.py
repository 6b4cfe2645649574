"""What each GPU profile's pod asks of its node besides GPUs, from the spawner's traits or the hub's config.

The rule is ``spawn/resource_requests.py``; this module only reads where the values come from.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpuspawner.spawn.profiles import GPUProfileSpec, never_fits
from gpuspawner.spawn.resource_requests import REQUEST_TRAITS, profile_requests, server_request

__all__ = ["requests_of", "server_request_now", "spawner_defaults", "config_defaults", "all_requests", "fits_profiles"]


def spawner_defaults(spawner: Any) -> dict[str, Any]:
    """The :data:`REQUEST_TRAITS` of a spawner, as configured (before any profile's override)."""
    return {name: getattr(spawner, name, None) for name in REQUEST_TRAITS}


def server_request_now(spawner: Any) -> tuple[int, ...]:
    """What this spawner's pod asks of its node, from its traits as they are now (overrides applied)."""
    return server_request([spawner_defaults(spawner)])


def config_defaults(config: Any, sections: Iterable[str] = ("Spawner", "KubeSpawner", "GPUSpawner")) -> dict[str, Any]:
    """The :data:`REQUEST_TRAITS` the hub's config sets, later sections winning (a subclass's
    section overrides its parents', as traitlets applies them)."""
    out: dict[str, Any] = {}
    for section in sections:
        values = config.get(section) if hasattr(config, "get") else None
        if not values:
            continue
        for name in REQUEST_TRAITS:
            if name in values:
                out[name] = values[name]
    return out


def requests_of(specs: Iterable[GPUProfileSpec], defaults: Mapping[str, Any]) -> dict[str, dict]:
    """Per profile slug, what each of its images' pods asks of a node (``resource_requests.profile_requests``)."""
    return {
        spec.slug: profile_requests(defaults, spec.kubespawner_override, spec.images.option, spec.profile_options)
        for spec in specs
    }


def all_requests(requests: Mapping[str, Mapping[Any, tuple[int, ...]]]) -> set[tuple[int, ...]]:
    """Every distinct request of every profile: what the capacity cache counts fits for."""
    return {r for per_image in requests.values() for r in per_image.values()}


def fits_profiles(pool: Any, specs: Iterable[GPUProfileSpec],
                  requests: Mapping[str, Mapping[Any, tuple[int, ...]]]) -> dict[str, Any]:
    """``"fits_profiles"`` of one pool in ``GET /hub/api/gpus``: per GPU profile slug, ``True`` or the
    reason, in words, why no node of the pool can ever hold that profile's server (its default image)."""
    return {
        spec.slug: never_fits(pool, (requests.get(spec.slug) or {}).get(spec.images.key_for({}))) or True
        for spec in specs
    }
