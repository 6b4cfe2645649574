"""GPUSpawner traits (gpuspawner.hub.spawner_traits): validated at assignment with what to fix; the apply_user_options default."""

from __future__ import annotations

import logging

import pytest
from traitlets import TraitError
from traitlets.config import Config

from gpuspawner.hub import spawn_page
from gpuspawner.hub.spawner import applied_in_load_user_options

from tests.builders import make_spawner as build_spawner
from tests.hub.test_pod_wait import POOL_A100, cluster, registry, starting_spawner  # noqa: F401 (fixtures)
from tests.hub.test_spawner import make_spawner


@pytest.mark.parametrize(
    "trait, value, message",
    [
        ("cuda_policy", "lenient", "cuda_policy must be one of strict, minor, forward"),
        ("cuda_check", "gpuspawner.cuda:nope", "cuda_check 'gpuspawner.cuda:nope' cannot be imported"),
        ("cuda_check", 42, "cuda_check must be a callable"),
        ("cuda_probe_image", " ", "cuda_probe_image must be an image reference"),
        ("gpu_profiles", [{"slug": "gpu", "cuda": 12.4}], "gpu_profiles[0] (slug 'gpu'): 'cuda': the image's"),
    ],
    ids=["policy", "check-import", "check-type", "probe-image", "profile-cuda"],
)
def test_cuda_trait_validation_messages(no_kube_client, trait, value, message):
    s = make_spawner()
    with pytest.raises(TraitError) as e:
        setattr(s, trait, value)
    assert message in str(e.value)


def test_cuda_check_import_string(no_kube_client):
    from gpuspawner.cuda import decide

    assert make_spawner(cuda_check="gpuspawner.cuda:decide").cuda_check is decide
    assert make_spawner(cuda_check="gpuspawner.cuda.decide").cuda_check is decide
    assert make_spawner().cuda_check is decide and make_spawner().cuda_policy == "minor"


# --- the bound on GPUs per server -------------------------------------------------------


@pytest.mark.parametrize("value, message", [(0, "from 1 to 1024"), (1025, "from 1 to 1024"), (-3, "from 1 to 1024")])
def test_gpu_max_per_server_validation(no_kube_client, value, message):
    with pytest.raises(TraitError, match=message):
        make_spawner(gpu_max_per_server=value)
    assert make_spawner().gpu_max_per_server == 16


# --- apply_user_options ---------------------------------------------------------------------------


async def test_user_options_are_not_reported_as_unhandled(cluster, caplog):
    s = starting_spawner()
    assert s.apply_user_options is applied_in_load_user_options
    with caplog.at_level(logging.DEBUG):
        await s._run_apply_user_options({"profile": "gpu", "gpu_pool": POOL_A100.id, "gpus": 1})
    assert not [r for r in caplog.records if "unhandled user_options" in r.getMessage().lower()]
    assert s.image != POOL_A100.id and s.user_options == {}  # nothing was applied here


def test_an_admins_apply_user_options_wins(cluster):
    def hook(spawner, user_options):
        spawner.environment = {"OPTS": ",".join(user_options)}

    c = Config()
    c.Spawner.apply_user_options = hook  # on the base class, as JupyterHub's docs show
    assert build_spawner("a", config=c, server=False).apply_user_options is hook
    c = Config()
    c.GPUSpawner.apply_user_options = {"image_choice": "image"}
    s = build_spawner("a", config=c, server=False)
    assert s.apply_user_options == {"image_choice": "image"}
    assert spawn_page.admin_option_keys(s) == ("image_choice",)
