"""DeleteOptions: how a DELETE asks for a propagation policy, and the finalizers it sets."""

from __future__ import annotations

import pytest

from gpuspawner.sim import deletion
from gpuspawner.sim.errors import ApiError

O = deletion.DeleteOptions


@pytest.mark.parametrize("opts, message", [
    (O(orphan_dependents=True, propagation_policy="Foreground"),
     'DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Invalid value: "Foreground": '
     "orphanDependents and deletionPropagation cannot be both set"),
    (O(propagation_policy="Sideways"),
     'DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Unsupported value: "Sideways": '
     'supported values: "Foreground", "Background", "Orphan", "nil"'),
], ids=["both-set", "unknown-policy"])
def test_invalid_options_are_422_with_the_real_message(opts, message):
    with pytest.raises(ApiError) as e:
        opts.validate()
    assert (e.value.code, e.value.reason, e.value.message) == (422, "Invalid", message)
    assert e.value.details["kind"] == "DeleteOptions" and e.value.details["group"] == "meta.k8s.io"


@pytest.mark.parametrize("have, opts, want", [
    ([], O(), None),  # the default policy (Background) needs no finalizer
    ([], O(propagation_policy="Foreground"), ["foregroundDeletion"]),
    ([], O(propagation_policy="Orphan"), ["orphan"]),
    ([], O(orphan_dependents=True), ["orphan"]),
    ([], O(orphan_dependents=False), None),
    (["example.com/x"], O(propagation_policy="Foreground"), ["example.com/x", "foregroundDeletion"]),
    (["orphan"], O(propagation_policy="Background"), []),
    (["orphan"], O(propagation_policy="Foreground"), ["foregroundDeletion"]),
    (["foregroundDeletion"], O(), None),  # an existing finalizer is honoured when nothing is asked
], ids=["default", "foreground", "orphan", "legacy-orphan", "legacy-no-orphan", "keeps-others",
        "background-drops-orphan", "switch", "existing-kept"])
def test_gc_finalizers_follow_the_registry(have, opts, want):
    assert deletion.gc_finalizers(have, opts) == want


@pytest.mark.parametrize("opts, want", [
    (O(), None),
    (O(orphan_dependents=False), ["foregroundDeletion"]),  # namespaces read the legacy false as foreground
    (O(propagation_policy="Orphan"), ["orphan"]),
])
def test_namespace_finalizers(opts, want):
    assert deletion.namespace_gc_finalizers([], opts) == want


@pytest.mark.parametrize("source, opts", [
    ({"gracePeriodSeconds": 5, "propagationPolicy": "Foreground"}, O(5, None, None, "Foreground")),
    ({"orphanDependents": True, "preconditions": {"uid": "u"}}, O(None, {"uid": "u"}, True, None)),
])
def test_options_from_a_body(source, opts):
    assert deletion.from_body(source) == opts


def test_options_from_query_parameters():
    assert deletion.from_query({"gracePeriodSeconds": "0", "orphanDependents": "true"}) == O(0, None, True, None)
    with pytest.raises(ApiError) as e:
        deletion.from_query({"orphanDependents": "maybe"})
    assert e.value.code == 400
