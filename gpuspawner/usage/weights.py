"""How many GPU-hours an hour of a holding counts: its share of a GPU times the admin's weight."""

from __future__ import annotations

import fnmatch
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

# MIG compute slices per GPU (NVIDIA MIG User Guide, "Supported MIG Profiles"): 7 on A100, H100,
# H200, B200 and GH200; 4 on A30. A profile "<g>g.<memory>" holds g of them.
_MIG_SLICES_DEFAULT = 7
_MIG_SLICES = (("a30", 4),)
_MIG_PROFILE = re.compile(r"(?:^|-)(?:mig-)?([1-9])g\.[0-9]+gb", re.IGNORECASE)
# a time-sliced or MPS share: the renamed resource, or "-SHARED" on GFD's product label (NVIDIA/k8s-device-plugin
# README, "Shared Access to GPUs", and GPU Feature Discovery's labels)
SHARED_RESOURCE = "nvidia.com/gpu.shared"
_SHARED_SUFFIX = "-shared"


def normalize_product(product: str) -> str:
    """A product name compared loosely: case, spaces and dashes alike ("NVIDIA H100 80GB HBM3" and
    GPU Feature Discovery's "NVIDIA-H100-80GB-HBM3" are one product)."""
    return re.sub(r"[\s_-]+", "-", product.strip().lower())


def base_product(product: str | None) -> str | None:
    """The physical GPU's product of a MIG slice or shared replica ("...-MIG-1g.10gb", "...-SHARED")."""
    if not product:
        return None
    name = normalize_product(product)
    name = re.sub(r"-mig-[0-9a-z.+]+$", "", name)
    if name.endswith(_SHARED_SUFFIX):
        name = name[: -len(_SHARED_SUFFIX)]
    return name


def is_mig(resource: str, product: str | None) -> bool:
    return resource.startswith("nvidia.com/mig-") or "-mig-" in normalize_product(product or "")


def is_shared(resource: str, product: str | None) -> bool:
    return resource == SHARED_RESOURCE or normalize_product(product or "").endswith(_SHARED_SUFFIX)


def share_fraction(resource: str, product: str | None, replicas: int | None = None) -> float:
    """The part of one physical GPU that one unit of ``resource`` is: 1 for a whole GPU; g/7 for a
    MIG slice of profile ``<g>g.*`` (g/4 on an A30); 1/replicas for a time-sliced or MPS share
    (``nvidia.com/gpu.replicas`` of its node; a share whose replicas are unknown counts 1)."""
    if is_mig(resource, product):
        m = _MIG_PROFILE.search(resource) or _MIG_PROFILE.search(product or "")
        if m:
            name = normalize_product(product or "")
            slices = next((n for key, n in _MIG_SLICES if key in name), _MIG_SLICES_DEFAULT)
            return min(1.0, int(m.group(1)) / slices)
        return 1.0
    if is_shared(resource, product) and replicas and replicas > 1:
        return 1.0 / replicas
    return 1.0


def _is_pool_glob(key: str) -> bool:
    return ":" in key or any(ch in key for ch in "*?[")


@dataclass(frozen=True)
class Weights:
    """The admin's weights: per pool id glob (``"h100:*"``) or per product name; default 1."""

    pool_globs: tuple[tuple[str, float], ...] = ()
    products: tuple[tuple[str, float], ...] = ()

    @classmethod
    def from_config(cls, value: object, where: str = "gpu_hour_weights") -> "Weights":
        if value is None:
            return cls()
        if not isinstance(value, Mapping):
            raise ValueError(f'{where} must be a dict of product name or pool id glob to weight, '
                             f'e.g. {{"NVIDIA H100 80GB HBM3": 2}}, not {value!r}')
        globs, products = [], []
        for key, weight in value.items():
            if not isinstance(key, str) or not key.strip():
                raise ValueError(f"{where}: keys must be product names or pool id globs, not {key!r}")
            if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight) \
                    or weight < 0:
                raise ValueError(f"{where}[{key!r}] must be a number of GPU-hours per GPU-hour, 0 or more, "
                                 f"e.g. 2, not {weight!r}")
            if _is_pool_glob(key):
                globs.append((key.strip(), float(weight)))
            else:
                products.append((normalize_product(key), float(weight)))
        return cls(tuple(globs), tuple(products))

    def weight(self, pool_id: str | None, product: str | None) -> float:
        """The weight of one whole GPU of ``product`` in pool ``pool_id``: the first pool glob that
        matches, else the product's (its physical GPU's for a slice or share), else 1."""
        for pattern, weight in self.pool_globs:
            if pool_id and fnmatch.fnmatchcase(pool_id, pattern):
                return weight
        names = {normalize_product(product)} if product else set()
        base = base_product(product)
        if base:
            names.add(base)
        for name, weight in self.products:
            if name in names:
                return weight
        return 1.0


def hourly_rate(gpus: int, share: float, weight: float) -> float:
    """Weighted GPU-hours per hour of a holding of ``gpus`` units."""
    return gpus * share * weight
