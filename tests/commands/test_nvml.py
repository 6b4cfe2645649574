"""gpuspawner.commands.nvml against fake pynvml modules of old (bytes) and new (str) bindings."""

import pytest

from gpuspawner.commands import nvml

from tests.builders import fake_pynvml


def test_new_binding_with_str_results_and_mig():
    fake = fake_pynvml("a100-mig-570")
    report = nvml.read(fake)
    assert report.driver == "570.172.08" and report.cuda == "12.8"
    assert len(report.gpus) == 8
    g = report.gpus[0]
    assert (g.name, g.brand, g.memory_mib, g.arch) == ("NVIDIA A100-SXM4-80GB", 14, 81920, "8.0")
    assert g.mig_capable is True and g.mig_enabled is True
    assert fake.initialised == 0  # nvmlShutdown was called


def test_old_binding_with_bytes_results():
    report = nvml.read(fake_pynvml("t4-535-bytes"))
    assert report.driver == "535.183.01" and isinstance(report.driver, str)
    g = report.gpus[0]
    assert g.name == "Tesla T4" and g.uuid.startswith("GPU-")
    assert (g.memory_mib, g.arch, g.brand) == (15360, "7.5", 2)
    # NVMLError_NotSupported from nvmlDeviceGetMigMode: no MIG, not a failure
    assert g.mig_capable is False and g.mig_enabled is False


def test_functions_missing_from_an_old_binding_read_as_unknown():
    report = nvml.read(fake_pynvml("old-binding"))
    assert report.driver == "470.82.01"
    assert report.cuda is None
    assert report.gpus[0].arch is None and report.gpus[0].mig_capable is False


@pytest.mark.parametrize(
    "fixture, kind, code, words",
    [
        (
            "no-driver",
            "no-driver",
            12,
            "no NVIDIA driver is visible in the container: is the NVIDIA "
            "device plugin / container runtime set up on node gpu-7?",
        ),
        ("driver-not-loaded", "driver-not-loaded", 9, "kernel driver is not loaded on node gpu-7"),
        ("gpu-lost", "gpu-lost", 15, "fallen off the bus"),
    ],
)
def test_errors_become_clear_messages(fixture, kind, code, words):
    fake = fake_pynvml(fixture)
    with pytest.raises(nvml.NvmlError) as e:
        nvml.read(fake)
    assert (e.value.kind, e.value.code) == (kind, code)
    assert words in e.value.explain("gpu-7")
    assert fake.initialised == 0


def test_the_real_bindings_without_a_driver():
    """This machine has nvidia-ml-py and no driver, as a pod without the NVIDIA runtime."""
    pytest.importorskip("pynvml")
    try:
        report = nvml.read()
    except nvml.NvmlError as e:
        assert e.kind in ("no-driver", "driver-not-loaded")
        assert "NODE_NAME is not set" in e.explain(None)
        return
    assert report.driver.split(".")[0].isdigit()  # a machine with a GPU: the real report


def test_text_decodes_both_binding_styles():
    assert nvml.text(b"535.183.01") == nvml.text("535.183.01") == "535.183.01"
