"""An admin's own CUDA decision (``c.GPUSpawner.cuda_check``): resolving it, and calling it
without trusting it.  Pure, stdlib only.  Design notes: docs/cuda-compatibility.md.
"""

from __future__ import annotations

import importlib
from typing import Any

from gpuspawner.cuda.image import ImageCuda
from gpuspawner.cuda.compatibility import LEVELS, CudaCheck, NodeCuda, Verdict

__all__ = ["resolve_check", "safe_verdict"]


def resolve_check(value: Any) -> CudaCheck:
    """An admin's ``cuda_check``: a callable ``(image, node, policy) -> Verdict``, or its import
    string ``"module:function"`` / ``"module.function"``; ValueError says what to give instead."""
    given = value
    if isinstance(value, str):
        module, sep, attr = value.partition(":")
        if not sep:
            module, _, attr = value.rpartition(".")
        try:
            value = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError, ValueError) as e:
            raise ValueError(
                f"cuda_check {given!r} cannot be imported ({e}); give a callable or "
                "'module:function', e.g. 'gpuspawner.cuda:decide'"
            ) from None
    if not callable(value):
        raise ValueError(
            f"cuda_check must be a callable (image, node, policy) -> Verdict or its import string, not {given!r}"
        )
    return value


def safe_verdict(check: CudaCheck, image: ImageCuda, node: NodeCuda, policy: str) -> Verdict:
    """The admin's callable, never trusted to return a usable verdict: any
    problem is a ``skip`` that says so (the spawn is not blocked by a bug in it)."""
    try:
        v = check(image, node, policy)
    except Exception as e:  # an admin's callable: report, never crash the page
        return Verdict("skip", "check-error", f"The CUDA check raised {type(e).__name__}: {e}.",
                       "Fix c.GPUSpawner.cuda_check.", image.cuda_text, node.driver, node.driver_cuda, policy)
    if not isinstance(v, Verdict) or v.level not in LEVELS:
        return Verdict("skip", "check-error",
                       f"The CUDA check returned {type(v).__name__}, not a Verdict with level ok/warn/fail/skip.",
                       "Fix c.GPUSpawner.cuda_check.", image.cuda_text, node.driver, node.driver_cuda, policy)
    return v
