"""What doctor knows of the hub, read from its resolved settings (doctor.facts)."""

from __future__ import annotations

import pytest

from gpuspawner.doctor.facts import hub_facts_from_values
from gpuspawner.spawn.tolerations import DEFAULT_TOLERATED_TAINT_KEYS


BASE_VALUES = {
    "gpu_profiles": [],
    "gpu_tolerated_taint_keys": list(DEFAULT_TOLERATED_TAINT_KEYS),
    "tolerations": [],
    "image": "quay.io/jupyterhub/singleuser:latest",
    "profile_list": [],
}


def values(**kw):
    return {**BASE_VALUES, **kw}


def test_hub_facts_profile_and_choice_images():
    v = values(gpu_profiles=[
        {"slug": "gpu", "cuda": "12.4", "kubespawner_override": {"image": "pt:cuda12"}},
        {"slug": "pick", "profile_options": {"image": {"display_name": "Image", "choices": {
            "tf": {"display_name": "TF", "cuda": {"cuda": "12.2"}, "kubespawner_override": {"image": "tf:2"}},
            "cpu": {"display_name": "CPU", "kubespawner_override": {"image": "base:1"}},
        }}}},
        {"slug": "plain"},
    ], tolerations=[{"key": "dedicated", "operator": "Exists"}])
    hub = hub_facts_from_values(v, source="c.py")
    assert hub.cuda_policy == "minor"
    got = [(i.label, i.image, i.cuda.cuda_text) for i in hub.images]
    assert got == [
        ("gpu", "pt:cuda12", "12.4"),
        ("pick (image:tf)", "tf:2", "12.2"),
        ("pick (image:cpu)", "base:1", None),
        ("plain", "quay.io/jupyterhub/singleuser:latest", None),
    ]
    assert hub.profiles == ("gpu", "pick", "plain")
    assert hub.tolerations == ({"key": "dedicated", "operator": "Exists"},)


@pytest.mark.parametrize(
    "bad, match",
    [
        ({"gpu_profiles": [{"slug": "g", "cuda": 12.4}]}, r"gpu_profiles\[0\] \(slug 'g'\): 'cuda':.*quoted string"),
        ({"gpu_profiles": [{"slug": "g", "cuda": {"cdua": "12"}}]}, "unknown key"),
        ({"gpu_profiles": [{"slug": "g", "profile_options": {"img": {"choices": {"a": {"cuda": "12.4"}}}}}]},
         "sets no image"),
        ({"cuda_policy": "lenient"}, "cuda_policy must be one of"),
        ({"gpu_profiles": [{"slug": "g", "colour": "red"}]}, "unknown key"),
        ({"gpu_profiles": "gpu"}, "must be a list"),
        ({"gpu_tolerated_taint_keys": "nvidia.com/gpu"}, "list of strings"),
        ({"tolerations": "nvidia.com/gpu"}, "tolerations must be a list"),
    ],
    ids=["cuda-float", "cuda-typo", "choice-cuda-without-image", "bad-policy", "profile-typo", "profiles-not-list",
         "keys-not-list", "tolerations-bad"],
)
def test_hub_facts_errors_name_the_setting(bad, match):
    with pytest.raises(ValueError, match=match):
        hub_facts_from_values(values(**bad), source="c.py")
