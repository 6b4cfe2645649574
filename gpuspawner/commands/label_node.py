"""``gpuspawner label-node``: GPU Feature Discovery's labels, for clusters without GFD.
Design notes: docs/architecture.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
from typing import Any

from gpuspawner.commands import nvml


EXIT_OK, EXIT_FAIL, EXIT_INVALID = 0, 1, 2
P = "nvidia.com/"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dry-run", action="store_true", help="print the labels instead of patching the Node"
    )
    parser.add_argument(
        "--format",
        choices=("yaml", "json"),
        default="yaml",
        help="output format of --dry-run (default yaml)",
    )
    parser.add_argument(
        "--node",
        metavar="NAME",
        default=os.environ.get("NODE_NAME"),
        help="the Node to patch (default $NODE_NAME)",
    )
    parser.add_argument(
        "--kubeconfig",
        metavar="PATH",
        help="use this kubeconfig instead of the in-cluster service account",
    )
    parser.add_argument(
        "--interval",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="re-label every SECONDS (default 0: label once and exit)",
    )


# --------------------------------------------------------------------------
# Pure: NVML facts -> labels
# --------------------------------------------------------------------------

_LABEL_VALUE_MAX = 63  # Kubernetes label values: <= 63 chars, alphanumeric at both ends


def sanitise_product(name: str) -> str:
    """GFD's product label: drop ``[^A-Za-z0-9-_. ]``, spaces -> ``-``, then keep
    it a valid label value (at most 63 characters, alphanumeric at both ends)."""
    kept = re.sub(r"[^A-Za-z0-9\-_. ]", "", name).strip().replace(" ", "-")
    kept = kept[:_LABEL_VALUE_MAX]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", kept)


def family(arch: str | None) -> str:
    """GFD's ``nvidia.com/gpu.family`` from the compute capability (GFD ``internal/lm``)."""
    if not arch:
        return "undefined"
    try:
        major, minor = (int(p) for p in arch.split(".", 1))
    except ValueError:
        return "undefined"
    if major == 7:
        return "turing" if minor >= 5 else "volta"
    if major == 8:
        return "ada-lovelace" if minor == 9 else "ampere"
    return {
        1: "tesla",
        2: "fermi",
        3: "kepler",
        5: "maxwell",
        6: "pascal",
        9: "hopper",
        10: "blackwell",
        12: "blackwell",
        13: "rubin",
    }.get(major, "undefined")


def labels_from_report(report: nvml.NvmlReport) -> dict[str, str]:
    """The GFD labels for what NVML reported; every value a valid label value."""
    labels: dict[str, str] = {}
    m = re.fullmatch(r"(\d+)\.(\d+)(?:\.(\d+))?", report.driver)
    if m:
        major, minor, rev = m.groups()
        labels[P + "cuda.driver-version.full"] = report.driver
        labels[P + "cuda.driver-version.major"] = major
        labels[P + "cuda.driver-version.minor"] = minor
        labels[P + "cuda.driver.major"] = major  # deprecated names, still read by older tools
        labels[P + "cuda.driver.minor"] = minor
        if rev is not None:
            labels[P + "cuda.driver-version.revision"] = rev
            labels[P + "cuda.driver.rev"] = rev
    if report.cuda:
        cmaj, cmin = report.cuda.split(".", 1)
        labels[P + "cuda.runtime-version.full"] = report.cuda
        labels[P + "cuda.runtime-version.major"] = cmaj
        labels[P + "cuda.runtime-version.minor"] = cmin
        labels[P + "cuda.runtime.major"] = cmaj
        labels[P + "cuda.runtime.minor"] = cmin
    if report.gpus:
        first = report.gpus[0]
        same = [g for g in report.gpus if g.name == first.name]
        labels[P + "gpu.count"] = str(len(same))
        if first.name:
            product = sanitise_product(first.name)
            if product:
                labels[P + "gpu.product"] = product
        if first.memory_mib is not None:
            labels[P + "gpu.memory"] = str(first.memory_mib)
        if first.arch:
            amaj, amin = first.arch.split(".", 1)
            labels[P + "gpu.compute.major"] = amaj
            labels[P + "gpu.compute.minor"] = amin
        labels[P + "gpu.family"] = family(first.arch)
        labels[P + "mig.capable"] = "true" if any(g.mig_capable for g in report.gpus) else "false"
    return labels


# --------------------------------------------------------------------------
# Kubernetes
# --------------------------------------------------------------------------


class LabelError(Exception):
    """Patching the Node failed; the message says what to fix."""


async def patch_node_labels(
    node: str, labels: dict[str, str], kubeconfig: str | None = None
) -> None:
    """Merge-patch ``metadata.labels`` of ``node``; raises :class:`LabelError`."""
    import aiohttp
    from kubernetes_asyncio import client, config
    from kubernetes_asyncio.client.exceptions import ApiException
    from kubernetes_asyncio.config.config_exception import ConfigException

    cfg = client.Configuration()
    try:
        if kubeconfig:
            await config.load_kube_config(
                config_file=kubeconfig, client_configuration=cfg, persist_config=False
            )
        else:
            try:
                config.load_incluster_config(client_configuration=cfg)
            except ConfigException:
                await config.load_kube_config(client_configuration=cfg, persist_config=False)
    except (ConfigException, OSError) as e:
        raise LabelError(
            f"no Kubernetes credentials: not running in a pod with a service account, and no "
            f"usable kubeconfig ({e}); pass --kubeconfig or run it as the DaemonSet"
        ) from None
    body = {"metadata": {"labels": labels}}
    try:
        async with client.ApiClient(configuration=cfg) as api:
            await client.CoreV1Api(api).patch_node(
                node, body, _content_type="application/merge-patch+json"
            )
    except ApiException as e:
        if e.status == 404:
            raise LabelError(f"node {node!r} does not exist: check NODE_NAME") from None
        if e.status in (401, 403):
            raise LabelError(
                f"not allowed to patch node {node!r} ({e.status} {e.reason}): grant the service "
                "account 'patch' on nodes (the ClusterRole in deploy/label-node-daemonset.yaml)"
            ) from None
        raise LabelError(f"patching node {node!r} failed: {e.status} {e.reason}") from None
    except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as e:
        raise LabelError(f"cannot reach the Kubernetes API server: {e}") from None


async def _once(args: argparse.Namespace, pynvml: Any | None) -> int:
    try:
        report = await asyncio.to_thread(nvml.read, pynvml)
    except nvml.NvmlError as e:
        print(f"gpuspawner label-node: {e.explain(args.node)}", file=sys.stderr)
        return EXIT_FAIL
    labels = labels_from_report(report)
    if args.dry_run:
        if args.format == "json":
            print(json.dumps(labels, indent=2, sort_keys=True))
        else:
            import yaml

            print(yaml.safe_dump(labels, default_flow_style=False, sort_keys=True), end="")
        return EXIT_OK
    try:
        await patch_node_labels(args.node, labels, args.kubeconfig)
    except LabelError as e:
        print(f"gpuspawner label-node: {e}", file=sys.stderr)
        return EXIT_FAIL
    print(f"gpuspawner label-node: set {len(labels)} labels on node {args.node}")
    return EXIT_OK


async def run(args: argparse.Namespace, pynvml: Any | None = None) -> int:
    while True:
        code = await _once(args, pynvml)
        if args.interval <= 0 or args.dry_run:
            return code
        await asyncio.sleep(args.interval)


def main(args: argparse.Namespace, pynvml: Any | None = None) -> int:
    if not args.dry_run and not args.node:
        print(
            "gpuspawner label-node: no node name: set NODE_NAME (the DaemonSet sets it from "
            "spec.nodeName) or pass --node",
            file=sys.stderr,
        )
        return EXIT_INVALID
    if args.interval < 0:
        print("gpuspawner label-node: --interval must be 0 or more seconds", file=sys.stderr)
        return EXIT_INVALID
    try:
        return asyncio.run(run(args, pynvml))
    except KeyboardInterrupt:
        return EXIT_OK
