"""Which nodes of a GPU pool fit an image's CUDA: glue between pools and the CUDA rules."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from gpuspawner.capacity.model import DRIVER_LABELS, DriverGroup, PoolView, driver_key
from gpuspawner.cuda.custom import safe_verdict
from gpuspawner.cuda.image import ImageCuda, ImageDeclarationError, image_cuda
from gpuspawner.cuda.compatibility import CudaCheck, NodeCuda, Verdict

HOSTNAME_LABEL = "kubernetes.io/hostname"
# the key of the profile's own image when no profile option chooses the image
PROFILE_IMAGE = ""

Check = CudaCheck


# --------------------------------------------------------------------------
# What the admin declared: the image of a profile and of its image choices
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class ProfileImages:
    """The CUDA declarations of one GPU profile.

    ``option`` is the profile option whose choices set ``image`` (None: the
    profile's own image is the only one); ``images`` maps each choice key (or
    :data:`PROFILE_IMAGE`) to what that image carries; ``labels`` the choice's
    display name, for the spawn form.
    """

    images: Mapping[str, ImageCuda] = field(default_factory=dict)
    option: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    default_key: str | None = PROFILE_IMAGE

    @property
    def declared(self) -> bool:
        """Whether any image of the profile declares CUDA (else: no check)."""
        return any(i.has_cuda for i in self.images.values())

    def key_for(self, user_options: Mapping[str, Any]) -> str | None:
        """The image key a request picks: its choice of :attr:`option` (the
        default choice when absent); None for a free-text (unlisted) image."""
        if self.option is None:
            return PROFILE_IMAGE
        if user_options.get(f"{self.option}--unlisted-choice") not in (None, ""):
            return None
        choice = user_options.get(self.option)
        if choice in (None, ""):
            return self.default_key
        return choice if isinstance(choice, str) and choice in self.images else None

    def image(self, key: str | None) -> ImageCuda:
        """The image of ``key``; an empty (CPU, unchecked) one when unknown."""
        return self.images.get(key, ImageCuda()) if key is not None else ImageCuda()


def _sets_image(choice: Any) -> str | None:
    if not isinstance(choice, Mapping):
        return None
    override = choice.get("kubespawner_override")
    if isinstance(override, Mapping) and isinstance(override.get("image"), str):
        return override["image"]
    return None


def _declared(declaration: Any, name: str | None, where: str) -> ImageCuda:
    try:
        return image_cuda(declaration, name=name)
    except ImageDeclarationError as e:
        raise ValueError(
            f"{where}: {e}. Declare what the image carries, e.g. 'cuda': \"12.4\" or "
            "'cuda': {'cuda': '12.4', 'require': 'cuda>=12.4', 'compat': True}"
        ) from None


def profile_images(
    declaration: Any,
    image: str | None,
    profile_options: Mapping[str, Any],
    where: str = "gpu_profiles",
) -> ProfileImages:
    """Validate the ``cuda`` declarations of a GPU profile.

    ``declaration`` is the profile's ``cuda`` (its own ``image``, from its
    ``kubespawner_override``); each choice of a profile option that sets
    ``image`` in its ``kubespawner_override`` may carry its own ``cuda``. A
    choice that sets an image without ``cuda`` runs an image nobody
    described, so it is not checked (like a CPU image); a choice that sets no
    image runs the profile's. Raises ValueError naming the profile, the
    choice and the fix.
    """
    own = _declared(declaration, image, f"{where}: 'cuda'")
    image_options: list[str] = []
    for name, option in profile_options.items():
        choices = (option or {}).get("choices") or {} if isinstance(option, Mapping) else {}
        if not isinstance(choices, Mapping):
            continue
        sets_image = False
        for key, choice in choices.items():
            if isinstance(choice, Mapping) and "cuda" in choice and _sets_image(choice) is None:
                raise ValueError(
                    f"{where}: choice {key!r} of option {name!r} has 'cuda' but sets no image; "
                    "'cuda' describes the image a choice sets in its kubespawner_override "
                    "(move it to the profile, or add 'image' to the choice's kubespawner_override)"
                )
            sets_image = sets_image or _sets_image(choice) is not None
        if sets_image:
            image_options.append(name)
    if not image_options:
        return ProfileImages(images={PROFILE_IMAGE: own})
    if len(image_options) > 1:
        raise ValueError(
            f"{where}: options {', '.join(map(repr, image_options))} all choose the image; "
            "keep the image choices in one profile option so the CUDA check knows which image runs"
        )
    name = image_options[0]
    choices = profile_options[name]["choices"]
    images: dict[str, ImageCuda] = {}
    labels: dict[str, str] = {}
    default_key = next(iter(choices), None)
    for key, choice in choices.items():
        ref = _sets_image(choice)
        if ref is None:
            images[key] = own
        else:
            images[key] = _declared(
                choice.get("cuda"), ref, f"{where}: 'cuda' of choice {key!r} of option {name!r}"
            )
        labels[key] = str(choice.get("display_name") or key) if isinstance(choice, Mapping) else str(key)
        if isinstance(choice, Mapping) and choice.get("default"):
            default_key = key
    return ProfileImages(images=images, option=name, labels=labels, default_key=default_key)


# --------------------------------------------------------------------------
# One image on one pool, judged per driver group
# --------------------------------------------------------------------------


def node_cuda(node_name: str | None, driver: str | None, cuda: str | None, arch: str | None,
              product: str | None) -> NodeCuda:
    """The rules' view of a node. GFD publishes no NVML brand, and whether
    the GPU is a data-center part is inferred from the product name by the
    rules (``Facts.is_datacenter``), so neither is set here."""
    return NodeCuda(name=node_name, driver=driver, driver_cuda=cuda, arch=arch, product=product)


def group_cuda(group: DriverGroup, product: str | None) -> NodeCuda:
    """The rules' view of every node of ``group``: no name, since one verdict
    stands for all of them (the rules then speak of "the node")."""
    return node_cuda(None, group.driver_version, group.cuda_version, group.compute_capability, product)


class VerdictMemo:
    """Verdicts of CUDA checks, remembered by everything they depend on.

    A verdict is a function of the check, the policy, the image and the
    node's CUDA facts (driver, driver CUDA, architecture, product: one
    :class:`~gpuspawner.capacity.model.DriverGroup` of a pool), which change
    only when a node's driver does. So the check runs once per image and
    driver group; every later view and spawn is a dictionary lookup, whatever
    the number of nodes. Keys that stop being asked for (a driver upgraded
    away) fall out, least recently used first, beyond ``size`` entries.
    Checks are keyed by identity (and held, so an id is never reused).
    """

    def __init__(self, size: int = 4096) -> None:
        if size < 1:
            raise ValueError("a VerdictMemo needs room for at least one verdict")
        self.size = size
        self.misses = 0
        self._memo: OrderedDict[tuple, tuple[Check, Verdict]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._memo)

    def verdict(self, check: Check, image: ImageCuda, node: NodeCuda, policy: str) -> Verdict:
        key = (id(check), policy, image, node)
        hit = self._memo.get(key)
        if hit is not None and hit[0] is check:
            self._memo.move_to_end(key)
            return hit[1]
        self.misses += 1
        v = safe_verdict(check, image, node, policy)
        self._memo[key] = (check, v)
        if len(self._memo) > self.size:
            self._memo.popitem(last=False)
        return v


@dataclass(frozen=True)
class GroupFit:
    """One image on one driver group of a pool (``group`` None: the pool's
    declared driver, for a pool scaled to zero)."""

    group: DriverGroup | None
    verdict: Verdict

    @property
    def nodes(self) -> int:
        return self.group.nodes if self.group is not None else 0

    @property
    def driver(self) -> str:
        return self.verdict.driver or (self.group.driver_version if self.group else None) or "unknown"


def _drivers(groups: tuple[GroupFit, ...]) -> str:
    names = sorted({g.driver for g in groups})
    return f"driver{'s' if len(names) > 1 else ''} {', '.join(names)}"


@dataclass(frozen=True)
class PoolFit:
    """One image on the nodes of one pool, one verdict per driver group.

    Immutable; what is derived from the verdicts is computed once (the spawn page reads it
    several times per pool and image)."""

    image: ImageCuda
    pool_id: str
    level: str  # ok | warn | fail | skip, for the pool as the pod will see it
    verdict: Verdict | None  # the verdict shown: the best fitting group's, else a failing one's
    groups: tuple[GroupFit, ...] = ()
    policy: str = "minor"

    @property
    def refused(self) -> bool:
        """No node of the pool can run the image: refuse before any pod exists."""
        return self.level == "fail"

    @property
    def checked(self) -> bool:
        return self.image.has_cuda

    def _by(self, levels: tuple[str, ...]) -> tuple[GroupFit, ...]:
        return tuple(g for g in self.groups if g.verdict.level in levels)

    @cached_property
    def failing(self) -> tuple[GroupFit, ...]:
        return self._by(("fail",))

    @cached_property
    def warning_groups(self) -> tuple[GroupFit, ...]:
        return self._by(("warn",))

    @cached_property
    def excluded(self) -> tuple[GroupFit, ...]:
        """The groups the pod is kept off: the failing ones, when others may run it
        (when every group fails the spawn is refused and nothing is steered)."""
        if self.refused:
            return ()
        return tuple(g for g in self.failing if g.group is not None)

    @cached_property
    def note(self) -> str:
        """Which nodes are avoided, when some are."""
        bad = self.excluded
        if not bad:
            return ""
        total = sum(g.nodes for g in self.groups)
        count = sum(g.nodes for g in bad)
        return f"{count} of {total} nodes of this pool do not fit ({_drivers(bad)}); the server is kept off them"

    @cached_property
    def summary(self) -> str:
        """The spawn page's line; empty for an image that declares no CUDA."""
        if not self.checked:
            return ""
        if self.level == "skip":
            text = "driver unknown"
            if self.verdict is not None and self.verdict.rule not in ("no-driver-info", "no-nodes"):
                text += f": {self.verdict.reason}"
        elif self.level == "ok":
            text = "fits"
            warned = self.warning_groups
            if warned:
                text += (f" (with a caveat on the nodes with {_drivers(warned)}: "
                         "minor-version or forward compatibility)")
        elif self.level == "warn":
            assert self.verdict is not None
            text = f"fits with a caveat: {self.verdict.message}"
        else:
            assert self.verdict is not None
            text = f"does not fit: {self.verdict.message}"
        if self.note:
            text += f" ({self.note})"
        return text

    def warning(self) -> str | None:
        """The spawn-progress warning: the caveat of the fitting nodes, if any has one."""
        if self.refused or not self.checked:
            return None
        warned = self.warning_groups
        if not warned:
            return None
        v = warned[0].verdict
        if self.level == "warn":
            return f"CUDA check: {v.message}"
        return f"CUDA check: if the server lands on a node with {_drivers(warned)}: {v.message}"

    def refusal(self, pool_name: str | None = None) -> str:
        """The spawn error when :attr:`refused`: the image's CUDA, the nodes'
        drivers, the rule and the fix."""
        v = self.verdict
        assert v is not None
        image = self.image.name or "the chosen image"
        cuda = self.image.cuda_text
        if cuda:
            what = f"{image} (CUDA {cuda})"
        else:
            what = f"{image} (NVIDIA_REQUIRE_CUDA {'; '.join(self.image.requirements)})"
        drivers = sorted({(g.verdict.driver or "unknown", g.verdict.driver_cuda or "unknown") for g in self.groups})
        drv = "; ".join(f"driver {d}, CUDA up to {c}" for d, c in drivers)
        pool = pool_name or self.pool_id
        # the rule's name and the policy stay in the hub's log and in doctor, not in the user's words
        return (
            f"The image {what} does not fit any node of GPU pool {pool}{f' ({drv})' if drv else ''}: "
            f"{v.reason} {v.fix}".rstrip()
        )


_ORDER = {"ok": 0, "warn": 1, "skip": 2, "fail": 3}


def _vendor_fit(image: ImageCuda, pool: PoolView, policy: str) -> PoolFit:
    # CUDA runs on NVIDIA GPUs only; the rules (and any admin cuda_check) speak of NVIDIA drivers
    vendor = "AMD" if pool.vendor == "amd" else "non-NVIDIA"
    what = f"{vendor} GPUs ({pool.display_name})" if pool.product else f"{vendor} GPUs"
    v = Verdict(
        "fail" if vendor == "AMD" else "skip",
        "gpu-vendor",
        f"The image is built {f'with CUDA {image.cuda_text}' if image.cuda_text else 'for CUDA'}, "
        f"which runs on NVIDIA GPUs only; this pool has {what}.",
        "Use an image built for this pool's GPUs (e.g. ROCm for AMD), or choose an NVIDIA pool.",
        image_cuda=image.cuda_text,
        policy=policy,
    )
    return PoolFit(image, pool.id, v.level, v, (), policy)


def pool_fit(image: ImageCuda, pool: PoolView, policy: str, check: Check,
             memo: VerdictMemo | None = None) -> PoolFit:
    """The verdict of ``check`` for ``image`` on each driver group of ``pool``, and for the pool.

    Every node of a :class:`~gpuspawner.capacity.model.DriverGroup` gets the
    same verdict, so the check runs once per group (and, with ``memo``, once
    per group for the life of the hub): the cost does not grow with the
    number of nodes. The pool's level is what the pod gets after steering:
    ``ok``/``warn`` when some group fits (the best one's verdict), ``skip``
    when none fits but some publish no driver (never a refusal for what
    cannot be known), ``fail`` only when every group fails. A pool with no
    node yet (declared, scaled from zero) is judged by its declared driver, if any.
    """
    if not image.has_cuda:
        none = Verdict("skip", "no-cuda", "The image declares no CUDA, so the driver check does not apply.",
                       policy=policy)
        return PoolFit(image, pool.id, "skip", none, (), policy)
    if pool.vendor != "nvidia":
        return _vendor_fit(image, pool, policy)
    judge = memo.verdict if memo is not None else safe_verdict
    fits = [GroupFit(g, judge(check, image, group_cuda(g, pool.product), policy)) for g in pool.driver_groups]
    if not fits:
        if not (pool.driver_version or pool.cuda_version):
            v = Verdict("skip", "no-nodes", "The pool has no nodes whose driver is known.", policy=policy)
            return PoolFit(image, pool.id, "skip", v, (), policy)
        declared = node_cuda(None, pool.driver_version, pool.cuda_version, None, pool.product)
        fits.append(GroupFit(None, judge(check, image, declared, policy)))
    shown = min(fits, key=lambda f: _ORDER[f.verdict.level]).verdict
    return PoolFit(image, pool.id, shown.level, shown, tuple(fits), policy)


# --------------------------------------------------------------------------
# Keeping the pod off the groups that do not fit
# --------------------------------------------------------------------------


def steering_expressions(fit: PoolFit | None, pool: PoolView) -> list[dict[str, Any]]:
    """The matchExpressions that keep the pod off ``pool``'s nodes whose
    driver ``fit`` excludes (see the module docstring), ANDed with the pool's own.

    A failing group is excluded by a driver label value that no group the
    image may run on carries (``nvidia.com/cuda.driver-version.full``, else
    the deprecated ``nvidia.com/cuda.driver.major``): one value per driver,
    however many nodes run it. Only a group that carries neither label (or
    whose values a fitting group shares) is excluded by its nodes' hostnames.
    """
    bad = fit.excluded if fit is not None else ()
    if not bad:
        return []
    bad_keys = {g.group.key for g in bad}
    kept = [g.group for g in fit.groups if g.group is not None and g.group.key not in bad_keys]
    taken = {kv for g in kept for kv in g.labels}
    values: dict[str, set[str]] = {key: set() for key in DRIVER_LABELS}
    by_name: list[tuple] = []
    for g in bad:
        usable = [kv for kv in g.group.labels if kv not in taken]  # in DRIVER_LABELS order: the full version first
        if usable:
            values[usable[0][0]].add(usable[0][1])
        else:
            by_name.append(g.group.key)
    out = [{"key": key, "operator": "NotIn", "values": sorted(v, key=_version_order)}
           for key, v in values.items() if v]
    if by_name:
        names = sorted({dict(n.labels).get(HOSTNAME_LABEL, n.name) for n in pool.node_views
                        if driver_key(n) in by_name})
        if names:
            out.append({"key": HOSTNAME_LABEL, "operator": "NotIn", "values": names})
    return out


def _version_order(value: str) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else -1 for p in value.split("."))
