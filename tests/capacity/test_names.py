import pytest

from gpuspawner.capacity.names import model_name, pool_display_name


@pytest.mark.parametrize(
    "product, vendor, expected",
    [
        # GPU Feature Discovery (device plugin) and NVIDIA's DRA driver spell the same hardware differently
        ("NVIDIA-A100-SXM4-80GB", "nvidia", "NVIDIA A100 80GB"),
        ("NVIDIA A100-SXM4-80GB", "nvidia", "NVIDIA A100 80GB"),
        ("NVIDIA-A100-SXM4-40GB", "nvidia", "NVIDIA A100 40GB"),
        ("NVIDIA-H100-80GB-HBM3", "nvidia", "NVIDIA H100 80GB"),
        ("NVIDIA H100 80GB HBM3", "nvidia", "NVIDIA H100 80GB"),
        ("Tesla-T4", "nvidia", "NVIDIA T4"),
        ("Tesla-T4-SHARED", "nvidia", "NVIDIA T4"),
        ("NVIDIA-A100-SXM4-80GB-MIG-1g.10gb", "nvidia", "NVIDIA A100 80GB"),
        ("NVIDIA A100-SXM4-80GB MIG 1g.10gb", "nvidia", "NVIDIA A100 80GB"),
        ("NVIDIA-H100-NVL", "nvidia", "NVIDIA H100 NVL"),
        ("NVIDIA-L4", "nvidia", "NVIDIA L4"),
        ("AMD_Instinct_MI300X_OAM", "amd", "AMD Instinct MI300X"),
        ("Instinct_MI250X", "amd", "AMD Instinct MI250X"),
        ("H100", None, "H100"),
        (None, "nvidia", None),
        ("", "nvidia", None),
    ],
    ids=["dp-a100-80", "dra-a100-80", "a100-40", "dp-h100", "dra-h100", "tesla-t4", "t4-shared", "dp-mig-suffix",
         "dra-mig-suffix", "h100-nvl", "l4", "mi300x", "amd-added", "unknown-vendor", "none", "empty"],
)
def test_model_name(product, vendor, expected):
    assert model_name(product, vendor) == expected


@pytest.mark.parametrize(
    "product, vendor, profile, expected",
    [
        ("NVIDIA-A100-SXM4-80GB-MIG-1g.10gb", "nvidia", "1g.10gb", "NVIDIA A100 80GB MIG 1g.10gb"),
        ("NVIDIA A100-SXM4-80GB", "nvidia", "1g.10gb", "NVIDIA A100 80GB MIG 1g.10gb"),
        (None, None, None, "unknown GPU"),
    ],
    ids=["device-plugin-mig", "dra-mig", "unknown"],
)
def test_pool_display_name(product, vendor, profile, expected):
    assert pool_display_name(product, vendor, profile) == expected
