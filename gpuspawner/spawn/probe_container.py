"""The opt-in on-node check of a GPU server (``c.GPUSpawner.cuda_probe``): the init container
that runs ``gpuspawner probe`` with the server's GPUs, and its report read back from the pod."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gpuspawner.cuda.image import ImageCuda

__all__ = ["PROBE_CONTAINER", "TERMINATION_MESSAGE_PATH", "PROBE_MESSAGE_LIMIT", "probe_args",
           "expected_visible_gpus", "probe_container", "probe_failure"]

PROBE_CONTAINER = "gpuspawner-probe"
PROBE_MESSAGE_LIMIT = 1000
TERMINATION_MESSAGE_PATH = "/dev/termination-log"

# --------------------------------------------------------------------------
# the container
# --------------------------------------------------------------------------


def probe_args(image: ImageCuda, gpus: int, policy: str) -> list[str]:
    """``gpuspawner probe`` arguments for ``image`` (see commands/probe.py)."""
    # the report goes to the container's terminationMessagePath (the Kubernetes default), said
    # explicitly so that the path is visible in the pod spec
    args = ["probe", "--expect-gpus", str(gpus), "--policy", policy, "--report", TERMINATION_MESSAGE_PATH]
    if image.cuda is not None:
        args += ["--cuda", f"{image.cuda[0]}.{image.cuda[1]}"]
    for r in image.requirements:
        args += ["--require", r]
    if image.compat is not None:
        args += ["--compat", f"{image.compat[0]}.{image.compat[1]}"]
    return args


def expected_visible_gpus(resource: str, product: str | None, gpus: int) -> int:
    """How many GPUs NVML must show in the probe's container for ``gpus`` of ``resource``.

    Whole GPUs (``nvidia.com/gpu`` on a node without sharing): all of them.
    MIG slices (``nvidia.com/mig-*``, or a product ending ``-MIG-<profile>``
    under the single strategy) and shared replicas (``nvidia.com/gpu.shared``,
    or a product ending ``-SHARED``: NVIDIA/k8s-device-plugin, GFD's
    ``nvidia.com/gpu.product``) may all sit on one physical GPU, so [I] only
    one is certain to be visible.
    """
    name = product or ""
    if resource == "nvidia.com/gpu" and not name.endswith("-SHARED") and "-MIG-" not in name:
        return gpus
    return 1


def probe_container(
    image: ImageCuda,
    gpus: int,
    resource: str,
    policy: str,
    container_image: str,
    product: str | None = None,
) -> dict[str, Any]:
    """The opt-in init container that runs ``gpuspawner probe`` on the node.

    It asks for the same GPUs as the server's container, so it sees the
    devices the server will get: init containers run before the app
    containers and the pod's effective request is the larger of the two
    (kubernetes.io "Init Containers", "Resource sharing within containers"),
    and the kubelet's device manager hands devices allocated to an init
    container on to the app containers (``devicesToReuse`` in
    pkg/kubelet/cm/devicemanager/manager.go). ``NODE_NAME``
    comes from ``spec.nodeName`` (downward API) for messages.
    ``FallbackToLogsOnError``: if the report file cannot be written, the log
    tail (where the probe prints the report) becomes the message.
    """
    quantity = str(gpus)
    return {
        "name": PROBE_CONTAINER,
        "image": container_image,
        "command": ["gpuspawner"],
        "args": probe_args(image, expected_visible_gpus(resource, product, gpus), policy),
        "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
        "resources": {"limits": {resource: quantity}, "requests": {resource: quantity}},
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }


# --------------------------------------------------------------------------
# its report, read back from the pod
# --------------------------------------------------------------------------


def _report_message(text: str) -> str | None:
    """``message`` of the probe's JSON report, from the termination message:
    the report itself, or (``FallbackToLogsOnError`` when the report file
    could not be written) a log tail in which it is one line."""
    candidates = [text.strip()] + [line.strip() for line in reversed(text.splitlines())]
    for c in candidates:
        if not c.startswith("{"):
            continue
        try:
            report = json.loads(c)
        except ValueError:
            continue
        if isinstance(report, dict) and isinstance(report.get("message"), str) and report["message"]:
            return report["message"]
    for line in reversed(text.splitlines()):
        if line.startswith("gpuspawner probe:"):
            return line.split(":", 2)[-1].strip() or None
    return None


def probe_failure(pod: Mapping[str, Any], image: str | None = None,
                  container: str = PROBE_CONTAINER) -> str | None:
    """The user's spawn error when the probe init container of ``pod`` (a
    Pod as JSON) has failed, else None.

    Looks at ``status.initContainerStatuses[].state.terminated`` and, since a
    pod with ``restartPolicy: OnFailure`` (KubeSpawner's) restarts a failed
    init container and shows it ``waiting`` in ``CrashLoopBackOff``, at
    ``lastState.terminated`` too.
    """
    status = pod.get("status") or {}
    node = (pod.get("spec") or {}).get("nodeName")
    where = f"node {node}" if node else "its node"
    for cs in status.get("initContainerStatuses") or []:
        if not isinstance(cs, Mapping) or cs.get("name") != container:
            continue
        for state_key in ("state", "lastState"):
            term = (cs.get(state_key) or {}).get("terminated")
            if not isinstance(term, Mapping):
                continue
            code = term.get("exitCode")
            if code in (0, None):
                continue
            text = str(term.get("message") or "")
            if term.get("reason") in ("StartError", "ContainerCannotRun") or code in (126, 127, 128):
                ref = f" ({image})" if image else ""
                return (
                    f"The GPU check could not run on {where}: its image{ref} cannot start "
                    f"`gpuspawner probe` ({text.strip()[:PROBE_MESSAGE_LIMIT] or term.get('reason') or code}). "
                    "An admin must set c.GPUSpawner.cuda_probe_image to an image with gpuspawner installed."
                )
            message = _report_message(text)
            if message is None:
                tail = text.strip()[-PROBE_MESSAGE_LIMIT:]
                message = f"it exited with status {code}" + (f": {tail}" if tail else "")
            return f"The GPU check on {where} failed before your server started: {message[:PROBE_MESSAGE_LIMIT]}"
    return None
