"""What an image carries: its CUDA version, ``NVIDIA_REQUIRE_*`` and cuda-compat.
Design notes: docs/cuda-compatibility.md.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from gpuspawner.cuda.require import MAX_REQUIREMENTS, RequireError, require_disabled, requirements_from_env, validate
from gpuspawner.cuda.versions import VersionError, fmt_cuda, parse_cuda

_COMPAT_PACKAGE = re.compile(r"cuda-compat-(\d+)-(\d+)")
_LEADING_CUDA = re.compile(r"^cuda>=(\d+(?:\.\d+)?)$", re.IGNORECASE)
_KEYS = ("cuda", "require", "compat", "disable_require", "env")


class ImageDeclarationError(ValueError):
    """An admin's image declaration that cannot be used; the message says how to fix it."""


@dataclass(frozen=True, slots=True)
class ImageCuda:
    """The CUDA facts of one image.  An empty one is a CPU image."""

    cuda: tuple[int, int] | None = None
    requirements: tuple[str, ...] = ()  # NVIDIA_REQUIRE_* values still in force
    compat: tuple[int, int] | None = None  # the cuda-compat package's X.Y, if any
    name: str | None = None  # the image reference, for messages

    @property
    def has_cuda(self) -> bool:
        return self.cuda is not None or bool(self.requirements)

    @property
    def effective_cuda(self) -> tuple[int, int] | None:
        """The declared CUDA, else the one a requirement states on its own.

        Official images start ``NVIDIA_REQUIRE_CUDA`` with a ``cuda>=X.Y`` term
        that matches their ``CUDA_VERSION`` (``NVIDIA_REQUIRE_CUDA`` in the base Dockerfiles of
        NVIDIA's container-images/cuda), so an image
        declared only by that string still gets the full compatibility rules.
        """
        if self.cuda is not None:
            return self.cuda
        found: list[tuple[int, int]] = []
        for req in self.requirements:
            first = req.strip(" ").split(" ", 1)[0]
            m = _LEADING_CUDA.match(first)
            if m:
                try:
                    found.append(parse_cuda(m.group(1)))
                except VersionError:
                    continue
        return max(found) if found else None

    @property
    def cuda_text(self) -> str | None:
        c = self.effective_cuda
        return fmt_cuda(c) if c else None

    def to_json(self) -> dict:
        return {
            "cuda": fmt_cuda(self.cuda) if self.cuda else None,
            "require": list(self.requirements),
            "compat": fmt_cuda(self.compat) if self.compat else None,
            "name": self.name,
        }


def _where(name: str | None) -> str:
    return f"image {name!r}" if name else "the image's CUDA declaration"


def _cuda_value(value: object, where: str, key: str) -> tuple[int, int]:
    if isinstance(value, bool) or isinstance(value, float):
        # 12.10 written as a YAML/Python float reads back as 12.1
        raise ImageDeclarationError(
            f'{where}: {key} must be a quoted string like "12.4", not the number {value!r}'
        )
    if isinstance(value, int):
        value = str(value)
    try:
        return parse_cuda(value)
    except VersionError as e:
        raise ImageDeclarationError(f"{where}: {key}: {e}") from None


def compat_from_package(package: str) -> tuple[int, int] | None:
    """``"cuda-compat-12-8"`` (``NV_CUDA_COMPAT_PACKAGE``) -> ``(12, 8)``."""
    m = _COMPAT_PACKAGE.search(package or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def image_cuda(declaration: object, name: str | None = None) -> ImageCuda:
    """Validate an admin's declaration and return what the rules need.

    Raises :class:`ImageDeclarationError` with a message naming the image, the
    key and the fix.  Requirement strings are checked strictly
    (:func:`gpuspawner.cuda.require.validate`) so a typo fails at hub start.
    """
    where = _where(name)
    if declaration is None:
        return ImageCuda(name=name)
    if isinstance(declaration, (str, int, float)) and not isinstance(declaration, bool):
        return ImageCuda(cuda=_cuda_value(declaration, where, "cuda"), name=name)
    if not isinstance(declaration, Mapping):
        raise ImageDeclarationError(
            f'{where}: declare a CUDA version string like "12.4" or a mapping with keys '
            f"{', '.join(_KEYS)}; got {type(declaration).__name__}"
        )
    unknown = sorted(str(k) for k in declaration if k not in _KEYS)
    if unknown:
        raise ImageDeclarationError(
            f"{where}: unknown key(s) {', '.join(unknown)}; the keys are {', '.join(_KEYS)}"
        )

    env = declaration.get("env") or {}
    if not isinstance(env, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in env.items()
    ):
        raise ImageDeclarationError(f"{where}: env must map variable names to string values")

    cuda = None
    if declaration.get("cuda") is not None:
        cuda = _cuda_value(declaration["cuda"], where, "cuda")
    elif env.get("CUDA_VERSION"):
        cuda = _cuda_value(env["CUDA_VERSION"], where, "env CUDA_VERSION")

    disable = declaration.get("disable_require", False)
    if not isinstance(disable, bool):
        raise ImageDeclarationError(f"{where}: disable_require must be true or false")

    reqs: list[str] = []
    raw = declaration.get("require")
    if raw is not None:
        if isinstance(raw, str):
            reqs.append(raw)
        elif isinstance(raw, (list, tuple)) and all(isinstance(r, str) for r in raw):
            reqs.extend(raw)
        else:
            raise ImageDeclarationError(
                f"{where}: require must be an NVIDIA_REQUIRE_CUDA string or a list of them"
            )
    try:
        if env:
            from_env = requirements_from_env(env)
            if require_disabled(env):
                disable = True
            reqs.extend(r for r in from_env if r not in reqs)
        if disable:
            reqs = []
        for r in reqs:
            validate(r)
        if len(reqs) > MAX_REQUIREMENTS:
            raise RequireError(
                f"too many requirements ({len(reqs)}; at most {MAX_REQUIREMENTS})"
            )
    except RequireError as e:
        raise ImageDeclarationError(f"{where}: {e}") from None

    compat_raw = declaration.get("compat", None)
    compat = None
    if compat_raw is True:
        if cuda is None:
            raise ImageDeclarationError(
                f"{where}: compat: true needs the image's cuda version; "
                'or give the cuda-compat package\'s version, e.g. compat: "12.8"'
            )
        compat = cuda
    elif compat_raw is None or compat_raw is False:
        compat = (
            compat_from_package(env.get("NV_CUDA_COMPAT_PACKAGE", ""))
            if compat_raw is None
            else None
        )
    else:
        compat = _cuda_value(compat_raw, where, "compat")
    return ImageCuda(cuda=cuda, requirements=tuple(reqs), compat=compat, name=name)
