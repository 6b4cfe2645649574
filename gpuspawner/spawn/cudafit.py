"""Which nodes of a GPU pool fit an image's CUDA: glue between pools and the CUDA rules.

Pure (stdlib, ``gpuspawner.cuda`` and ``gpuspawner.capacity.model`` only).
The spawner uses it three times for one image and one pool:

* on the spawn page, :attr:`PoolFit.summary` says "fits", "fits with a
  caveat: ...", "does not fit: ..." or "driver unknown";
* at start, :attr:`PoolFit.refused` (every node of the pool fails) refuses the
  spawn with :meth:`PoolFit.refusal` before any pod exists, and
  :func:`steering_expression` keeps the pod off the nodes that fail;
* after the pod is created, the opt-in probe (``spawn.probe``) checks the node itself.

The admin's ``cuda_check`` is called through ``cuda.custom.safe_verdict``.

How a pod is kept off the nodes whose driver does not fit
---------------------------------------------------------
A required node affinity expression ``kubernetes.io/hostname NotIn [the
failing nodes]``, added to every ``nodeSelectorTerm`` (the terms are ORed,
the expressions in one term ANDed: kubernetes.io, "Assigning Pods to Nodes").
Chosen over ``nvidia.com/cuda.driver-version.full In [fitting drivers]``
because:

* ``kubernetes.io/hostname`` is set by the kubelet on every node (kubernetes.io,
  "Well-Known Labels, Annotations and Taints"), whatever labels GPU Feature
  Discovery wrote. The ``.full`` driver label exists only since GFD v0.15.0;
  a node with only the deprecated ``nvidia.com/cuda.driver.major/minor/rev``
  (reference ``cuda-compat-and-gpu-labels.md`` section 4.1) would need three
  ANDed expressions per driver version, i.e. one term per fitting driver,
  multiplied by every term the admin already has.
* A node that publishes no driver (verdict ``skip``: "driver unknown") must
  stay eligible; ``In`` would exclude it, ``NotIn`` does not (``NotIn`` also
  matches nodes without the label, Kubernetes ``nodeaffinity`` semantics).
* Nodes the hub has not seen yet (a scale-up) stay eligible; the opt-in probe
  checks them on the node itself.

The value is the node's ``kubernetes.io/hostname`` label (carried in
``NodeView.labels``), which may differ from the node's name on some clouds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuspawner.capacity.model import PoolView
from gpuspawner.cuda.custom import safe_verdict
from gpuspawner.cuda.image import ImageCuda, ImageDeclarationError, image_cuda
from gpuspawner.cuda.rules import CudaCheck, NodeCuda, Verdict

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
# One image on one pool
# --------------------------------------------------------------------------


def node_cuda(node_name: str | None, driver: str | None, cuda: str | None, arch: str | None,
              product: str | None) -> NodeCuda:
    """The rules' view of a node. GFD publishes no NVML brand, and whether
    the GPU is a data-center part is inferred from the product name by the
    rules (``Facts.is_datacenter``), so neither is set here."""
    return NodeCuda(name=node_name, driver=driver, driver_cuda=cuda, arch=arch, product=product)


@dataclass(frozen=True)
class NodeFit:
    name: str | None  # None: the pool's declared driver (a pool scaled from zero)
    hostname: str | None
    verdict: Verdict


@dataclass(frozen=True)
class PoolFit:
    """One image on the nodes of one pool."""

    image: ImageCuda
    pool_id: str
    level: str  # ok | warn | fail | skip, for the pool as the pod will see it
    verdict: Verdict | None  # the verdict shown: the best fitting node's, else a failing one's
    nodes: tuple[NodeFit, ...] = ()
    policy: str = "minor"

    @property
    def refused(self) -> bool:
        """No node of the pool can run the image: refuse before any pod exists."""
        return self.level == "fail"

    @property
    def checked(self) -> bool:
        return self.image.has_cuda

    def _by(self, levels: tuple[str, ...]) -> tuple[NodeFit, ...]:
        return tuple(n for n in self.nodes if n.verdict.level in levels)

    @property
    def failing(self) -> tuple[NodeFit, ...]:
        return self._by(("fail",))

    @property
    def warning_nodes(self) -> tuple[NodeFit, ...]:
        return self._by(("warn",))

    @property
    def exclude_hostnames(self) -> tuple[str, ...]:
        """Hostnames to keep the pod off: the failing nodes, when others may run it."""
        if self.refused:
            return ()
        return tuple(sorted({n.hostname for n in self.failing if n.hostname}))

    @property
    def note(self) -> str:
        """Which nodes are avoided, when some are."""
        bad = [n.name for n in self.failing if n.name]
        if not bad or self.refused:
            return ""
        shown = ", ".join(sorted(bad)[:5]) + (", ..." if len(bad) > 5 else "")
        return (
            f"{len(bad)} of {len(self.nodes)} nodes of this pool do not fit ({shown}); "
            "the server is kept off them"
        )

    @property
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
            warned = sorted(n.name for n in self.warning_nodes if n.name)
            if warned:
                text += f" (with a caveat on {', '.join(warned)}: minor-version or forward compatibility)"
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
        warned = self.warning_nodes
        if not warned:
            return None
        v = warned[0].verdict
        if self.level == "warn":
            return f"CUDA check: {v.message}"
        names = ", ".join(sorted(n.name for n in warned if n.name))
        return f"CUDA check: if the server lands on {names or 'some nodes'}: {v.message}"

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
        drivers = sorted(
            {
                (n.verdict.driver or "unknown", n.verdict.driver_cuda or "unknown")
                for n in self.nodes
            }
        )
        drv = "; ".join(f"driver {d}, CUDA up to {c}" for d, c in drivers)
        pool = pool_name or self.pool_id
        return (
            f"The image {what} does not fit any node of GPU pool {pool} ({drv}): "
            f"{v.reason} (rule: {v.rule}, policy: {self.policy}) {v.fix}".rstrip()
        )


_ORDER = {"ok": 0, "warn": 1, "skip": 2, "fail": 3}


def pool_fit(image: ImageCuda, pool: PoolView, policy: str, check: Check) -> PoolFit:
    """The verdict of ``check`` for ``image`` on each node of ``pool``, and for the pool.

    The pool's level is what the pod gets after steering: ``ok``/``warn``
    when some node fits (the best one's verdict), ``skip`` when none fits but
    some publish no driver (never a refusal for what cannot be known),
    ``fail`` only when every node fails. A pool with no node yet (declared,
    scaled from zero) is judged by its declared driver, if any.
    """
    if not image.has_cuda:
        none = Verdict("skip", "no-cuda", "The image declares no CUDA, so the driver check does not apply.",
                       policy=policy)
        return PoolFit(image, pool.id, "skip", none, (), policy)
    if pool.vendor != "nvidia":
        # CUDA runs on NVIDIA GPUs only; the rules (and any admin cuda_check) speak of NVIDIA drivers
        vendor = "AMD" if pool.vendor == "amd" else "non-NVIDIA"
        what = f"{vendor} GPUs ({pool.product})" if pool.product else f"{vendor} GPUs"
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
    fits: list[NodeFit] = []
    for n in pool.node_views:
        labels = dict(n.labels)
        v = safe_verdict(check, image, node_cuda(n.name, n.driver_version, n.cuda_version,
                                                n.compute_capability, pool.product), policy)
        fits.append(NodeFit(n.name, labels.get(HOSTNAME_LABEL, n.name), v))
    if not fits:
        if pool.driver_version or pool.cuda_version:
            v = safe_verdict(check, image, node_cuda(None, pool.driver_version, pool.cuda_version, None,
                                                    pool.product), policy)
            fits.append(NodeFit(None, None, v))
        else:
            v = Verdict("skip", "no-nodes", "The pool has no nodes whose driver is known.", policy=policy)
            return PoolFit(image, pool.id, "skip", v, (), policy)
    shown = min(fits, key=lambda f: (_ORDER[f.verdict.level], f.name or "")).verdict
    return PoolFit(image, pool.id, shown.level, shown, tuple(fits), policy)


def steering_expression(fit: PoolFit | None) -> dict[str, Any] | None:
    """The matchExpression that keeps the pod off the failing nodes (see
    the module docstring for why hostname ``NotIn``), or None."""
    names = fit.exclude_hostnames if fit is not None else ()
    if not names:
        return None
    return {"key": HOSTNAME_LABEL, "operator": "NotIn", "values": list(names)}
