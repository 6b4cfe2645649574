"""``gpuspawner doctor``: find what breaks GPU notebooks on a cluster.

* ``checks``: pure rules, from Node/Pod dicts, the hub's GPU declarations
  and RBAC facts to :class:`~gpuspawner.doctor.checks.Finding` objects;
* ``gather``: the Kubernetes I/O (nodes, pods, access reviews);
* ``report``: text and JSON output.

The command itself is ``gpuspawner.commands.doctor``; the finding ids are
explained, with their fixes, in ``docs/troubleshooting.md``.
"""

from gpuspawner.doctor.checks import FINDING_IDS, SEVERITIES, Finding, HubFacts, ObjectRef, RbacCheck, RbacFacts, run_checks

__all__ = ["FINDING_IDS", "SEVERITIES", "Finding", "HubFacts", "ObjectRef", "RbacCheck", "RbacFacts", "run_checks"]
