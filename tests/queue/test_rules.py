"""Which LocalQueue a server of a profile and pool goes through (gpuspawner.queue.rules), the labels its
pod gets, and the errors a wrong rule is refused with.  Pure."""

from __future__ import annotations

import pytest

from gpuspawner.queue.rules import PRIORITY_LABEL, QUEUE_LABEL, may_queue, parse_rules, pod_labels, queue_for

RULES = parse_rules([
    {"match": "a100:*", "profiles": ["train*"], "queue": "gpu-a100-train", "priority_class": "high"},
    {"match": "a100:*", "queue": "gpu-a100"},
    {"match": "h100:*", "profiles": ["research"], "queue": "gpu-h100"},
])


@pytest.mark.parametrize(
    "profile, pool, queue, priority",
    [
        pytest.param("training", "a100:NVIDIA-A100:nvidia.com/gpu", "gpu-a100-train", "high", id="profile-glob-first"),
        pytest.param("gpu", "a100:NVIDIA-A100:nvidia.com/gpu", "gpu-a100", None, id="any-profile"),
        pytest.param("research", "h100:NVIDIA-H100:nvidia.com/gpu", "gpu-h100", None, id="profile-listed"),
        pytest.param("gpu", "h100:NVIDIA-H100:nvidia.com/gpu", None, None, id="profile-not-listed"),
        pytest.param("gpu", "t4:Tesla-T4:nvidia.com/gpu", None, None, id="pool-without-queue"),
    ],
)
def test_the_first_matching_rule_names_the_queue(profile, pool, queue, priority):
    rule = queue_for(RULES, profile, pool)
    assert (rule.queue if rule else None, rule.priority_class if rule else None) == (queue, priority)


@pytest.mark.parametrize(
    "profile, queued",
    [
        pytest.param("research", True, id="listed"),
        pytest.param("anything", True, id="rule-for-every-profile"),
        pytest.param(None, True, id="default-profile"),
    ],
)
def test_may_queue(profile, queued):
    assert may_queue(RULES, profile) is queued


def test_may_not_queue_when_no_rule_takes_the_profile():
    rules = parse_rules([{"match": "*", "profiles": ["research"], "queue": "q"}])
    assert may_queue(rules, "students") is False
    assert may_queue((), None) is False


@pytest.mark.parametrize(
    "rule, labels",
    [
        pytest.param(RULES[0], {QUEUE_LABEL: "gpu-a100-train", PRIORITY_LABEL: "high"}, id="with-priority"),
        pytest.param(RULES[1], {QUEUE_LABEL: "gpu-a100"}, id="kueue-default-priority"),
    ],
)
def test_the_pod_gets_kueues_labels_and_nothing_else(rule, labels):
    assert pod_labels(rule) == labels
    assert QUEUE_LABEL == "kueue.x-k8s.io/queue-name" and PRIORITY_LABEL == "kueue.x-k8s.io/priority-class"


@pytest.mark.parametrize(
    "config, words",
    [
        pytest.param({"match": "a100:*"}, "'queue' must be the name of a Kueue LocalQueue", id="no-queue"),
        pytest.param({"match": "a100:*", "queue": "GPU_A100"}, "lower-case letters", id="queue-not-a-name"),
        pytest.param({"match": "a100:*", "queue": "q" * 64}, "at most 63", id="queue-too-long"),
        pytest.param({"match": "a100:*", "queue": "q", "priority_class": ""}, "'priority_class'", id="empty-priority"),
        pytest.param({"queue": "q"}, "'match' must be a pool id or glob", id="no-match"),
        pytest.param({"match": "*", "queue": "q", "profiles": "gpu"}, "'profiles' must be a list", id="profiles-string"),
        pytest.param({"match": "*", "queue": "q", "pool": "x"}, "unknown key(s) 'pool'", id="unknown-key"),
        pytest.param(["match", "*"], "must be a dict like", id="not-a-dict"),
    ],
)
def test_a_wrong_rule_is_refused_with_what_to_write(config, words):
    with pytest.raises(ValueError) as e:
        parse_rules([config])
    assert words in str(e.value)
    assert "gpu_kueue_queues[0]" in str(e.value)


def test_a_dict_instead_of_a_list_is_refused():
    with pytest.raises(ValueError, match="must be a list of dicts"):
        parse_rules({"match": "*", "queue": "q"})
