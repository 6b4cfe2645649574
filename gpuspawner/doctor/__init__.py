"""``gpuspawner doctor``: find what breaks GPU notebooks on a cluster.

* ``findings``: the :class:`~gpuspawner.doctor.findings.Finding` model, severities, exit code,
  the finding ids (device-plugin and DRA);
* ``facts``: what doctor knows of the hub (its profiles, images, tolerations, CUDA check);
* ``rbac``: the access the hub needs, and what doctor found out about it;
* ``dra``: what doctor read of Dynamic Resource Allocation (DeviceClasses, ResourceSlices,
  ResourceClaims) and the DRA access the hub needs;
* ``checks``: the pure rules, one module per topic (DRA's in ``checks.dra``), and ``run_checks``;
* ``gather``: the Kubernetes I/O (nodes, pods, DRA objects, access reviews);
* ``report``: text and JSON output.

The command itself is ``gpuspawner.commands.doctor``; the finding ids are
explained, with their fixes, in ``docs/troubleshooting.md``.
"""

from gpuspawner.doctor.checks import run_checks
from gpuspawner.doctor.dra import DraState
from gpuspawner.doctor.facts import HubFacts
from gpuspawner.doctor.findings import DRA_FINDING_IDS, FINDING_IDS, SEVERITIES, Finding, ObjectRef
from gpuspawner.doctor.rbac import RbacCheck, RbacFacts

__all__ = ["DRA_FINDING_IDS", "FINDING_IDS", "SEVERITIES", "DraState", "Finding", "HubFacts", "ObjectRef",
           "RbacCheck", "RbacFacts", "run_checks"]
