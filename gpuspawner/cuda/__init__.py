"""CUDA toolkit / NVIDIA driver compatibility: pure rules, stdlib only.

The spawner calls :func:`decide` (or the admin's replacement, a
:data:`CudaCheck`) once per candidate node::

    from gpuspawner.cuda import NodeCuda, decide, image_cuda

    image = image_cuda({"cuda": "12.4", "compat": True}, name="pytorch:24.05")
    node = NodeCuda(name="gpu-1", driver="535.183.01", driver_cuda="12.2", arch="7.5")
    v = decide(image, node, policy="minor")   # v.level: ok | warn | fail | skip

See ``docs/cuda-compatibility.md`` for the rules and their sources.
"""

from gpuspawner.cuda.custom import resolve_check, safe_verdict
from gpuspawner.cuda.image import ImageCuda, ImageDeclarationError, image_cuda
from gpuspawner.cuda.require import Properties, RequireError, check, evaluate, lnc_brand, requirements_from_env
from gpuspawner.cuda.rules import (
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
