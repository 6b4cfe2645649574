"""Label and field selectors: the grammar and error texts of the real API server
(k8s.io/apimachinery/pkg/labels/selector.go, pkg/fields/selector.go,
pkg/apis/core/v1/conversion.go)."""

import pytest

from gpuspawner.sim.selectors import SelectorError, parse_field_selector, parse_label_selector

LABELS = {"app": "jupyterhub", "component": "singleuser-server", "gpu": "a100", "count": "4"}


@pytest.mark.parametrize(
    "selector, matches",
    [
        ("", True),
        ("app=jupyterhub", True),
        ("app==jupyterhub", True),
        ("app!=jupyterhub", False),
        ("app!=other", True),
        ("missing!=x", True),  # != matches when the key is absent
        ("gpu in (a100,h100)", True),
        ("gpu in (t4)", False),
        ("gpu notin (t4,v100)", True),
        ("missing notin (x)", True),
        ("gpu", True),
        ("missing", False),
        ("!missing", True),
        ("!gpu", False),
        ("app=jupyterhub,gpu in (a100),!missing", True),
        ("app=jupyterhub,gpu=t4", False),
        ("  app = jupyterhub  ", True),
        ("count>3", True),
        ("count<4", False),
        ("app in (in,notin)", False),  # keywords are values inside parentheses
        ("example.com/tier", False),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_label_selector_matches(selector, matches):
    assert parse_label_selector(selector).matches(LABELS) is matches


@pytest.mark.parametrize(
    "selector, message",
    [
        ("app in", "unable to parse requirement: found '' expected: '('"),
        ("app in (a", "unable to parse requirement: found '', expected: ',' or ')'"),
        ("!app=x", "found '=', expected: ',' or 'end of string'"),
        ("app=x,", "found '', expected: identifier after ','"),
        ("=x", "found '=', expected: !, identifier, or 'end of string'"),
        ("app x", "unable to parse requirement: found 'x', expected: in, notin, =, ==, !=, gt, lt"),
        ("a==b==c", "found '==', expected: ',' or 'end of string'"),
        ("count>x", "unable to parse requirement: values[0]: Invalid value: \"x\": for 'Gt', 'Lt' "
                    "operators, the value must be an integer"),
        ("-bad=x", "unable to parse requirement: Invalid value: \"-bad\": name part must consist of "
                   "alphanumeric characters"),
        ("app=-bad", "unable to parse requirement: values[0][app]: Invalid value: \"-bad\": a valid label "
                     "must be an empty string"),
    ],
    ids=["in-without-set", "unclosed-set", "not-with-value", "trailing-comma", "no-key", "no-operator",
         "double-operator", "gt-non-integer", "bad-key", "bad-value"],
)
def test_label_selector_parse_errors(selector, message):
    with pytest.raises(SelectorError) as e:
        parse_label_selector(selector)
    assert str(e.value).startswith(message)


POD = {
    "metadata": {"name": "jupyter-alice", "namespace": "hub"},
    "spec": {"nodeName": "gpu-1", "restartPolicy": "Always", "schedulerName": "default-scheduler",
             "serviceAccountName": "default"},
    "status": {"phase": "Running", "podIP": "10.1.0.5"},
}


@pytest.mark.parametrize(
    "selector, matches",
    [
        ("metadata.name=jupyter-alice", True),
        ("metadata.name==jupyter-alice", True),
        ("metadata.name!=jupyter-alice", False),
        ("metadata.namespace=hub,status.phase=Running", True),
        ("status.phase=Running,spec.nodeName=gpu-2", False),
        ("spec.nodeName=", False),
        ("spec.hostNetwork=false", True),
        ("spec.host=gpu-1", True),  # the old alias the Pod conversion rewrites
        ("status.nominatedNodeName=", True),
        ("status.podIP=10.1.0.5", True),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_pod_field_selector(selector, matches):
    assert parse_field_selector(selector, "pods").matches(POD) is matches


@pytest.mark.parametrize(
    "plural, selector, message",
    [
        ("pods", "spec.containers=x", "field label not supported: spec.containers"),
        ("nodes", "metadata.namespace=x", "field label not supported: metadata.namespace"),
        ("events", "message=x", "field label not supported: message"),
        ("configmaps", "data.x=y", '"data.x" is not a known field selector: only "metadata.name", '
                                   '"metadata.namespace"'),
        ("pods", "status.phase", "invalid selector: 'status.phase'; can't understand 'status.phase'"),
    ],
    ids=["pod-unknown", "node-namespace", "event-message", "configmap-default-conversion", "no-operator"],
)
def test_field_selector_errors(plural, selector, message):
    with pytest.raises(SelectorError) as e:
        parse_field_selector(selector, plural)
    assert str(e.value) == message


@pytest.mark.parametrize(
    "plural, obj, selector, matches",
    [
        ("nodes", {"metadata": {"name": "n"}, "spec": {"unschedulable": True}}, "spec.unschedulable=true", True),
        ("nodes", {"metadata": {"name": "n"}, "spec": {}}, "spec.unschedulable=false", True),
        ("events", {"metadata": {"name": "e", "namespace": "hub"},
                    "involvedObject": {"kind": "Pod", "name": "jupyter-alice", "namespace": "hub"},
                    "source": {"component": "default-scheduler"}, "reason": "FailedScheduling",
                    "type": "Warning"},
         "involvedObject.kind=Pod,involvedObject.name=jupyter-alice,source=default-scheduler,type=Warning",
         True),
        ("events", {"metadata": {"name": "e"}, "reason": "Scheduled"}, "reason=FailedScheduling", False),
        ("secrets", {"metadata": {"name": "s"}, "type": "Opaque"}, "type=Opaque", True),
        ("namespaces", {"metadata": {"name": "hub"}, "status": {"phase": "Active"}}, "status.phase=Active", True),
    ],
    ids=["node-cordoned", "node-schedulable", "event-all-fields", "event-reason", "secret-type", "ns-phase"],
)
def test_field_selectors_per_kind(plural, obj, selector, matches):
    assert parse_field_selector(selector, plural).matches(obj) is matches


def test_field_selector_escaped_value():
    sel = parse_field_selector(r"metadata.name=a\,b", "configmaps")
    assert sel.matches({"metadata": {"name": "a,b"}})
    with pytest.raises(SelectorError, match="invalid escape sequence"):
        parse_field_selector(r"metadata.name=a\x", "configmaps")
