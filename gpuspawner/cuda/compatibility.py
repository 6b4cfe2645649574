"""Does an image's CUDA fit a node's NVIDIA driver?  The decision and its policies.
Design notes: docs/cuda-compatibility.md.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuspawner.cuda import require, table
from gpuspawner.cuda.image import ImageCuda
from gpuspawner.cuda.versions import (
    Version,
    VersionError,
    compare,
    fmt,
    fmt_cuda,
    parse_arch,
    parse_cuda,
    parse_driver,
)

POLICIES = ("strict", "minor", "forward")
LEVELS = ("ok", "warn", "fail", "skip")
# how bad a level is, to combine verdicts: a skip says nothing
SEVERITY = {"skip": 0, "ok": 1, "warn": 2, "fail": 3}


class PolicyError(ValueError):
    """An unknown compatibility policy."""


@dataclass(frozen=True, slots=True)
class NodeCuda:
    """The CUDA facts of one node, as plain values (from GFD labels or NVML).

    ``driver``: ``"535.183.01"``; ``driver_cuda``: ``"12.2"`` (None: derived
    from ``driver`` with NVIDIA's table); ``arch``: ``"8.0"``; ``brand``: an
    NVML brand name (``"geforce"``, ``"nvidia"``, ``"tesla"``...; GFD has no
    brand label, so usually None); ``datacenter``: None = infer it
    (:attr:`Facts.is_datacenter`); ``product``: ``nvidia.com/gpu.product``.
    """

    name: str | None = None
    driver: str | None = None
    driver_cuda: str | None = None
    arch: str | None = None
    brand: str | None = None
    datacenter: bool | None = None
    product: str | None = None


@dataclass(frozen=True, slots=True)
class Verdict:
    """The answer for one image on one node.

    ``reason`` and ``fix`` are whole sentences shown to users verbatim.
    """

    level: str  # ok | warn | fail | skip
    rule: str  # backward, minor-version, forward, arch-floor, driver-too-old, ...
    reason: str
    fix: str = ""
    image_cuda: str | None = None
    driver: str | None = None
    driver_cuda: str | None = None
    policy: str = "minor"

    @property
    def ok(self) -> bool:
        """The image may start here (possibly with a warning)."""
        return self.level != "fail"

    @property
    def message(self) -> str:
        return f"{self.reason} {self.fix}".strip()

    def to_json(self) -> dict[str, Any]:
        return {
            "level": self.level,
            "rule": self.rule,
            "reason": self.reason,
            "fix": self.fix,
            "image_cuda": self.image_cuda,
            "driver": self.driver,
            "driver_cuda": self.driver_cuda,
            "policy": self.policy,
        }


CudaCheck = Callable[[ImageCuda, NodeCuda, str], Verdict]


# --------------------------------------------------------------------------
# Facts an admin may override
# --------------------------------------------------------------------------

# Forward-compatibility support matrix ([V-copy], NVIDIA's
# forward-compatibility page,
# https://docs.nvidia.com/deploy/cuda-compatibility/forward-compatibility.html): cuda-compat
# package X.Y -> the driver branches
# (major driver versions) marked "C".  Branches not listed are end of life or
# New Feature Branches and "not supported targets"; "N/A" (the branch's own
# CUDA) needs no compat package and is covered by backward compatibility.
FORWARD_MATRIX: dict[tuple[int, int], frozenset[int]] = {
    (13, 4): frozenset({535, 570, 580, 590, 595, 610}),
    (13, 3): frozenset({535, 570, 580, 590, 595}),
    (13, 2): frozenset({535, 570, 580, 590}),
    (13, 1): frozenset({535, 570, 580}),
    (13, 0): frozenset({535, 570}),
    (12, 9): frozenset({535, 570}),
    (12, 8): frozenset({535}),
    (12, 6): frozenset({535}),
    (12, 5): frozenset({535}),
    (12, 4): frozenset({535}),
    (12, 3): frozenset({535}),
}

_NOT_DATACENTER_BRANDS = frozenset(
    {"geforce", "geforcertx", "titan", "titanrtx", "quadro", "quadrortx", "nvidiartx", "nvs"}
)
# [S] current data-center parts report NVML brand NVIDIA (H100, GH200, T4 on
# 530+), older ones Tesla (libnvidia-container ``src/driver.c``; nvml.h).
_DATACENTER_BRANDS = frozenset({"tesla", "nvidia"})
_NOT_DATACENTER_WORDS = frozenset({"geforce", "titan", "quadro", "rtx", "nvs"})
# [I] data-center model numbers in GFD product names: A100, H100, H200, B200,
# GB200, GH200, L4, L40S, A10G, T4, V100, P100, P4, K80...  Workstation boards
# carry "RTX"/"Quadro" (RTX A6000) and are excluded above.
_DATACENTER_MODEL = re.compile(r"^(tesla|(a|b|h|l|t|v|p|k|gb|gh)\d{1,3}[a-z]?)$")


def datacenter_from_node(node: NodeCuda) -> bool | None:
    """[I] Is the node's GPU a data-center GPU?  From ``datacenter``, else the
    NVML brand, else the product name; None when it cannot be told."""
    if node.datacenter is not None:
        return node.datacenter
    if node.brand:
        try:
            key = require.brand_key(node.brand)
        except require.RequireError:
            key = None
        if key in _DATACENTER_BRANDS:
            return True
        if key in _NOT_DATACENTER_BRANDS:
            return False
    if node.product:
        words = [w for w in re.split(r"[-_ .]+", node.product.lower()) if w]
        if any(w in _NOT_DATACENTER_WORDS for w in words):
            return False
        if any(_DATACENTER_MODEL.match(w) for w in words):
            return True
    return None


def brand_from_node(node: NodeCuda) -> str | None:
    """libnvidia-container's brand word for the node, or None (= unknown, passes).

    From ``brand`` when given; otherwise None: GFD publishes no brand and
    guessing one from the product name could turn a pass into a refusal.
    """
    if not node.brand:
        return None
    try:
        return require.lnc_brand(node.brand)
    except require.RequireError:
        return None


def _default_mvc_floors() -> dict[int, Version]:
    return {major: floor for major, (floor, _status) in table.mvc_floors().items()}


@dataclass(frozen=True)
class Facts:
    """The secondary facts the rules rest on; replace any to override.

    ``mvc_floors``: CUDA major -> minimum driver for minor-version
    compatibility (12.x 525.60.13 [S], 13.x 580.65.06 [I]).
    ``arch_floors``: CUDA major -> minimum compute capability for that major
    and later (12: 5.0, Kepler dropped [U]; 13: 7.5 [S]).
    ``forward_matrix``: see :data:`FORWARD_MATRIX`.
    ``is_datacenter`` / ``brand_of``: [I] approximations, see above.
    ``enforce_require``: fail (not warn) an image whose ``NVIDIA_REQUIRE_*``
    is unsatisfied although the rules accept it: set it when nodes run the
    NVIDIA runtime in legacy mode, which refuses such containers.
    """

    mvc_floors: Mapping[int, Version] = field(default_factory=_default_mvc_floors)
    arch_floors: Mapping[int, tuple[int, int]] = field(
        default_factory=lambda: {12: (5, 0), 13: (7, 5)}
    )
    forward_matrix: Mapping[tuple[int, int], frozenset[int]] = field(
        default_factory=lambda: dict(FORWARD_MATRIX)
    )
    is_datacenter: Callable[[NodeCuda], bool | None] = datacenter_from_node
    brand_of: Callable[[NodeCuda], str | None] = brand_from_node
    enforce_require: bool = False


DEFAULT_FACTS = Facts()


# --------------------------------------------------------------------------
# The decision
# --------------------------------------------------------------------------


def _first_upper(text: str) -> str:
    return text[:1].upper() + text[1:]


def _node_name(node: NodeCuda) -> str:
    return f"node {node.name}" if node.name else "the node"


def _driver_words(
    driver_text: str | None, driver_cuda: tuple[int, int] | None, derived: bool
) -> str:
    if driver_text and driver_cuda:
        how = " (from NVIDIA's driver table)" if derived else ""
        return (
            f"NVIDIA driver {driver_text}, which supports CUDA up to {fmt_cuda(driver_cuda)}{how}"
        )
    if driver_cuda:
        return f"an NVIDIA driver that supports CUDA up to {fmt_cuda(driver_cuda)}"
    return f"NVIDIA driver {driver_text}"


def _min_driver_words(cuda: tuple[int, int]) -> str:
    row = table.min_driver_for_cuda(cuda)
    if row is None or row.min_driver is None:
        return f"a driver that supports CUDA {fmt_cuda(cuda)}"
    return f"driver {row.min_driver_text} or newer"


def _arch_floor(facts: Facts, cuda: tuple[int, int]) -> tuple[int, int] | None:
    majors = [m for m in facts.arch_floors if m <= cuda[0]]
    return facts.arch_floors[max(majors)] if majors else None


def decide(
    image: ImageCuda, node: NodeCuda, policy: str = "minor", facts: Facts = DEFAULT_FACTS
) -> Verdict:
    """The verdict for ``image`` on ``node`` under ``policy`` (strict | minor | forward).

    Never raises on node data (a malformed label gives a ``skip``); raises
    :class:`PolicyError` for an unknown policy.
    """
    if policy not in POLICIES:
        raise PolicyError(f"unknown CUDA policy {policy!r}: use one of {', '.join(POLICIES)}")
    where = _node_name(node)
    cuda = image.effective_cuda
    cuda_text = fmt_cuda(cuda) if cuda else None

    def verdict(level: str, rule: str, reason: str, fix: str = "") -> Verdict:
        return Verdict(
            level,
            rule,
            reason,
            fix,
            cuda_text,
            node.driver,
            fmt_cuda(driver_cuda) if driver_cuda else None,
            policy,
        )

    driver_cuda: tuple[int, int] | None = None
    if not image.has_cuda:
        return verdict(
            "skip", "no-cuda", "The image declares no CUDA, so the driver check does not apply."
        )

    # ---- the node's facts; bad labels make the check unknowable, not a crash
    try:
        driver = parse_driver(node.driver) if node.driver else None
        arch = parse_arch(node.arch) if node.arch else None
        driver_cuda = parse_cuda(node.driver_cuda) if node.driver_cuda else None
    except VersionError as e:
        return verdict(
            "skip",
            "bad-node-labels",
            f"The CUDA check was skipped on {where}: {e}.",
            "Fix the node's GPU Feature Discovery labels (or run gpuspawner label-node).",
        )
    derived = False
    if driver_cuda is None and driver is not None:
        found = table.cuda_for_driver(driver)
        if found:
            driver_cuda, derived = found[0], True
    if driver is None and driver_cuda is None:
        return verdict(
            "skip",
            "no-driver-info",
            f"The CUDA check was skipped on {where}: it publishes no NVIDIA driver version.",
            "Install GPU Feature Discovery or run gpuspawner label-node on GPU nodes.",
        )
    drv_words = _driver_words(node.driver, driver_cuda, derived)

    # ---- NVIDIA_REQUIRE_*, as libnvidia-container decides it
    req_outcome: require.Outcome | None = None
    if image.requirements:
        props = require.Properties(
            cuda=fmt_cuda(driver_cuda) if driver_cuda else None,
            driver=node.driver.strip() if node.driver else None,
            arch=fmt_cuda(arch) if arch else None,
            brand=facts.brand_of(node),
        )
        try:
            req_outcome = require.check(list(image.requirements), [props])
        except require.RequireError as e:
            return verdict(
                "fail",
                "nvidia-require-invalid",
                f"The image's NVIDIA_REQUIRE_CUDA cannot be evaluated ({e}); the NVIDIA container "
                "runtime would refuse to start it.",
                "Ask the admin to correct the requirement declared for this image.",
            )

    if cuda is None:
        # only a requirement is known (has_cuda guarantees one): it decides alone
        outcome = req_outcome or require.Outcome(True, "")
        if outcome.satisfied:
            return verdict(
                "ok",
                "nvidia-require",
                f"{_first_upper(where)} ({drv_words}) satisfies the image's NVIDIA_REQUIRE_CUDA.",
            )
        return verdict(
            "fail",
            "nvidia-require",
            f"{_first_upper(where)} ({drv_words}) does not satisfy the image's requirement: "
            f"{outcome.message}.",
            "Choose another image or another GPU pool, or ask the admin to update the driver.",
        )

    base = _decide_cuda(
        image, cuda, node, where, driver, driver_cuda, arch, drv_words, policy, facts
    )
    result = verdict(*base)
    if req_outcome is None or req_outcome.satisfied or result.level == "fail":
        return result
    # the rules accept the image but its own requirement is unsatisfied
    refused = (
        f"{result.reason} But its NVIDIA_REQUIRE_CUDA is not satisfied ({req_outcome.message}): "
        "an NVIDIA container runtime in legacy mode refuses to start it."
    )
    if facts.enforce_require:
        older = f"CUDA {fmt_cuda(driver_cuda)} or older" if driver_cuda else "an older CUDA"
        return verdict(
            "fail",
            "nvidia-require",
            refused,
            f"Use an image built with {older}, choose another GPU pool, or ask the admin to "
            f"install {_min_driver_words(cuda)}.",
        )
    return verdict("warn", "nvidia-require", refused, result.fix)


def _decide_cuda(
    image: ImageCuda,
    cuda: tuple[int, int],
    node: NodeCuda,
    where: str,
    driver: Version | None,
    driver_cuda: tuple[int, int] | None,
    arch: tuple[int, int] | None,
    drv_words: str,
    policy: str,
    facts: Facts,
) -> tuple[str, str, str, str]:
    img = f"CUDA {fmt_cuda(cuda)}"

    # ---- architecture floor [S]/[U]
    floor = _arch_floor(facts, cuda)
    if arch is not None and floor is not None and arch < floor:
        return (
            "fail",
            "arch-floor",
            f"The image is built with {img}, which does not support the GPUs of {where} "
            f"(compute capability {fmt_cuda(arch)}; CUDA {cuda[0]} needs "
            f"{fmt_cuda(floor)} or newer).",
            f"Use an image built with an older CUDA major version, or choose a GPU pool with "
            f"newer GPUs (compute capability {fmt_cuda(floor)} or newer).",
        )

    full_fix = f"ask the admin to install {_min_driver_words(cuda)} on {where}"

    # ---- backward compatibility [V-copy]
    if driver_cuda is not None and driver_cuda >= cuda:
        return (
            "ok",
            "backward",
            f"The image is built with {img}; {where} has {drv_words}: compatible "
            "(rule: backward compatibility).",
            "",
        )

    older = (
        f"an image built with CUDA {fmt_cuda(driver_cuda)} or older"
        if driver_cuda
        else "an image built with an older CUDA"
    )

    # ---- forward compatibility (opt-in) [V-copy matrix; data-center test is [I]]
    forward_note = ""
    if policy == "forward":
        ok, forward_note = _forward(image, cuda, node, where, driver, facts)
        if ok:
            return (
                "warn",
                "forward",
                f"The image is built with {img} but {where} has {drv_words}; it runs through "
                f"forward compatibility with the image's cuda-compat {fmt_cuda(image.compat)} "
                "libraries (rule: forward compatibility; CUDA-OpenGL/Vulkan interop does not "
                "work).",
                f"For full support use {older}, choose a GPU pool with a newer driver, "
                f"or {full_fix}.",
            )

    # ---- minor-version compatibility [V-copy]; floors 12.x [S], 13.x [I]
    mvc_floor = facts.mvc_floors.get(cuda[0])
    mvc = False
    if mvc_floor is not None:
        if driver is not None:
            mvc = compare(driver, mvc_floor) >= 0 and (
                driver_cuda is None or driver_cuda[0] == cuda[0]
            )
        elif driver_cuda is not None and driver_cuda[0] == cuda[0]:
            row = table.min_driver_for_cuda(driver_cuda)
            mvc = bool(row and row.min_driver and compare(row.min_driver, mvc_floor) >= 0)
    if mvc and policy != "strict":
        return (
            "warn",
            "minor-version",
            f"The image is built with {img} but {where} has {drv_words}; it runs through "
            "minor-version compatibility (rule: minor-version compatibility), with limits: "
            "kernels shipped only as PTX by the newer toolkit cannot be JIT-compiled (Triton, "
            "numba, CuPy) and some APIs return cudaErrorCallRequiresNewerDriver.",
            f"For full support use {older}, choose a GPU pool with a newer driver, or {full_fix}.",
        )

    if mvc:
        why = (
            "the strict policy accepts only backward compatibility, and this image needs "
            "minor-version compatibility"
        )
    elif mvc_floor is None:
        why = f"CUDA {cuda[0]}.x has no minor-version compatibility"
    elif driver is not None and compare(driver, mvc_floor) < 0:
        why = (
            f"minor-version compatibility for CUDA {cuda[0]}.x needs driver "
            f"{fmt(mvc_floor)} or newer"
        )
    else:
        why = f"minor-version compatibility needs a driver of the CUDA {cuda[0]}.x family"
    if forward_note:
        why += f"; {forward_note}"
    elif policy != "forward" and image.compat:
        why += (
            "; forward compatibility through the image's cuda-compat is used only under "
            "the forward policy"
        )
    return (
        "fail",
        "driver-too-old",
        f"The image is built with {img} but {where} has {drv_words}: too old ({why}).",
        f"Use {older}, choose a GPU pool whose driver supports {img}, or {full_fix}.",
    )


def _forward(
    image: ImageCuda,
    cuda: tuple[int, int],
    node: NodeCuda,
    where: str,
    driver: Version | None,
    facts: Facts,
) -> tuple[bool, str]:
    """Whether forward compatibility applies, and why not."""
    if image.compat is None:
        return (
            False,
            "the image carries no cuda-compat package, so forward compatibility does not apply",
        )
    if image.compat < cuda:
        return False, (
            f"the image's cuda-compat {fmt_cuda(image.compat)} is older than its "
            f"CUDA {fmt_cuda(cuda)}"
        )
    if driver is None:
        return (
            False,
            "forward compatibility needs the node's driver version, which it does not publish",
        )
    branches = facts.forward_matrix.get(image.compat, frozenset())
    if not branches:
        return False, (
            f"NVIDIA's forward-compatibility matrix supports cuda-compat {fmt_cuda(image.compat)} "
            "on no current driver branch"
        )
    if driver[0] not in branches:
        listed = ", ".join(f"R{b}" for b in sorted(branches))
        return False, (
            f"NVIDIA supports cuda-compat {fmt_cuda(image.compat)} only on driver branches "
            f"{listed}, not on R{driver[0]}"
        )
    dc = facts.is_datacenter(node)
    if dc is False:
        return False, "forward compatibility works only on data-center GPUs, and this is not one"
    if dc is None:
        return False, (
            "forward compatibility works only on data-center GPUs, and whether this one is "
            "cannot be told from its labels"
        )
    return True, ""


def worst(verdicts: list[Verdict]) -> Verdict | None:
    """The most severe verdict (fail > warn > ok > skip), e.g. across a pool's nodes."""
    return max(verdicts, key=lambda v: SEVERITY[v.level], default=None)


def best(verdicts: list[Verdict]) -> Verdict | None:
    """The least severe verdict that says something (ok > warn > fail; skip last)."""
    order = {"ok": 0, "warn": 1, "fail": 2, "skip": 3}
    return min(verdicts, key=lambda v: order[v.level], default=None)
