"""The hub's GPUSpawner settings checked at start (``gpuspawner.hub.config_check``): every trait with
a wrong value gives one line that names the setting, the value given, and what to write instead; a
configuration without a problem gives none.  No hub and no cluster: the lines the hub would print."""

from __future__ import annotations

import pytest
from traitlets.config import Config

from tests.builders.traits import WRONG_TRAIT_IDS, WRONG_TRAIT_VALUES
from gpuspawner import GPUSpawner
from gpuspawner.hub.config_check import config_problems, gpu_trait_names

WRONG, IDS = WRONG_TRAIT_VALUES, WRONG_TRAIT_IDS


def problems(**settings) -> list[str]:
    config = Config()
    for name, value in settings.items():
        config.GPUSpawner[name] = value
    return config_problems(config, GPUSpawner)


def test_every_gpuspawner_trait_has_a_wrong_value_in_the_table():
    assert set(gpu_trait_names(GPUSpawner)) <= {name for name, _, _ in WRONG}


@pytest.mark.parametrize("name, value, words", WRONG, ids=IDS)
def test_a_wrong_value_is_one_line_naming_the_setting_the_value_and_the_fix(name, value, words):
    lines = problems(**{name: value})
    assert len(lines) == 1, lines
    line = lines[0]
    shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
    assert line.startswith(f"c.GPUSpawner.{name} = {shown}: "), line
    assert words in line, line
    assert "e.g. " in line or f"see c.GPUSpawner.{name} in docs/traits.md" in line, line  # what to write
    assert "\n" not in line and "Traceback" not in line and "trait of a" not in line


def test_every_problem_is_listed_not_only_the_first():
    lines = problems(gpu_quota=-1, cuda_policy="lax", gpu_resources=["cpu"], gpu_tolerated_taint_keys=["*"])
    assert [line.split(" = ")[0] for line in lines] == [
        "c.GPUSpawner.cuda_policy", "c.GPUSpawner.gpu_quota", "c.GPUSpawner.gpu_resources",
        "c.GPUSpawner.gpu_tolerated_taint_keys"]


def test_a_misspelt_setting_is_named_with_the_closest_one():
    assert problems(gpu_quotas=2) == ["c.GPUSpawner.gpu_quotas: there is no such setting; did you mean gpu_quota?"]
    config = Config()
    config.GPUCapacitySettings.gpu_reservation_tll = 60  # the settings class's former name is a section too
    assert config_problems(config, GPUSpawner) == [
        "c.GPUCapacitySettings.gpu_reservation_tll: there is no such setting; did you mean gpu_reservation_ttl?"]


def test_settings_that_contradict_each_other_are_a_problem_too():
    pool = {"resource": "example.com/fpga", "product": "X", "gpus_per_node": 1, "max_nodes": 1, "minutes": 5}
    lines = problems(gpu_declared_pools=[pool])
    assert len(lines) == 1 and lines[0].startswith("c.GPUSpawner.gpu_declared_pools with gpu_resources: "), lines
    assert "is not a GPU resource; add it to gpu_resources" in lines[0]
    assert problems(gpu_declared_pools=[pool], gpu_resources=["nvidia.com/gpu", "example.com/fpga"]) == []


def test_the_sections_traitlets_reads_are_checked_the_last_one_winning():
    config = Config()
    config.GPUCapacitySettings.gpu_reservation_ttl = 0  # the former name of the settings class
    config.KubeSpawner.gpu_quota = "two"
    lines = config_problems(config, GPUSpawner)
    assert [line.split(":")[0] for line in lines] == ["c.KubeSpawner.gpu_quota = 'two'",
                                                      "c.GPUCapacitySettings.gpu_reservation_ttl = 0"]
    config.GPUSpawner.gpu_quota = 2  # GPUSpawner's own section comes last: its value is the one used
    assert [line.split(":")[0] for line in config_problems(config, GPUSpawner)] == [
        "c.GPUCapacitySettings.gpu_reservation_ttl = 0"]


def test_a_value_appended_to_the_default_is_checked_as_the_whole_list():
    config = Config()
    config.GPUSpawner.gpu_tolerated_taint_keys.append("*")
    lines = config_problems(config, GPUSpawner)
    assert len(lines) == 1 and "'*' would tolerate any taint" in lines[0], lines
    assert "'nvidia.com/gpu'" in lines[0].split(":")[0]  # the default it was appended to


def test_a_good_configuration_has_no_problem():
    assert problems() == []
    assert problems(gpu_quota=2, gpu_resources=["nvidia.com/gpu", "example.com/gpu"], cuda_policy="strict",
                    gpu_tolerated_taint_keys=["nvidia.com/gpu", "example.com/*"],
                    gpu_profiles=[{"slug": "gpu", "pools": {"include": ["h100:*"]}}],
                    gpu_cull_rules={"idle_timeout": "1h"}) == []


def test_the_documented_example_configuration_has_no_problem():
    from pathlib import Path

    from traitlets.config.loader import PyFileConfigLoader

    docs = Path(__file__).resolve().parents[2] / "docs"
    config = PyFileConfigLoader("jupyterhub_config.example.py", path=str(docs)).load_config()
    assert config_problems(config, GPUSpawner) == []


def test_a_gpu_profiles_kubespawner_override_must_name_settings_with_values_they_take():
    lines = problems(gpu_profiles=[{"slug": "gpu", "kubespawner_override": {
        "imagee": "quay.io/jupyter/pytorch-notebook", "cpu_limit": "lots", "mem_limit": "4G",
        "image": "quay.io/jupyter/pytorch-notebook:cuda12-latest", "environment": {"A": "b"}}}])
    assert lines == [
        "c.GPUSpawner.gpu_profiles[0] (slug 'gpu') kubespawner_override: 'imagee' is no setting of the spawner; "
        "did you mean image?",
        "c.GPUSpawner.gpu_profiles[0] (slug 'gpu') kubespawner_override: cpu_limit = 'lots': expected a float, "
        "not the str 'lots'"]
