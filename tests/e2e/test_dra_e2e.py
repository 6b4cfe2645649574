"""End to end on the demo's default cluster, whose H100 and A100-MIG node groups publish their GPUs
through NVIDIA's DRA driver (ResourceSlices, DeviceClasses gpu.nvidia.com and mig.nvidia.com) beside
device-plugin node groups: DRA pools in GET /hub/api/gpus, spawns on them through the REST API and
the form, the claims the scheduler allocates, counts that drop and come back, concurrent spawns."""

from __future__ import annotations

import html
import shutil
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from .harness import DemoHub, running_demo, wait_for
from .test_hub import gpu_limits, spawn_form, user_pod

pytestmark = [pytest.mark.integration, pytest.mark.hub]

if not shutil.which("configurable-http-proxy"):
    pytest.skip("configurable-http-proxy is not installed: run scripts/setup.sh", allow_module_level=True)

H100 = "h100-dra-pool:nvidia-h100-80gb-hbm3:gpu.nvidia.com"
MIG_1G = "a100-mig-dra-pool:nvidia-a100-sxm4-80gb-mig-1g.10gb:mig.nvidia.com"
CLAIM = "gpuspawner-gpus"
RESOURCE = "/apis/resource.k8s.io/v1"
TEMPLATE_GRACE = 10  # gpuspawner.hub.dra_templates.GRACE_SECONDS: younger templates survive a stop


@pytest.fixture(scope="module")
def hub():
    with running_demo() as h:
        yield h


def templates(hub: DemoHub) -> dict[str, dict]:
    items = hub.kube(f"{RESOURCE}/namespaces/jupyterhub/resourceclaimtemplates")["items"]
    return {t["metadata"]["name"]: t for t in items}


def claim_of(hub: DemoHub, pod: dict) -> dict:
    """The ResourceClaim the claim controller made for the pod's GPU claim, once allocated."""
    def allocated():
        fresh = hub.kube(f"/api/v1/namespaces/jupyterhub/pods/{pod['metadata']['name']}")
        name = next((s.get("resourceClaimName") for s in fresh["status"].get("resourceClaimStatuses") or []
                     if s["name"] == CLAIM), None)
        if not name:
            return None
        claim = hub.kube(f"{RESOURCE}/namespaces/jupyterhub/resourceclaims/{name}")
        return claim if (claim.get("status") or {}).get("allocation") else None

    return wait_for(allocated, 30, "the pod's claim to be allocated")


def device_nodes(hub: DemoHub) -> dict[tuple[str, str, str], str]:
    """(driver, pool, device) -> node, from the published ResourceSlices."""
    out = {}
    for s in hub.kube(f"{RESOURCE}/resourceslices")["items"]:
        spec = s["spec"]
        for d in spec.get("devices") or []:
            out[(spec["driver"], spec["pool"]["name"], d["name"])] = spec.get("nodeName")
    return out


def check_claimed_pod(hub: DemoHub, pod: dict, pool: dict, gpus: int) -> list[tuple[str, str, str]]:
    """The pod asks for no extended resource, names the template, and its claim holds ``gpus``
    distinct devices of the pool's class, all on the pod's node; returns them."""
    assert gpu_limits(pod) == {}
    (rc,) = pod["spec"]["resourceClaims"]
    assert rc["name"] == CLAIM
    assert pod["spec"]["containers"][0]["resources"]["claims"] == [{"name": CLAIM}]
    request = templates(hub)[rc["resourceClaimTemplateName"]]["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert (request["deviceClassName"], request["count"]) == (pool["resource"], gpus)
    claim = claim_of(hub, pod)
    owner = claim["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("Pod", pod["metadata"]["name"], True)
    results = claim["status"]["allocation"]["devices"]["results"]
    devices = [(r["driver"], r["pool"], r["device"]) for r in results]
    assert len(devices) == len(set(devices)) == gpus
    nodes = device_nodes(hub)
    node = hub.kube(f"/api/v1/namespaces/jupyterhub/pods/{pod['metadata']['name']}")["spec"]["nodeName"]
    assert {nodes[d] for d in devices} == {node}
    return devices


def stop(hub: DemoHub, user: str, name: str = "") -> None:
    path = f"/users/{user}/servers/{name}" if name else f"/users/{user}/server"
    r = hub.api("DELETE", path)
    assert r.status_code in (202, 204), r.text
    hub.wait_stopped(user, name)


def test_dra_pools_beside_device_plugin_pools(hub):
    pools = {p["id"]: p for p in hub.gpus()["pools"]}
    h100, mig = pools[H100], pools[MIG_1G]
    assert (h100["allocation"], h100["resource"], h100["product"]) == ("dra", "gpu.nvidia.com", "NVIDIA H100 80GB HBM3")
    assert (h100["nodes"], h100["total"], h100["max_free_per_node"]) == (2, 8, 4)
    assert (h100["driver_version"], h100["cuda_version"]) == ("570.172.8", "12.8")
    assert (mig["resource"], mig["product"], mig["total"]) == ("mig.nvidia.com", "NVIDIA A100-SXM4-80GB MIG 1g.10gb", 7)
    # the images of its fitting choices are counted on the nodes its ResourceSlices name (none holds one yet)
    assert h100["images"] and all(v == {"cached_nodes": 0, "nodes": 2} for v in h100["images"].values())
    plugin = [p for p in pools.values() if p["allocation"] == "device-plugin"]
    assert plugin and all("/" in p["resource"] for p in plugin)
    assert all(p["allocation"] in ("dra", "device-plugin") for p in pools.values())


def test_spawn_page_shows_dra_pools_with_their_cuda_fit(hub):
    session = hub.login("zoe")
    page = html.unescape(session.get(f"{hub.url}/hub/spawn", timeout=30).text)
    for pid in (H100, MIG_1G):
        pool = hub.pool(pid)
        assert f'value="{pid}"' in page and f'{pool["free"]} of {pool["total"]}' in page
    # the friendly model names, the same as the device plugin's for the same hardware; how the GPUs are
    # allocated and the DeviceClass stay out of the page (they are in the API and in doctor)
    assert "<strong>NVIDIA H100 80GB</strong>" in page and "<strong>NVIDIA A100 80GB MIG 1g.10gb</strong>" in page
    assert "1g.10gb: 1/7 of an A100 80GB, 10 GB" in page
    assert "Dynamic Resource Allocation" not in page and "DeviceClass" not in page
    assert hub.pool(H100)["display_name"] == "NVIDIA H100 80GB" and hub.pool(MIG_1G)["sharing"] == "mig"
    # the demo's images declare CUDA 12.4 and 11.8: the H100 DRA pool's driver (CUDA 12.8) runs both
    card = page[page.index(f'value="{H100}"'):]
    card = card[:card.index("</div>")]
    assert "<strong>CUDA for PyTorch (CUDA 12.4):</strong> fits</p>" in card
    assert "<strong>CUDA for PyTorch (CUDA 11.8):</strong> fits</p>" in card


def test_rest_spawn_on_a_dra_pool(hub):
    before = hub.pool(H100)
    hub.create_user("dana")
    started = time.monotonic()
    r = hub.api("POST", "/users/dana/server", json={"profile": "gpu", "gpu_pool": H100, "gpus": 2})
    assert r.status_code in (201, 202), r.text
    hub.wait_ready("dana")
    pod = user_pod(hub, "dana")
    check_claimed_pod(hub, pod, before, 2)
    assert pod["metadata"]["annotations"]["gpuspawner.io/pool"] == H100
    wait_for(lambda: hub.pool(H100)["free"] == before["free"] - 2, 30, "the free count to drop by 2")
    name = pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"]
    time.sleep(max(0.0, TEMPLATE_GRACE + 1 - (time.monotonic() - started)))
    stop(hub, "dana")
    wait_for(lambda: hub.pool(H100)["free"] == before["free"], 60, "the free count to come back")
    wait_for(lambda: name not in templates(hub), 30, "the unused template to be deleted")


def test_form_spawn_on_a_mig_dra_pool(hub):
    before = hub.pool(MIG_1G)
    session = hub.login("erin")
    r = spawn_form(hub, session, "erin",
                   {"profile": "gpu", "profile-option-gpu--gpu_pool": MIG_1G, "profile-option-gpu--gpus": "1"})
    assert r.status_code == 200, r.text[:2000]
    hub.wait_ready("erin")
    ((driver, _, device),) = check_claimed_pod(hub, user_pod(hub, "erin"), before, 1)
    assert driver == "gpu.nvidia.com" and "-mig-" in device
    wait_for(lambda: hub.pool(MIG_1G)["free"] == before["free"] - 1, 30, "the MIG count to drop")
    stop(hub, "erin")
    wait_for(lambda: hub.pool(MIG_1G)["free"] == before["free"], 60, "the MIG count to come back")


def test_concurrent_spawns_never_share_a_device(hub):
    users = ["fay", "gus", "hal"]
    before = hub.pool(H100)["free"]
    for u in users:
        hub.create_user(u)

    def spawn(user):
        return hub.api("POST", f"/users/{user}/server", json={"profile": "gpu", "gpu_pool": H100, "gpus": 2})

    with ThreadPoolExecutor(len(users)) as pool:
        codes = [r.status_code for r in pool.map(spawn, users)]
    assert all(c in (201, 202) for c in codes), codes
    taken: list[tuple[str, str, str]] = []
    for u in users:
        hub.wait_ready(u, timeout=120)
        taken += check_claimed_pod(hub, user_pod(hub, u), hub.pool(H100), 2)
    assert len(taken) == len(set(taken)) == 6
    wait_for(lambda: hub.pool(H100)["free"] == before - 6, 30, "6 devices counted as taken")
    for u in users:
        stop(hub, u)
    wait_for(lambda: hub.pool(H100)["free"] == before, 60, "all devices back")


def test_metrics_carry_dra_pools_beside_device_plugin_pools(hub):
    text = requests.get(f"{hub.url}/hub/metrics", headers={"Authorization": f"token {hub.token}"}, timeout=30).text
    h100 = hub.pool(H100)
    line = (f'gpuspawner_pool_gpus{{pool="{H100}",product="NVIDIA H100 80GB HBM3",resource="gpu.nvidia.com"}} '
            f'{float(h100["total"])}')
    assert line in text.splitlines(), [s for s in text.splitlines() if "h100-dra" in s]
    assert 'resource="nvidia.com/gpu"' in text


def test_too_many_gpus_on_a_dra_pool_is_refused_before_any_object(hub):
    hub.create_user("ivy")
    before = set(templates(hub))
    r = hub.api("POST", "/users/ivy/server", json={"profile": "gpu", "gpu_pool": H100, "gpus": 5})
    assert r.status_code == 400, r.text
    assert "choose between 1 and 4 GPUs in NVIDIA H100 80GB (asked for 5)" in r.json()["message"]
    assert hub.pods("jupyterhub", labelSelector="hub.jupyter.org/username=ivy") == []
    assert set(templates(hub)) == before
