"""A container's environment and the downward API's values (pure)."""

import pytest

from testcluster.node.kubelet.env import ConfigError, container_env, expand, field_value, go_quote, resource_value

POD = {"metadata": {"name": "nb", "namespace": "hub", "uid": "u-1", "labels": {"app": "x", "b": 'q"d'},
                    "annotations": {"note": "line\nbreak"}},
       "spec": {"nodeName": "gpu-1", "serviceAccountName": "sa"}}


@pytest.mark.parametrize("text,out", [("$(A)-$(B)", "1-$(B)"), ("$$(A)", "$(A)"), ("$$", "$"), ("$(A", "$(A")])
def test_expand(text, out):
    assert expand(text, {"A": "1"}) == out


@pytest.mark.parametrize("path,out", [
    ("metadata.name", "nb"), ("metadata.labels['app']", "x"), ("metadata.labels", 'app="x"\nb="q\\"d"'),
    ("metadata.annotations", 'note="line\\nbreak"'), ("spec.nodeName", "gpu-1"), ("status.podIP", "127.1.0.5"),
])
def test_field_values(path, out):
    assert field_value(POD, path, pod_ip="127.1.0.5", host_ip="127.0.0.1") == out


def test_volumes_read_only_metadata_fields():
    with pytest.raises(ConfigError, match="unsupported fieldPath: spec.nodeName"):
        field_value(POD, "spec.nodeName", env_var=False)


def test_go_quote():
    assert go_quote('a"b\\c\x01é') == '"a\\"b\\\\c\\x01é"'


@pytest.mark.parametrize("resources,ref,out", [
    ({"limits": {"cpu": "1500m"}}, {"resource": "limits.cpu"}, "2"),
    ({"limits": {"memory": "1Gi"}}, {"resource": "limits.memory", "divisor": "1Mi"}, "1024"),
    ({}, {"resource": "limits.cpu"}, "8"),         # no limit: the node's allocatable
    ({}, {"resource": "requests.memory"}, "0"),
])
def test_resource_values(resources, ref, out):
    assert resource_value({"resources": resources}, ref, {"cpu": "8", "memory": "32Gi"}) == out


def test_env_order_sources_and_missing_ones():
    data = {("configmaps", "cfg"): {"A": "from-cm", "B": "b"}, ("secrets", "sec"): {"TOKEN": "t"}}

    def lookup(plural, name):
        return data.get((plural, name))
    spec = {"envFrom": [{"configMapRef": {"name": "cfg"}, "prefix": "X_"}],
            "env": [{"name": "A", "value": "$(X_A)!"},
                    {"name": "T", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "TOKEN"}}},
                    {"name": "O", "valueFrom": {"configMapKeyRef": {"name": "nope", "key": "k", "optional": True}}}]}
    env = container_env(POD, spec, base={"HOME": "/h"}, lookup=lookup, pod_ip=None, host_ip="", node_allocatable={})
    assert env == {"HOME": "/h", "X_A": "from-cm", "X_B": "b", "A": "from-cm!", "T": "t"}
    bad = {"env": [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "NOPE"}}}]}
    with pytest.raises(ConfigError, match="couldn't find key NOPE in Secret hub/sec"):
        container_env(POD, bad, base={}, lookup=lookup, pod_ip=None, host_ip="", node_allocatable={})
    with pytest.raises(ConfigError, match='configmap "gone" not found'):
        container_env(POD, {"envFrom": [{"configMapRef": {"name": "gone"}}]}, base={}, lookup=lookup,
                      pod_ip=None, host_ip="", node_allocatable={})
