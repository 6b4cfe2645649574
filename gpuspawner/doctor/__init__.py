"""``gpuspawner doctor``: find what breaks GPU notebooks on a cluster.

* ``checks``: pure rules, from Node/Pod dicts, the hub's GPU declarations
  and RBAC facts to :class:`~gpuspawner.doctor.checks.Finding` objects;
* ``dra``: the checks of DRA objects (DeviceClasses, ResourceSlices, ResourceClaims);
* ``gather``: the Kubernetes I/O (nodes, pods, DRA objects, access reviews);
* ``report``: text and JSON output.

The command itself is ``gpuspawner.commands.doctor``; the finding ids are
explained, with their fixes, in ``docs/troubleshooting.md``.
"""

from gpuspawner.doctor.checks import FINDING_IDS as _PLUGIN_FINDING_IDS
from gpuspawner.doctor.checks import SEVERITIES, Finding, HubFacts, ObjectRef, RbacCheck, RbacFacts, run_checks
from gpuspawner.doctor.dra import DRA_FINDING_IDS

#: every finding id doctor reports (device-plugin and DRA checks)
FINDING_IDS = _PLUGIN_FINDING_IDS + DRA_FINDING_IDS

__all__ = ["FINDING_IDS", "SEVERITIES", "Finding", "HubFacts", "ObjectRef", "RbacCheck", "RbacFacts", "run_checks"]
