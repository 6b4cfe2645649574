"""Doctor's findings model and output (doctor.findings, doctor.report): exit code, JSON,
text, every id documented."""

from __future__ import annotations

import json

from gpuspawner.doctor import findings, report
from gpuspawner.doctor.findings import Finding


def test_exit_code_and_report_shapes():
    info = Finding("profile-checks-skipped", "info", "s", "f")
    warn = Finding("gpu-node-cordoned", "warning", "node g is cordoned", "kubectl uncordon g",
                   (findings.ObjectRef("Node", "g"),))
    assert findings.exit_code([info]) == 0
    assert findings.exit_code([info, warn]) == 1
    doc = json.loads(report.render_json([warn, info], {"server": "http://x"}))
    assert doc["summary"] == {"errors": 0, "warnings": 1, "info": 1, "ok": False, "exit_code": 1,
                              "server": "http://x"}
    assert doc["findings"][0] == {"id": "gpu-node-cordoned", "severity": "warning", "summary": "node g is cordoned",
                                  "fix": "kubectl uncordon g",
                                  "objects": [{"kind": "Node", "name": "g", "namespace": None}], "details": {}}
    text = report.render_text([warn, info], {"server": "http://x", "nodes": 3})
    assert text.index("WARNINGS (1)") < text.index("INFO (1)")
    assert "[gpu-node-cordoned] node g is cordoned" in text and "fix: kubectl uncordon g" in text
    assert "objects: node/g" in text
    assert report.render_text([info]).endswith("No problems found (1 note).")


def test_every_id_is_documented():
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "troubleshooting.md").read_text()
    missing = [i for i in findings.FINDING_IDS if f"`{i}`" not in doc]
    assert missing == []


def test_rules_and_report_import_no_hub_and_no_client():
    """checks and report are pure (docs/architecture.md): importing them pulls in
    neither JupyterHub nor a Kubernetes/HTTP client."""
    import subprocess
    import sys

    code = (
        "import sys, gpuspawner.doctor.checks, gpuspawner.doctor.report\n"
        "heavy = ('jupyterhub', 'kubespawner', 'kubernetes_asyncio', 'aiohttp', 'traitlets')\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & set(heavy)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"
