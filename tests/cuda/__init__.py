"""Tests of the CUDA/driver rules, check-cuda, probe and label-node.

Shared helpers: the fake-NVML fixtures in ``tests/fixtures/nvml/``.
"""

from __future__ import annotations

import csv
import importlib.util
import pathlib

FIXTURES = pathlib.Path(__file__).resolve().parent.parent / "fixtures" / "nvml"


def fake_pynvml(name: str):
    """A fresh fake ``pynvml`` module described by ``tests/fixtures/nvml/<name>.json``."""
    spec = importlib.util.spec_from_file_location("fake_pynvml", FIXTURES / "fake_pynvml.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.make(name)


def require_samples() -> list[dict[str, str]]:
    """The real NVIDIA_REQUIRE_CUDA strings of the official nvidia/cuda images
    (copy of the project's reference ``nvidia-require-cuda-samples.csv``)."""
    with open(FIXTURES / "nvidia-require-cuda-samples.csv", newline="") as f:
        return list(csv.DictReader(f))
