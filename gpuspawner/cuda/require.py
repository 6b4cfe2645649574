"""``NVIDIA_REQUIRE_*`` expressions, evaluated exactly as libnvidia-container does.
Design notes: docs/cuda-compatibility.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpuspawner.cuda.versions import VersionError, parse_cuda

OPERATORS = ("=", "!=", "<", "<=", ">", ">=")  # configure order of dsl.c's table
_OP_CHARS = "<>=!"
_PROPERTIES = ("cuda", "driver", "arch", "brand")
_EXPR_MAX = 128  # dsl.c EXPR_MAX
_UINTMAX = 2**64 - 1  # strtoumax's overflow value, an error in dsl_compare_version
MAX_REQUIREMENTS = 32  # cli.h: char *reqs[32]
_CUDA_REQUIRE_GREATER = "cuda>="


class RequireError(ValueError):
    """An expression libnvidia-container would reject as ``invalid expression``."""


# --------------------------------------------------------------------------
# Brands
# --------------------------------------------------------------------------

# nvmlBrandType_t (nvml.h).  Names are our keys.
NVML_BRANDS: dict[int, str] = {
    0: "unknown",
    1: "quadro",
    2: "tesla",
    3: "nvs",
    4: "grid",
    5: "geforce",
    6: "titan",
    7: "vapps",
    8: "vpc",
    9: "vcs",
    10: "vws",
    11: "cloudgaming",
    12: "quadrortx",
    13: "nvidiartx",
    14: "nvidia",
    15: "geforcertx",
    16: "titanrtx",
}
_ALIASES = {
    "nvidiavapps": "vapps",
    "nvidiavpc": "vpc",
    "nvidiavcs": "vcs",
    "nvidiavws": "vws",
    "nvidiacloudgaming": "cloudgaming",
    "vgaming": "cloudgaming",
}
# libnvidia-container src/driver.c maps only these NVML brands; every other
# one becomes "Unknown" (libnvidia-container commit 947344949f [V]).
_LNC_BRANDS = {
    "quadro": "Quadro",
    "tesla": "Tesla",
    "nvs": "NVS",
    "grid": "GRID",
    "geforce": "GeForce",
    "titan": "TITAN",
}


def brand_key(name: object) -> str:
    """Normalise an NVML brand (its number, ``NVML_BRAND_GEFORCE_RTX``,
    ``"GeForce RTX"``, ``"nvidia"``...) to one of :data:`NVML_BRANDS`' names.

    Raises :class:`RequireError` naming the accepted values.
    """
    if isinstance(name, int) and not isinstance(name, bool):
        if name in NVML_BRANDS:
            return NVML_BRANDS[name]
        raise RequireError(f"NVML brand number {name} is not one nvml.h defines (0-16)")
    if not isinstance(name, str):
        raise RequireError(f"GPU brand must be a string, got {name!r}")
    key = "".join(ch for ch in name.lower() if ch not in " -_")
    if key.startswith("nvmlbrand"):
        key = key[len("nvmlbrand") :]
    key = _ALIASES.get(key, key)
    if key not in NVML_BRANDS.values():
        raise RequireError(
            f"unknown GPU brand {name!r}: use one of {', '.join(sorted(set(NVML_BRANDS.values())))}"
        )
    return key


def lnc_brand(name: object) -> str:
    """The ``brand`` value libnvidia-container compares: ``GeForce``, ``Tesla``,
    ``Quadro``, ``NVS``, ``GRID``, ``TITAN`` or ``Unknown``.

    So a data-center GPU whose NVML brand is ``NVIDIA`` (H100, and T4 on
    current drivers [S]) matches ``brand=unknown`` and never ``brand=nvidia``.
    """
    return _LNC_BRANDS.get(brand_key(name), "Unknown")


# --------------------------------------------------------------------------
# The evaluator
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Properties:
    """What a requirement is compared with; None = unknown, and passes.

    ``cuda`` is the driver's CUDA (``nvmlSystemGetCudaDriverVersion`` as
    ``"12.2"``), ``driver`` the driver version string, ``arch`` the compute
    capability ``"8.0"``, ``brand`` libnvidia-container's brand word (see
    :func:`lnc_brand`).
    """

    cuda: str | None = None
    driver: str | None = None
    arch: str | None = None
    brand: str | None = None


class _Invalid(Exception):
    pass


def _strtoumax(s: str, i: int) -> tuple[int, int]:
    j = i
    while j < len(s) and s[j].isdigit():
        j += 1
    if j == i:
        raise _Invalid
    n = int(s[i:j])
    if n >= _UINTMAX:
        raise _Invalid
    return n, j


def _skip_dots(s: str, i: int) -> int:
    while i < len(s) and s[i] == ".":
        i += 1
    return i


def compare_version(v1: str, op: str, v2: str) -> bool:
    """``dsl_compare_version``: raises :class:`RequireError` where it returns -1."""
    try:
        return _compare_version(v1, op, v2)
    except _Invalid:
        raise RequireError(f"invalid expression: cannot compare {v1!r} {op} {v2!r}") from None


def _compare_version(v1: str, op: str, v2: str) -> bool:
    digits = "0123456789."
    if any(c not in digits for c in v1) or any(c not in digits for c in v2):
        raise _Invalid
    i = j = 0
    while i < len(v1) and j < len(v2):
        n1, i2 = _strtoumax(v1, i)
        n2, j2 = _strtoumax(v2, j)
        if n1 != n2:
            if op == "=":
                return False
            if op == "!=":
                return True
            if op in ("<", "<="):
                return n1 < n2
            return n1 > n2
        i = _skip_dots(v1, i2)
        j = _skip_dots(v2, j2)
    rest1 = v1[i:].lstrip(".0")
    rest2 = v2[j:].lstrip(".0")
    if op == "!=":
        return bool(rest1 or rest2)
    if op in ("=", "<=", ">="):
        if not rest1 and not rest2:
            return True
        if op == "=":
            return False
    if op in ("<", "<="):
        return not rest1 and bool(rest2)
    return bool(rest1) and not rest2


def _split_factor(expr: str) -> tuple[str, str, str]:
    n = 0
    while n < len(expr) and expr[n] not in _OP_CHARS:
        n += 1
    if n == 0 or n == len(expr):
        raise _Invalid
    m = n
    while m < len(expr) and expr[m] in _OP_CHARS:
        m += 1
    run = expr[n:m]
    for op in OPERATORS:
        # strncmp(ptr, op, len(run)) == 0
        if len(op) >= len(run) and op[: len(run)] == run:
            break
    else:
        raise _Invalid
    value = expr[m:]
    if not value:
        raise _Invalid
    return expr[:n], op, value


def _evaluate_factor(expr: str, props: Properties) -> bool:
    name, op, value = _split_factor(expr)
    key = name.lower() if name.isascii() else name
    if key not in _PROPERTIES:
        raise _Invalid
    have = getattr(props, key)
    if have is None:
        result = True  # configure.c: unknown value, "assume ... ok"
    elif key == "brand":
        if op not in ("=", "!="):
            raise _Invalid
        same = have.lower() == value.lower()
        result = same if op == "=" else not same
    else:
        result = _compare_version(have, op, value)
    if not result and len(f"{name} {op} {value}") >= _EXPR_MAX:
        raise _Invalid
    return result


def evaluate(predicate: str, props: Properties) -> bool:
    """True when one ``NVIDIA_REQUIRE_*`` value is satisfied.

    Raises :class:`RequireError` (``invalid expression: ...``) where
    libnvidia-container fails with "invalid expression".
    """
    ret = True
    for term in predicate.split(" "):
        if not term:
            continue
        completed = True
        for factor in term.split(","):
            if not factor:
                continue
            try:
                ret = _evaluate_factor(factor, props)
            except _Invalid:
                raise RequireError(
                    f"invalid expression: {factor!r} (use NAME OP VALUE with NAME one of "
                    "cuda, driver, arch, brand and OP one of = != < <= > >=; "
                    "versions are digits and dots; brand takes only = and !=)"
                ) from None
            if not ret:
                completed = False
                break
        if completed:
            break
    return ret


def unsatisfied_message(predicate: str) -> str:
    """libnvidia-container's message for a predicate that evaluated false."""
    first = predicate.split(" ", 1)[0]
    if first.startswith(_CUDA_REQUIRE_GREATER):
        return (
            f"unsatisfied condition: {first}, please update your driver to a newer version, "
            "or use an earlier cuda container"
        )
    return f"unsatisfied condition: {first}"


@dataclass(frozen=True, slots=True)
class Outcome:
    """The result of checking an image's requirements against a node."""

    satisfied: bool
    message: str  # "" when satisfied; else libnvidia-container's words
    failed: str | None = None  # the requirement that failed


def check(requirements: Sequence[str], devices: Iterable[Properties]) -> Outcome:
    """AND of every requirement, each evaluated for every device.

    ``devices`` gives one :class:`Properties` per visible GPU (configure.c
    evaluates once per selected GPU); pass a single one without ``arch`` and
    ``brand`` when no GPU is known.  Raises :class:`RequireError` for an
    invalid expression or more than 32 requirements.
    """
    if len(requirements) > MAX_REQUIREMENTS:
        raise RequireError(
            f"too many requirements: {len(requirements)} NVIDIA_REQUIRE_* values, "
            f"libnvidia-container accepts at most {MAX_REQUIREMENTS}"
        )
    devs = list(devices) or [Properties()]
    for dev in devs:
        for req in requirements:
            if not evaluate(req, dev):
                return Outcome(False, unsatisfied_message(req), req)
    return Outcome(True, "")


def validate(predicate: str) -> None:
    """Strict syntax check of *every* factor, for an admin's declaration.

    Unlike :func:`evaluate`, which like libnvidia-container never looks past a
    satisfied term, this rejects a malformed factor wherever it is, so a typo
    is reported when the hub starts rather than on the one node where it is
    reached.  Raises :class:`RequireError`.
    """
    if not isinstance(predicate, str):
        raise RequireError(f"an NVIDIA_REQUIRE_* value must be a string, got {predicate!r}")
    for term in predicate.split(" "):
        for factor in term.split(","):
            if not factor:
                continue
            try:
                name, op, value = _split_factor(factor)
                key = name.lower() if name.isascii() else name
                if key not in _PROPERTIES:
                    raise _Invalid
                if key == "brand":
                    if op not in ("=", "!="):
                        raise _Invalid
                else:
                    _compare_version("0", op, value)
            except _Invalid:
                raise RequireError(
                    f"invalid expression {predicate!r}: the factor {factor!r} is not "
                    "NAME OP VALUE with NAME one of cuda, driver, arch, brand, OP one of "
                    "= != < <= > >= (brand: = or != only) and a dotted number for versions"
                ) from None


# --------------------------------------------------------------------------
# Image environment
# --------------------------------------------------------------------------

_TRUE = {"1", "t", "T", "TRUE", "true", "True"}  # Go strconv.ParseBool


def require_disabled(env: Mapping[str, str]) -> bool:
    """``NVIDIA_DISABLE_REQUIRE`` parsed with Go's ``strconv.ParseBool`` rules
    (nvidia-container-toolkit ``internal/config/image/cuda_image.go``); an
    unparsable value leaves the check on."""
    return env.get("NVIDIA_DISABLE_REQUIRE", "") in _TRUE


def requirements_from_env(env: Mapping[str, str]) -> list[str]:
    """What nvidia-container-toolkit's ``GetRequirements`` returns for an image env.

    Every ``NVIDIA_REQUIRE_*`` value except ``NVIDIA_REQUIRE_JETPACK*``; for a
    legacy image (``CUDA_VERSION`` set, ``NVIDIA_REQUIRE_CUDA`` empty or unset)
    also ``cuda>=MAJOR.MINOR``; nothing when ``NVIDIA_DISABLE_REQUIRE`` is true.
    Raises :class:`RequireError` for a ``CUDA_VERSION`` that is not a version.
    """
    if require_disabled(env):
        return []
    reqs = [
        value
        for name, value in env.items()
        if name.startswith("NVIDIA_REQUIRE_") and not name.startswith("NVIDIA_REQUIRE_JETPACK")
    ]
    legacy = env.get("CUDA_VERSION", "")
    if legacy and not env.get("NVIDIA_REQUIRE_CUDA", ""):
        try:
            major, minor = parse_cuda(legacy)
        except VersionError as e:
            raise RequireError(f"CUDA_VERSION: {e}") from None
        reqs.append(f"cuda>={major}.{minor}")
    return reqs
