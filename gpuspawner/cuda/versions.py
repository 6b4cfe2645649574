"""Dotted version numbers: NVIDIA driver versions and CUDA versions.
Design notes: docs/cuda-compatibility.md.
"""

from __future__ import annotations

Version = tuple[int, ...]

# A driver version component never has more digits than this; anything longer
# is a typo or hostile input, and refusing it keeps error messages short.
_MAX_PART_DIGITS = 9
_MAX_PARTS = 4


class VersionError(ValueError):
    """A version string that is not digits separated by dots."""


def _parse(text: object, what: str, example: str, max_parts: int) -> Version:
    if not isinstance(text, str):
        raise VersionError(f"{what} must be a string like {example!r}, got {text!r}")
    value = text.strip()
    if not value:
        raise VersionError(f"{what} is empty: give it like {example!r}")
    parts = value.split(".")
    if len(parts) > max_parts or not all(
        p.isascii() and p.isdigit() and len(p) <= _MAX_PART_DIGITS for p in parts
    ):
        raise VersionError(
            f"{what} {text!r} is not a version number: "
            f"give digits separated by dots, like {example!r}"
        )
    return tuple(int(p) for p in parts)


def parse_driver(text: object) -> Version:
    """``"535.183.01"`` -> ``(535, 183, 1)``; ``"535"`` and ``"535.183"`` are accepted.

    The driver version is what ``nvmlSystemGetDriverVersion`` returns and what
    GPU Feature Discovery writes to ``nvidia.com/cuda.driver-version.full``.
    """
    return _parse(text, "NVIDIA driver version", "535.183.01", _MAX_PARTS)


def parse_cuda(text: object) -> tuple[int, int]:
    """A CUDA version reduced to ``(major, minor)``.

    ``"12.2"`` -> ``(12, 2)``; ``"12"`` -> ``(12, 0)``; ``"12.2.1"`` (an image's
    ``CUDA_VERSION``) -> ``(12, 2)``, because driver compatibility is decided
    per minor release (``NVIDIA_REQUIRE_CUDA`` says ``cuda>=12.2`` for 12.2.x).
    """
    parts = _parse(text, "CUDA version", "12.2", 3)
    return (parts[0], parts[1] if len(parts) > 1 else 0)


def parse_arch(text: object) -> tuple[int, int]:
    """A compute capability ``"8.0"`` -> ``(8, 0)`` (``nvidia.com/gpu.compute.*``)."""
    parts = _parse(text, "compute capability", "8.0", 2)
    return (parts[0], parts[1] if len(parts) > 1 else 0)


def compare(a: Version, b: Version) -> int:
    """-1, 0 or 1 as ``a`` is older, equal or newer than ``b``; missing parts count as 0."""
    n = max(len(a), len(b))
    pa = tuple(a) + (0,) * (n - len(a))
    pb = tuple(b) + (0,) * (n - len(b))
    return (pa > pb) - (pa < pb)


def at_least(a: Version, b: Version) -> bool:
    return compare(a, b) >= 0


def fmt(version: Version) -> str:
    """``(12, 2)`` -> ``"12.2"``; driver parts after the first keep two digits
    (``(535, 183, 1)`` -> ``"535.183.01"``), as NVIDIA writes them."""
    if not version:
        return ""
    if len(version) == 2 and version[0] < 100:  # a CUDA version or compute capability
        return f"{version[0]}.{version[1]}"
    return ".".join([str(version[0])] + [f"{p:02d}" for p in version[1:]])


def fmt_cuda(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def cuda_from_int(value: int) -> tuple[int, int]:
    """Decode ``nvmlSystemGetCudaDriverVersion()`` (e.g. 12020 -> (12, 2)).

    nvml.h ``NVML_CUDA_DRIVER_VERSION_MAJOR(v) = v/1000`` and
    ``NVML_CUDA_DRIVER_VERSION_MINOR(v) = (v%1000)/10``; GPU Feature Discovery
    uses the same (k8s-device-plugin ``internal/lm``).
    """
    if not isinstance(value, int) or isinstance(value, bool) or value < 1000:
        raise VersionError(f"CUDA driver version {value!r} from NVML is not a number like 12020")
    return (value // 1000, (value % 1000) // 10)
