"""Which Kueue LocalQueue (and WorkloadPriorityClass) a GPU server of a profile and pool goes through.

Pure: the rules of ``c.GPUSpawner.gpu_kueue_queues`` and the pod labels they give (docs/kueue.md).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# Kueue's plain-pod integration: the labels a pod carries to be queued (the only ones gpuspawner sets;
# Kueue adds its scheduling gate and kueue.x-k8s.io/managed itself) [Kueue site, plain_pods.md]
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
# the label Kueue puts on a plain pod's Workload: the pod's UID [Kueue pkg/controller/jobframework]
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"

_RULE_KEYS = {"match", "profiles", "queue", "priority_class"}
# a LocalQueue or WorkloadPriorityClass name is a DNS-1123 subdomain, and as a label value at most 63
# characters: so a lower-case DNS name of at most 63
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$")


@dataclass(frozen=True)
class QueueRule:
    """Servers in pools matching ``match`` (of the profiles matching ``profiles``; empty: all) are
    queued in LocalQueue ``queue`` with WorkloadPriorityClass ``priority_class`` (None: Kueue's default)."""

    match: str
    queue: str
    profiles: tuple[str, ...] = ()
    priority_class: str | None = None

    @classmethod
    def from_config(cls, d: Any, where: str = "gpu_kueue_queues") -> QueueRule:
        example = '{"match": "a100:*", "queue": "gpu-a100", "priority_class": "high"}'
        if not isinstance(d, Mapping):
            raise ValueError(f"{where} must be a dict like {example}, not {d!r}")
        unknown = sorted(set(d) - _RULE_KEYS)
        if unknown:
            raise ValueError(f"{where}: unknown key(s) {', '.join(map(repr, unknown))}; a queue rule may have "
                             f"{', '.join(sorted(_RULE_KEYS))}, e.g. {example}")
        match = d.get("match")
        if not isinstance(match, str) or not match.strip():
            raise ValueError(f"{where}: 'match' must be a pool id or glob (e.g. \"a100:*\"), not {match!r}")
        queue = _name(d.get("queue"), f"{where}: 'queue'", "the name of a Kueue LocalQueue in the servers' namespace")
        priority = d.get("priority_class")
        if priority is not None:
            priority = _name(priority, f"{where}: 'priority_class'", "the name of a Kueue WorkloadPriorityClass")
        profiles = d.get("profiles", ())
        if isinstance(profiles, str) or not isinstance(profiles, (list, tuple)) or not all(
            isinstance(p, str) and p for p in profiles
        ):
            raise ValueError(f"{where}: 'profiles' must be a list of profile slugs or globs, e.g. [\"gpu\"], "
                             f"not {profiles!r}")
        return cls(match=match, queue=queue, profiles=tuple(profiles), priority_class=priority)

    def matches_pool(self, pool_id: str) -> bool:
        return fnmatch.fnmatchcase(pool_id, self.match)

    def applies(self, profile: str | None, pool_id: str) -> bool:
        if not self.matches_pool(pool_id):
            return False
        return not self.profiles or (profile is not None and any(fnmatch.fnmatchcase(profile, p) for p in self.profiles))


def _name(value: Any, what: str, meaning: str) -> str:
    if not isinstance(value, str) or not _NAME.match(value):
        raise ValueError(f"{what} must be {meaning}: lower-case letters, digits, '-' and '.', "
                         f"at most 63 characters, not {value!r}")
    return value


def parse_rules(config: Iterable[Any], where: str = "gpu_kueue_queues") -> tuple[QueueRule, ...]:
    if isinstance(config, (str, bytes, Mapping)):
        raise ValueError(f"{where} must be a list of dicts, not {config!r}")
    return tuple(QueueRule.from_config(d, f"{where}[{i}]") for i, d in enumerate(config))


def queue_for(rules: Iterable[QueueRule], profile: str | None, pool_id: str) -> QueueRule | None:
    """The first rule for a server of ``profile`` in ``pool_id``, or None: not queued."""
    return next((r for r in rules if r.applies(profile, pool_id)), None)


def may_queue(rules: Iterable[QueueRule], profile: str | None) -> bool:
    """Whether some pool may queue a server of ``profile`` (None: any profile)."""
    return any(not r.profiles or profile is None or any(fnmatch.fnmatchcase(profile, p) for p in r.profiles)
               for r in rules)


def pod_labels(rule: QueueRule) -> dict[str, str]:
    """The labels that put a pod through Kueue's plain-pod integration, and nothing else."""
    labels = {QUEUE_LABEL: rule.queue}
    if rule.priority_class:
        labels[PRIORITY_LABEL] = rule.priority_class
    return labels
