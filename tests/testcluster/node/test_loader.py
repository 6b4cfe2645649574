"""Reading a cluster file: both formats, the order of creation, clear errors."""

from __future__ import annotations

import json

import pytest
import yaml

from testcluster.node import loader
from gpuspawner.commands.testbed import default_cluster_file

NODE = {
    "apiVersion": "v1", "kind": "Node",
    "metadata": {"name": "gpu-1", "labels": {"nvidia.com/gpu.product": "Tesla-T4"},
                 # read-only fields as `kubectl get -o yaml` prints them
                 "uid": "1b2c", "resourceVersion": "123", "creationTimestamp": "2025-01-01T00:00:00Z",
                 "managedFields": [{"manager": "kubelet"}]},
    "spec": {"taints": [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}]},
    "status": {"capacity": {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "2"}},
}
POD = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "train", "namespace": "research", "uid": "x", "resourceVersion": "9"},
    "spec": {"nodeName": "gpu-1", "containers": [
        {"name": "t", "image": "pytorch", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    "status": {"phase": "Running", "podIP": "10.0.0.5"},
}


def _multi_doc() -> str:
    return yaml.safe_dump_all([NODE, POD])


def _list_yaml() -> str:
    return yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [NODE, POD],
                           "metadata": {"resourceVersion": ""}})


def _list_json() -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": [NODE, POD]})


@pytest.mark.parametrize("text", [_multi_doc(), _list_yaml(), _list_json()], ids=["multi-doc", "list", "json"])
def test_formats_load_the_same_cluster(text):
    m = loader.load_text(text, "c.yaml")
    assert [n["metadata"]["name"] for n in m.nodes] == ["gpu-1"]
    assert [p["metadata"]["name"] for p in m.pods] == ["train"]
    # the namespace the pod needs is created
    assert [n["metadata"]["name"] for n in m.namespaces] == ["research"]
    node = m.nodes[0]
    # allocatable defaults to capacity; a Ready condition is added
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "2"
    assert [c["type"] for c in node["status"]["conditions"]] == ["Ready"]


def _bad(mutate, kind="node"):
    node, pod = json.loads(json.dumps(NODE)), json.loads(json.dumps(POD))
    mutate(node if kind == "node" else pod)
    return yaml.safe_dump_all([node, pod])


@pytest.mark.parametrize("text,where,field,hint", [
    (_bad(lambda n: n["status"]["capacity"].update({"cpu": "eight"})), "document 1 (Node gpu-1)",
     "status.capacity.cpu", "not valid"),
    (_bad(lambda n: n["spec"]["taints"][0].update({"effect": "NoScheduling"})), "document 1 (Node gpu-1)",
     "spec.taints[0].effect", "NoSchedule, PreferNoSchedule, NoExecute"),
    (_bad(lambda n: n["metadata"]["labels"].update({"nvidia.com/gpu.count": 4})), "document 1 (Node gpu-1)",
     "metadata.labels.nvidia.com/gpu.count", "quote it"),
    (_bad(lambda n: n.update({"status": {}})), "document 1 (Node gpu-1)", "status.allocatable", "capacity"),
    (_bad(lambda n: n["metadata"].pop("name")), "document 1", "metadata.name", "needs a metadata.name"),
    (_bad(lambda p: p["spec"].update({"nodeName": "nowhere"}), "pod"), "document 2 (Pod train)",
     "spec.nodeName", "not in the file"),
    (_bad(lambda p: p["spec"].update({"containers": []}), "pod"), "document 2 (Pod train)",
     "spec.containers", "at least one container"),
    (_bad(lambda p: p["spec"]["containers"][0]["resources"]["limits"].update({"nvidia.com/gpu": "1x"}), "pod"),
     "document 2 (Pod train)", "spec.containers[0].resources.limits.nvidia.com/gpu", "quantity"),
    (_bad(lambda p: p["status"].update({"phase": "Runing"}), "pod"), "document 2 (Pod train)", "status.phase",
     "Running"),
    (_bad(lambda p: p.update({"kind": "Deployment"}), "pod"), "document 2", "kind", "supported kinds"),
    (yaml.safe_dump({"kind": "List", "items": [NODE, {"kind": "Pod", "metadata": {"name": "p"}}]}),
     "document 1, item 1 (Pod p)", "spec", "containers"),
    ("a: [1, 2\n", "c.yaml", None, "not valid YAML"),
    (yaml.safe_dump_all([NODE, NODE]), "document 2", "metadata.name", "defined twice"),
    ("- just\n- a list\n", "document 1", None, "expected a Kubernetes object"),
], ids=["bad-quantity", "bad-effect", "unquoted-label", "no-allocatable", "no-name", "unknown-node",
        "no-containers", "bad-limit", "bad-phase", "unsupported-kind", "list-item", "broken-yaml",
        "duplicate-node", "not-an-object"])
def test_bad_input_names_document_and_field(text, where, field, hint):
    with pytest.raises(loader.LoadError) as err:
        loader.load_text(text, "c.yaml")
    e = err.value
    assert where in e.where
    assert e.field == field
    assert hint in str(e)


def test_missing_file_is_a_load_error(tmp_path):
    with pytest.raises(loader.LoadError, match="cannot read the cluster file"):
        loader.load_file(tmp_path / "nope.yaml")


def test_default_cluster_is_what_the_demo_promises():
    m = loader.load_file(default_cluster_file())
    nodes = {n["metadata"]["name"]: n for n in m.nodes}
    labels = {k: n["metadata"]["labels"] for k, n in nodes.items()}
    products = {lab.get("nvidia.com/gpu.product") for lab in labels.values()} - {None}
    assert {"NVIDIA-A100-SXM4-40GB", "Tesla-T4", "NVIDIA-A100-SXM4-80GB"} <= products
    a100 = [lab for lab in labels.values() if lab.get("cloud.google.com/gke-nodepool") == "gpu-a100-pool"]
    assert sorted(lab["nvidia.com/cuda.runtime-version.full"] for lab in a100) == ["12.2", "12.8"]
    t4 = [n for n in nodes.values() if n["metadata"]["labels"].get("kubernetes.azure.com/agentpool") == "gput4"]
    assert t4 and all(n["spec"]["taints"] == [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}] for n in t4)
    assert any("nvidia.com/mig-1g.10gb" in n["status"]["allocatable"] for n in nodes.values())
    assert any(not any(k.endswith("/gpu") for k in n["status"]["allocatable"]) for n in nodes.values())
    assert {p["metadata"]["namespace"] for p in m.pods} == {"research"}
    assert all(p["status"]["phase"] == "Running" and p["spec"]["nodeName"] for p in m.pods)
    for n in nodes.values():
        assert int(n["status"]["allocatable"]["pods"]) >= 100


# YAML read by the fast kubectl-style reader must give exactly what PyYAML gives
KUBECTL_POD = """\
apiVersion: v1
kind: Pod
metadata:
  annotations:
    kubectl.kubernetes.io/last-applied-configuration: |
      {"apiVersion":"v1","kind":"Pod"}
  creationTimestamp: "2025-01-01T00:00:00Z"
  labels:
    app: nb
  name: nb
  namespace: default
spec:
  containers:
  - args:
    - jupyterhub-singleuser
    env:
    - name: JUPYTERHUB_SERVICE_URL
      value: http://0.0.0.0:8888/user/ada/
    - name: EMPTY
      value: ""
    image: quay.io/jupyter/base-notebook:2024-01-01
    ports:
    - containerPort: 8888
      name: notebook-port
      protocol: TCP
    resources:
      limits:
        nvidia.com/gpu: "1"
      requests:
        cpu: 500m
  tolerations:
  - effect: NoSchedule
    key: sku
    operator: Equal
    value: gpu
status:
  conditions:
  - lastProbeTime: null
    lastTransitionTime: "2025-01-01T00:00:01Z"
    message: '0/4 nodes are available: 1 Insufficient nvidia.com/gpu, 3 node(s) had
      untolerated taint {sku: gpu}. preemption: 0/4 nodes are available: 1 No preemption
      victims found for incoming pod, 3 Preemption is not helpful for scheduling.'
    reason: Unschedulable
    status: "False"
    type: PodScheduled
  phase: Pending
  qosClass: Burstable
"""


@pytest.mark.parametrize("text", [
    KUBECTL_POD,
    KUBECTL_POD.replace("\n", "\r\n"),
    "a: yes\nb: no\nc: ~\nd: 0x1f\ne: 1_000\nf: 1:20\ng: .inf\nh: -.5\ni: '012'\nj: 012\nk: 1e3\n"
    "l: 2025-01-01T00:00:00Z\nm: 2001-12-14\nn: \"true\"\no: True\np: NULL\nq:\nr: -5\n",
    'a: "tab\\there \\u00e9"\nb: \'it\'\'s\'\nc: "multi\n  line"\nd: plain\n  continued\n',
    "a: |\n  one\n\n  two\nb: |-\n  three\n  # not a comment\nc: x\n",
    "c: |+\n  four\n\n",
    "- - a\n  - b\n-\n  k: v\n- c\n",
    "a:\n  - 1\n  - 2\nb:\n- 3\n- x: 1\n  y: [1, 2]\n  z: {p: q}\n",
    "# comment\n---\na: 1\n...\n---\nb: 2\n---\n",
    '"quoted key": 1\n\'single\': 2\n2: int key\ntrue: bool key\n',
    "a: &x 1\nb: *x\n",
    "a: 1 # trailing comment\n",
    "a: {k: v,\n  l: w}\n",
    "a:\tb\n",
    "---\n---\n",
    "",
], ids=["kubectl-pod", "crlf", "implicit-types", "quoted-and-folded", "literals", "keep-chomping",
        "nested-seqs",
        "seq-indents-and-flow", "documents", "keys", "anchors", "comment", "multi-line-flow", "tab",
        "empty-docs", "empty"])
def test_yaml_documents_read_as_pyyaml_reads_them(text):
    expected = list(yaml.load_all(text, Loader=loader._Loader))
    assert [obj for _, obj in loader.parse_text(text)] == [d for d in expected if d is not None]


def test_default_cluster_has_dra_nodes_published_only_through_slices():
    m = loader.load_file(default_cluster_file())
    slices = [o for p, o in m.others if p == "resourceslices"]
    classes = {o["metadata"]["name"] for p, o in m.others if p == "deviceclasses"}
    assert classes == {"gpu.nvidia.com", "mig.nvidia.com"}
    nodes = {n["metadata"]["name"]: n for n in m.nodes}
    for rs in slices:
        assert rs["spec"]["driver"] == "gpu.nvidia.com" and rs["spec"]["pool"]["name"] == rs["spec"]["nodeName"]
        assert not any(k.startswith("nvidia.com/") for k in nodes[rs["spec"]["nodeName"]]["status"]["allocatable"])
    types = {d["attributes"]["type"]["string"] for rs in slices for d in rs["spec"]["devices"]}
    assert types == {"gpu", "mig"}


DRA_DOCS = """\
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu.nvidia.com}
spec:
  selectors:
  - cel: {expression: "device.driver == 'gpu.nvidia.com'"}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: one-gpu, namespace: team}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {deviceClassName: gpu.nvidia.com}
"""


def test_dra_documents_load_cluster_scoped_first_with_their_namespace():
    """The loader sorts and places DRA objects; the API server defaults and validates them when the
    node agent creates them (tests/testcluster/test_nodeagent.py)."""
    m = loader.load_text(DRA_DOCS, "dra.yaml")
    (p1, cls), (p2, tmpl) = m.others
    assert (p1, p2) == ("deviceclasses", "resourceclaimtemplates")
    assert "namespace" not in cls["metadata"]
    assert tmpl["metadata"]["namespace"] == "team"
    assert [n["metadata"]["name"] for n in m.namespaces] == ["team"]


def test_a_dra_document_of_another_api_version_is_named():
    with pytest.raises(loader.LoadError) as e:
        loader.load_text(DRA_DOCS.replace("resource.k8s.io/v1", "resource.k8s.io/v1beta1", 1), "dra.yaml")
    assert str(e.value) == "dra.yaml: document 1: apiVersion: 'resource.k8s.io/v1beta1': a DeviceClass is 'resource.k8s.io/v1'"
@pytest.mark.parametrize("items, where, field, hint", [
    ([dict(NODE, metadata={"name": "a", "uid": "same"}), dict(NODE, metadata={"name": "b", "uid": "same"})],
     "item 1 (Node b)", "metadata.uid", "uids must be unique"),
    ([dict(POD, metadata={"name": "p", "namespace": "research", "uid": "p-uid"}), NODE,
      {"apiVersion": "v1", "kind": "Service", "spec": {"ports": [{"port": 80}]},
       "metadata": {"name": "s", "namespace": "research",
                    "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "typo"}]}}],
     "item 2 (Service s)", "metadata.ownerReferences[0].uid", "write uid 'p-uid'"),
    ([{"apiVersion": "v1", "kind": "StorageClass", "metadata": {"name": "s"}, "provisioner": "x"}],
     "item 0", "apiVersion", "'storage.k8s.io/v1'"),
], ids=["duplicate-uid", "owner-uid-mismatch", "wrong-api-version"])
def test_snapshot_consistency_errors(items, where, field, hint):
    with pytest.raises(loader.LoadError) as err:
        loader.load_text(yaml.safe_dump({"kind": "List", "items": items}), "c.yaml")
    assert where in err.value.where and err.value.field == field and hint in str(err.value)


