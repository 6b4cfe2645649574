"""All checks together (doctor.checks.run_checks): what is skipped, and the order."""

from __future__ import annotations

from gpuspawner.capacity.config import CapacityConfig
from gpuspawner.doctor import checks, findings
from gpuspawner.doctor.facts import HubFacts
from gpuspawner.doctor.rbac import RbacCheck, RbacFacts
from gpuspawner.spawn.tolerations import DEFAULT_TOLERATED_TAINT_KEYS

CONFIG = CapacityConfig()
NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
DEFAULT_HUB = HubFacts(tolerated_taint_keys=DEFAULT_TOLERATED_TAINT_KEYS)


def test_unlisted_nodes_skip_their_checks():
    rbac = RbacFacts("me", (RbacCheck("list", "nodes", None, False, "list call"),))
    found = checks.run_checks(None, [], config=CONFIG, hub=DEFAULT_HUB, rbac=rbac, now=NOW, pending_after=300)
    assert [f.id for f in found] == ["rbac-missing", "checks-skipped", "profile-checks-skipped"]
    assert findings.exit_code(found) == 1
