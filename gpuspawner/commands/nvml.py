"""All of gpuspawner's NVML access (``pynvml``, from the nvidia-ml-py package).
Design notes: docs/architecture.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# nvml.h nvmlReturn_t values we tell apart
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18

_UNKNOWN_ANSWERS = (NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_FUNCTION_NOT_FOUND, NVML_ERROR_NOT_FOUND)
NVML_DEVICE_MIG_ENABLE = 1


class NvmlError(Exception):
    """NVML could not be used; :meth:`explain` gives the sentence for users."""

    def __init__(self, kind: str, detail: str, code: int | None = None):
        super().__init__(f"{kind}: {detail}")
        self.kind = kind  # no-bindings | no-driver | driver-not-loaded | no-permission | ...
        self.detail = detail
        self.code = code

    def explain(self, node: str | None) -> str:
        where = f"node {node}" if node else "this node (NODE_NAME is not set)"
        if self.kind == "no-driver":
            return (
                "no NVIDIA driver is visible in the container: is the NVIDIA device plugin / "
                f"container runtime set up on {where}?"
            )
        if self.kind == "driver-not-loaded":
            return f"the NVIDIA kernel driver is not loaded on {where} ({self.detail})"
        if self.kind == "no-permission":
            return f"the container may not talk to the NVIDIA driver on {where} ({self.detail})"
        if self.kind == "version-mismatch":
            return (
                f"the NVIDIA driver libraries in the container do not match the kernel module on "
                f"{where} ({self.detail}); the node likely needs a reboot after a driver upgrade"
            )
        if self.kind == "gpu-lost":
            return f"a GPU on {where} has fallen off the bus ({self.detail}); the node needs repair"
        if self.kind == "no-bindings":
            return f"the NVML Python bindings are missing from this image ({self.detail})"
        return f"NVML failed on {where}: {self.detail}"


@dataclass(frozen=True, slots=True)
class Gpu:
    index: int
    name: str | None  # "NVIDIA A100-SXM4-80GB"
    uuid: str | None
    brand: int | None  # nvmlBrandType_t
    memory_mib: int | None
    arch: str | None  # compute capability "8.0"
    mig_capable: bool | None
    mig_enabled: bool | None

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "name": self.name,
            "uuid": self.uuid,
            "brand": self.brand,
            "memory_mib": self.memory_mib,
            "arch": self.arch,
            "mig_capable": self.mig_capable,
            "mig_enabled": self.mig_enabled,
        }


@dataclass(frozen=True, slots=True)
class NvmlReport:
    driver: str  # "535.183.01"
    cuda: str | None  # the newest CUDA the driver supports, "12.2"
    gpus: tuple[Gpu, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "driver": self.driver,
            "cuda": self.cuda,
            "gpus": [g.to_json() for g in self.gpus],
        }


def text(value: object) -> str:
    """A string result of any binding version: ``bytes`` (old) or ``str`` (new)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def load() -> Any:
    """Import the real ``pynvml`` module."""
    try:
        import pynvml
    except ImportError as e:
        raise NvmlError("no-bindings", f"install nvidia-ml-py ({e})") from None
    return pynvml


def _code(exc: BaseException) -> int | None:
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _as_nvml_error(pynvml: Any, exc: BaseException) -> NvmlError:
    code = _code(exc)
    detail = str(exc) or type(exc).__name__
    kinds = {
        NVML_ERROR_LIBRARY_NOT_FOUND: "no-driver",
        NVML_ERROR_DRIVER_NOT_LOADED: "driver-not-loaded",
        NVML_ERROR_NO_PERMISSION: "no-permission",
        NVML_ERROR_LIB_RM_VERSION_MISMATCH: "version-mismatch",
        NVML_ERROR_GPU_IS_LOST: "gpu-lost",
    }
    return NvmlError(kinds.get(code, "error"), detail, code)  # type: ignore[arg-type]


def _is_nvml_error(pynvml: Any, exc: BaseException) -> bool:
    base = getattr(pynvml, "NVMLError", None)
    return isinstance(base, type) and isinstance(exc, base)


def _optional(pynvml: Any, fn: str, *args: Any) -> Any:
    """Call ``pynvml.<fn>``; None when the binding lacks it or NVML says unsupported."""
    f = getattr(pynvml, fn, None)
    if f is None:
        return None
    try:
        return f(*args)
    except Exception as e:
        if _is_nvml_error(pynvml, e) and _code(e) in _UNKNOWN_ANSWERS:
            return None
        raise


def _gpu(pynvml: Any, index: int) -> Gpu:
    h = pynvml.nvmlDeviceGetHandleByIndex(index)
    name = _optional(pynvml, "nvmlDeviceGetName", h)
    uuid = _optional(pynvml, "nvmlDeviceGetUUID", h)
    brand = _optional(pynvml, "nvmlDeviceGetBrand", h)
    mem = _optional(pynvml, "nvmlDeviceGetMemoryInfo", h)
    cc = _optional(pynvml, "nvmlDeviceGetCudaComputeCapability", h)
    mig = _optional(pynvml, "nvmlDeviceGetMigMode", h)
    total = getattr(mem, "total", None) if mem is not None else None
    return Gpu(
        index=index,
        name=text(name) if name is not None else None,
        uuid=text(uuid) if uuid is not None else None,
        brand=int(brand) if isinstance(brand, int) else None,
        # GFD: gpu.memory = GetMemoryInfo().Total / 2^20 (k8s-device-plugin ``internal/lm``)
        memory_mib=int(total) // (1 << 20) if isinstance(total, int) else None,
        arch=f"{int(cc[0])}.{int(cc[1])}" if cc is not None else None,
        mig_capable=mig is not None,
        # libnvidia-container: enabled only when current == pending == ENABLE
        mig_enabled=(
            mig is not None and list(mig)[:2] == [NVML_DEVICE_MIG_ENABLE, NVML_DEVICE_MIG_ENABLE]
        ),
    )


def read(pynvml: Any | None = None) -> NvmlReport:
    """Driver version, its CUDA version and every GPU, through NVML.

    Raises :class:`NvmlError` (never a raw ``pynvml`` exception).
    """
    if pynvml is None:
        pynvml = load()
    try:
        pynvml.nvmlInit()
    except Exception as e:
        if _is_nvml_error(pynvml, e):
            raise _as_nvml_error(pynvml, e) from None
        # ctypes/OSError from a broken install: still no driver to talk to
        raise NvmlError("no-driver", f"{type(e).__name__}: {e}") from None
    try:
        driver = text(pynvml.nvmlSystemGetDriverVersion()).strip()
        cuda_int = _optional(pynvml, "nvmlSystemGetCudaDriverVersion")
        cuda = None
        if isinstance(cuda_int, int) and cuda_int >= 1000:
            # nvml.h NVML_CUDA_DRIVER_VERSION_MAJOR/MINOR: v/1000, (v%1000)/10
            cuda = f"{cuda_int // 1000}.{(cuda_int % 1000) // 10}"
        count = int(pynvml.nvmlDeviceGetCount())
        gpus = tuple(_gpu(pynvml, i) for i in range(count))
        return NvmlReport(driver=driver, cuda=cuda, gpus=gpus)
    except NvmlError:
        raise
    except Exception as e:
        if _is_nvml_error(pynvml, e):
            raise _as_nvml_error(pynvml, e) from None
        raise NvmlError("error", f"{type(e).__name__}: {e}") from None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # shutting down must not hide the real answer
            pass
