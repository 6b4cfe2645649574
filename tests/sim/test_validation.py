"""Field validation with the API server's own messages."""

from __future__ import annotations

import pytest

from gpuspawner.sim import validation

LABEL_VALUE_MSG = ("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
                   "and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or "
                   "'12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")


@pytest.mark.parametrize("taints, causes", [
    ([{"key": "sku", "value": "gpu", "effect": "NoSchedule"}], []),
    ([{"key": "k", "value": "<svg onload=alert(1)>", "effect": "NoSchedule"}],
     [("FieldValueInvalid", "spec.taints[0].value", f'Invalid value: "<svg onload=alert(1)>": {LABEL_VALUE_MSG}')]),
    ([{"key": "k", "effect": "NoScheduling"}],
     [("FieldValueNotSupported", "spec.taints[0].effect",
       'Unsupported value: "NoScheduling": supported values: "NoSchedule", "PreferNoSchedule", "NoExecute"')]),
    ([{"key": "k"}], [("FieldValueRequired", "spec.taints[0].effect", "Required value")]),
    ([{"key": "k", "effect": "NoSchedule"}, {"key": "k", "value": "v", "effect": "NoSchedule"}],
     [("FieldValueDuplicate", "spec.taints[1]",
       'Duplicate value: core.Taint{Key:"k", Value:"v", Effect:"NoSchedule", TimeAdded:(*v1.Time)(nil)}: '
       "taints must be unique by key and effect pair")]),
], ids=["valid", "value-not-a-label-value", "unknown-effect", "no-effect", "duplicate"])
def test_taints(taints, causes):
    assert validation.taints(taints) == causes


def test_a_taint_key_must_be_a_qualified_name():
    (reason, field, message), = validation.taints([{"key": "a b", "effect": "NoSchedule"}])
    assert (reason, field) == ("FieldValueInvalid", "spec.taints[0].key")
    assert message.startswith('Invalid value: "a b": name part must consist of alphanumeric characters')


@pytest.mark.parametrize("tolerations, causes", [
    ([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}], []),
    ([{"operator": "Equal", "value": "x"}],
     [("FieldValueInvalid", "spec.tolerations[0].operator",
       'Invalid value: "Equal": operator must be Exists when `key` is empty, which means "match all values and '
       'all keys"')]),
    ([{"key": "k", "operator": "Exists", "value": "v"}],
     [("FieldValueInvalid", "spec.tolerations[0].operator",
       'Invalid value: core.Toleration{Key:"k", Operator:"Exists", Value:"v", Effect:"", '
       "TolerationSeconds:(*int64)(nil)}: value must be empty when `operator` is 'Exists'")]),
    ([{"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule", "tolerationSeconds": 5}],
     [("FieldValueInvalid", "spec.tolerations[0].effect",
       "Invalid value: \"NoSchedule\": effect must be 'NoExecute' when `tolerationSeconds` is set")]),
    ([{"key": "k", "operator": "In"}],
     [("FieldValueNotSupported", "spec.tolerations[0].operator",
       'Unsupported value: "In": supported values: "Equal", "Exists"')]),
])
def test_tolerations(tolerations, causes):
    assert validation.tolerations(tolerations) == causes


def test_annotations_may_hold_256_kib_in_all():
    assert validation.annotations({"a": "x" * (256 * 1024 - 1)}) == []
    assert validation.annotations({"a": "x" * (256 * 1024)}) == [
        ("FieldValueTooLong", "metadata.annotations", "Too long: may not be more than 262144 bytes")]


@pytest.mark.parametrize("refs, causes", [
    ([{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u"}], []),
    ([{"apiVersion": "v1", "kind": "Pod", "name": "p"}],
     [("FieldValueInvalid", "metadata.ownerReferences.uid", 'Invalid value: "": must not be empty')]),
    ([{"apiVersion": "apps/", "kind": "", "name": "p", "uid": "u"}],
     [("FieldValueInvalid", "metadata.ownerReferences.apiVersion", 'Invalid value: "apps/": version must not be empty'),
      ("FieldValueInvalid", "metadata.ownerReferences.kind", 'Invalid value: "": must not be empty')]),
])
def test_owner_references(refs, causes):
    assert validation.owner_references(refs) == causes


def test_only_one_owner_reference_may_be_the_controller():
    refs = [{"apiVersion": "v1", "kind": "Pod", "name": n, "uid": n, "controller": True} for n in ("a", "b")]
    (reason, field, message), = validation.owner_references(refs)
    assert (reason, field) == ("FieldValueInvalid", "metadata.ownerReferences")
    assert message.endswith('Only one reference can have Controller set to true. Found "true" in references for '
                            "Pod/a and Pod/b")


def test_finalizers():
    assert validation.finalizers(["kubernetes.io/pvc-protection", "orphan"]) == []
    assert validation.finalizers(["orphan", "foregroundDeletion"]) == [
        ("FieldValueInvalid", "metadata.finalizers",
         'Invalid value: []string{"orphan", "foregroundDeletion"}: finalizer orphan and foregroundDeletion cannot '
         "be both set")]
