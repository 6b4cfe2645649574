"""The resource claim controller's deletion of generated claims, beside the garbage collector."""

import pytest

from testcluster.node.controller import MERGE
from gpuspawner.sim.dra.claim_controller import ResourceClaimController
from gpuspawner.sim.store import Store
from tests.builders.dra import claim, claim_pod


def generated_claim(store: Store, owner_uid: str) -> dict:
    c = claim("nb-gpu-x")
    c["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": "nb", "uid": owner_uid,
                                         "controller": True, "blockOwnerDeletion": True}]
    return store.create("resourceclaims", c, "default")


def owner(store: Store, state: str) -> str:
    """The pod ``nb`` as the case has it; returns the uid the claim's ownerReference names."""
    if state == "gone":
        return "0d4e2f7a-0000-4000-8000-000000000000"
    pod = store.create("pods", claim_pod("nb", "t"), "default")
    if state == "replaced":
        return "0d4e2f7a-0000-4000-8000-000000000001"
    if state == "succeeded":
        store.patch("pods", "nb", {"status": {"phase": "Succeeded"}}, MERGE, "default", subresource="status")
    return pod["metadata"]["uid"]


@pytest.mark.parametrize("state, kept", [
    ("running", True),
    # "let the garbage collector handle the case that the pod is truly gone" (controller.go syncClaim)
    ("gone", True),
    ("replaced", False),
    ("succeeded", False),
], ids=["pod-running", "pod-gone-left-to-gc", "pod-replaced", "pod-done"])
def test_unused_generated_claim_is_deleted_only_when_its_pod_will_not_run(state, kept):
    store = Store()
    generated_claim(store, owner(store, state))
    ResourceClaimController(store).sync_claim("default", "nb-gpu-x")
    names = [c["metadata"]["name"] for c in store.list("resourceclaims", "default")["items"]]
    assert names == (["nb-gpu-x"] if kept else [])


def test_a_claim_deleted_meanwhile_is_no_error():
    store = Store()
    stale = generated_claim(store, owner(store, "succeeded"))
    store.delete("resourceclaims", "nb-gpu-x", "default")  # the garbage collector was first
    ResourceClaimController(store)._delete_if_unneeded(stale)
    assert store.list("resourceclaims", "default")["items"] == []
