"""CUDA toolkit / NVIDIA driver compatibility: pure rules, stdlib only.
Design notes: docs/cuda-compatibility.md.
"""

from gpuspawner.cuda.custom import resolve_check, safe_verdict
from gpuspawner.cuda.image import ImageCuda, ImageDeclarationError, image_cuda
from gpuspawner.cuda.require import Properties, RequireError, check, evaluate, lnc_brand, requirements_from_env
from gpuspawner.cuda.compatibility import (
    DEFAULT_FACTS,
    POLICIES,
    CudaCheck,
    Facts,
    NodeCuda,
    PolicyError,
    Verdict,
    decide,
)
from gpuspawner.cuda.versions import VersionError

__all__ = [
    "DEFAULT_FACTS",
    "POLICIES",
    "CudaCheck",
    "Facts",
    "ImageCuda",
    "ImageDeclarationError",
    "NodeCuda",
    "PolicyError",
    "Properties",
    "RequireError",
    "Verdict",
    "VersionError",
    "check",
    "decide",
    "evaluate",
    "image_cuda",
    "lnc_brand",
    "requirements_from_env",
    "resolve_check",
    "safe_verdict",
]
