"""``gpuspawner doctor``: find what breaks GPU notebooks on a cluster.

* ``findings``: the :class:`~gpuspawner.doctor.findings.Finding` model, severities, exit code;
* ``facts``: what doctor knows of the hub (its profiles, images, tolerations, CUDA check);
* ``rbac``: the access the hub needs, and what doctor found out about it;
* ``checks``: the pure rules, one module per topic, and ``run_checks``;
* ``gather``: the Kubernetes I/O (nodes, pods, access reviews);
* ``report``: text and JSON output.

The command itself is ``gpuspawner.commands.doctor``; the finding ids are
explained, with their fixes, in ``docs/troubleshooting.md``.
"""

from gpuspawner.doctor.checks import run_checks
from gpuspawner.doctor.facts import HubFacts
from gpuspawner.doctor.findings import FINDING_IDS, SEVERITIES, Finding, ObjectRef
from gpuspawner.doctor.rbac import RbacCheck, RbacFacts

__all__ = ["FINDING_IDS", "SEVERITIES", "Finding", "HubFacts", "ObjectRef", "RbacCheck", "RbacFacts", "run_checks"]
