"""``gpuspawner doctor``: find what breaks GPU notebooks on a cluster.
Design notes: docs/troubleshooting.md.
"""

from gpuspawner.doctor.checks import run_checks
from gpuspawner.doctor.dra_state import DraState
from gpuspawner.doctor.facts import HubFacts
from gpuspawner.doctor.findings import DRA_FINDING_IDS, FINDING_IDS, SEVERITIES, Finding, ObjectRef
from gpuspawner.doctor.rbac import RbacCheck, RbacFacts

__all__ = ["DRA_FINDING_IDS", "FINDING_IDS", "SEVERITIES", "DraState", "Finding", "HubFacts", "ObjectRef",
           "RbacCheck", "RbacFacts", "run_checks"]
