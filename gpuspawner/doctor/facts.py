"""What doctor knows of the hub: its GPU profiles, their images, the taints and tolerations
its servers get, its CUDA policy and check.  Pure: no JupyterHub, no traitlets.
Design notes: docs/troubleshooting.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from gpuspawner.cuda.image import ImageCuda
from gpuspawner.cuda.compatibility import POLICIES, NodeCuda, Verdict, decide
from gpuspawner.queue.rules import QueueRule, parse_rules
from gpuspawner.spawn.profiles import GPUProfileSpec

__all__ = ["ProfileImage", "HubFacts", "hub_facts_from_values"]


@dataclass(frozen=True)
class ProfileImage:
    """One image a GPU profile (or one of its choices) starts, with its CUDA declaration."""

    profile: str  # the profile's slug
    image: str | None
    cuda: ImageCuda
    choice: str | None = None  # "<option>:<choice>" when a profile option sets the image
    spec: GPUProfileSpec | None = None  # for its pool include/exclude globs

    @property
    def label(self) -> str:
        return f"{self.profile} ({self.choice})" if self.choice else self.profile

    def admits(self, pool_id: str) -> bool:
        return self.spec is None or self.spec.admits(pool_id)


@dataclass(frozen=True)
class HubFacts:
    """What doctor knows of the hub: from ``--config``, or gpuspawner's defaults."""

    tolerated_taint_keys: tuple[str, ...]
    tolerations: tuple[Mapping[str, Any], ...] = ()  # the admin's own (spawner-wide and per profile)
    images: tuple[ProfileImage, ...] = ()
    profiles: tuple[str, ...] = ()  # GPU profile slugs
    cuda_policy: str = "minor"
    # the hub's c.GPUSpawner.cuda_check: (ImageCuda, NodeCuda, policy) -> Verdict
    cuda_check: Callable[[ImageCuda, NodeCuda, str], Verdict] = decide
    source: str | None = None  # the config file; None: defaults (no --config)
    kueue_queues: tuple[QueueRule, ...] = ()  # c.GPUSpawner.gpu_kueue_queues
    namespace: str | None = None  # c.KubeSpawner.namespace, when the config sets it
    # how long a spawn waits: Spawner.start_timeout, and what gpuspawner may raise it to for a pool
    # that must scale up (gpu_image_pull_seconds, gpu_start_timeout_max)
    start_timeout: float = 60.0
    image_pull_seconds: float = 600.0
    start_timeout_max: float = 3600.0
    prepull: bool = False  # c.GPUSpawner.gpu_prepull


def _tolerations(value: Any, where: str) -> list[Mapping[str, Any]]:
    if value is None:
        return []
    if isinstance(value, Mapping):  # KubeSpawner also accepts a dict of tolerations (sorted by key)
        value = [value[k] for k in sorted(value)]
    if not isinstance(value, (list, tuple)) or not all(isinstance(t, Mapping) for t in value):
        raise ValueError(f"{where}: tolerations must be a list of dicts like "
                         "{'key': 'nvidia.com/gpu', 'operator': 'Exists', 'effect': 'NoSchedule'}")
    return list(value)


def _override_tolerations(entry: Any, where: str) -> list[Mapping[str, Any]]:
    """The tolerations a profile (or choice) sets in its ``kubespawner_override``."""
    override = entry.get("kubespawner_override") if isinstance(entry, Mapping) else None
    return _tolerations(override.get("tolerations"), where) if isinstance(override, Mapping) else []


def _static_tolerations(values: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The admin's tolerations outside the GPU profiles: spawner-wide and ``profile_list``'s."""
    tolerations = _tolerations(values.get("tolerations"), "c.GPUSpawner.tolerations")
    static = values.get("profile_list")
    if isinstance(static, (list, tuple)):
        for i, p in enumerate(static):
            tolerations += _override_tolerations(p, f"profile_list[{i}]")
    return tolerations


def _profile_tolerations(spec: GPUProfileSpec, where: str) -> list[Mapping[str, Any]]:
    """A GPU profile's tolerations and those of its options' choices."""
    tolerations = _tolerations(spec.kubespawner_override.get("tolerations"), where)
    for option in spec.profile_options.values():
        for key, choice in ((option or {}).get("choices") or {}).items():
            tolerations += _override_tolerations(choice, f"{where} choice {key!r}")
    return tolerations


def _profile_images(spec: GPUProfileSpec, default_image: str | None) -> Iterator[ProfileImage]:
    declared = spec.images
    for key, cuda in declared.images.items():
        yield ProfileImage(
            spec.slug,
            cuda.name or default_image,
            cuda,
            choice=f"{declared.option}:{key}" if declared.option else None,
            spec=spec,
        )


def hub_facts_from_values(
    values: Mapping[str, Any],
    *,
    source: str,
    cuda_policy: str | None = None,
    cuda_check: Callable[[ImageCuda, NodeCuda, str], Verdict] = decide,
) -> HubFacts:
    """The hub's GPU facts from resolved spawner settings (plain values).

    ``values`` holds ``gpu_profiles``, ``gpu_tolerated_taint_keys``,
    ``tolerations``, ``image``, ``profile_list`` and ``cuda_policy`` as the
    hub would see them (``commands.doctor`` resolves them from
    ``jupyterhub_config.py``); ``cuda_policy`` given here overrides the
    config's.  Profiles are validated by the spawner's own
    ``GPUProfileSpec.from_config``, which reads each image's ``cuda``
    declaration (on the profile, or on the profile-option choice that sets the
    image: ``cudafit.profile_images``).  Raises ValueError naming the
    setting to fix.
    """
    keys = values.get("gpu_tolerated_taint_keys")
    if not isinstance(keys, (list, tuple)) or not all(isinstance(k, str) for k in keys):
        raise ValueError(f"gpu_tolerated_taint_keys must be a list of strings, got {keys!r}")
    policy = cuda_policy if cuda_policy is not None else values.get("cuda_policy", "minor")
    if policy not in POLICIES:
        raise ValueError(f"cuda_policy must be one of {', '.join(POLICIES)}, not {policy!r}")
    tolerations = _static_tolerations(values)
    default_image = values.get("image") if isinstance(values.get("image"), str) else None
    raw_profiles = values.get("gpu_profiles") or []
    if not isinstance(raw_profiles, (list, tuple)):
        raise ValueError(f"gpu_profiles must be a list of dicts, got {type(raw_profiles).__name__}")
    images: list[ProfileImage] = []
    slugs: list[str] = []
    for i, raw in enumerate(raw_profiles):
        spec = GPUProfileSpec.from_config(raw, where=f"gpu_profiles[{i}]")
        slugs.append(spec.slug)
        tolerations += _profile_tolerations(spec, f"gpu_profiles[{i}] (slug {spec.slug!r})")
        images += _profile_images(spec, default_image)
    return HubFacts(
        tolerated_taint_keys=tuple(keys),
        tolerations=tuple(tolerations),
        images=tuple(images),
        profiles=tuple(slugs),
        cuda_policy=policy,
        cuda_check=cuda_check,
        source=source,
        kueue_queues=parse_rules(values.get("gpu_kueue_queues") or (), "c.GPUSpawner.gpu_kueue_queues"),
        namespace=values.get("namespace") if isinstance(values.get("namespace"), str) and values.get("namespace") else None,
        start_timeout=_seconds(values, "start_timeout", 60.0),
        image_pull_seconds=_seconds(values, "gpu_image_pull_seconds", 600.0),
        start_timeout_max=_seconds(values, "gpu_start_timeout_max", 3600.0),
        prepull=values.get("gpu_prepull") is True,
    )


def _seconds(values: Mapping[str, Any], name: str, default: float) -> float:
    value = values.get(name, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ValueError(f"{name} must be a number of seconds, not {value!r}")
    return float(value)
