"""``gpuspawner doctor``: what breaks GPU notebooks on a cluster, and how to fix it.
Design notes: docs/troubleshooting.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from typing import Any, TextIO


EXIT_OK, EXIT_PROBLEMS, EXIT_CANNOT_RUN = 0, 1, 2

# trait names doctor reads from the hub's config (GPUSpawner and its bases)
_HUB_TRAITS = ("gpu_profiles", "gpu_tolerated_taint_keys", "tolerations", "image", "profile_list",
               "cuda_policy", "cuda_check", "gpu_kueue_queues", "start_timeout", "gpu_image_pull_seconds",
               "gpu_start_timeout_max", "gpu_prepull")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    conn = parser.add_argument_group("cluster")
    conn.add_argument("--kubeconfig", metavar="PATH",
                      help="kubeconfig to use (default: in-cluster credentials in a pod, else $KUBECONFIG "
                           "or ~/.kube/config)")
    conn.add_argument("--context", metavar="NAME", help="kubeconfig context (default: the current one)")
    conn.add_argument("--server", metavar="URL",
                      help="API server URL; alone it connects without credentials (kubectl proxy, "
                           "the simulated cluster), with --kubeconfig it replaces the kubeconfig's server")
    conn.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS",
                      help="per-request timeout (default 30)")
    conn.add_argument("--page-size", type=int, default=500, metavar="N",
                      help="objects per list page (default 500)")
    hub = parser.add_argument_group("hub")
    hub.add_argument("--config", metavar="FILE",
                     help="the hub's jupyterhub_config.py: enables the profile checks (images vs drivers, "
                          "tolerated taints); without it they use gpuspawner's defaults or are skipped")
    hub.add_argument("--hub-service-account", metavar="NAMESPACE/NAME",
                     help="check RBAC for this ServiceAccount (e.g. jhub/hub) with SubjectAccessReviews; "
                          "default: the credentials doctor runs with")
    hub.add_argument("--cuda-policy", choices=("strict", "minor", "forward"), default=None,
                     help="CUDA compatibility policy for the image check (default: the hub's "
                          "c.GPUSpawner.cuda_policy, else minor)")
    cull = parser.add_argument_group("culling (gpuspawner cull)")
    cull.add_argument("--cull", action="store_true",
                      help="the hub runs gpuspawner cull: check that every NVIDIA GPU node runs a DCGM exporter")
    cull.add_argument("--prometheus-url", metavar="URL",
                      help="the culler's --prometheus-url (implies --cull): also check that Prometheus has GPU "
                           "activity series for every NVIDIA GPU node")
    parser.add_argument("--pending-after", default="5m", metavar="DURATION",
                        help="report GPU pods Pending longer than this (300, 300s, 5m, 1h; default 5m)")
    parser.add_argument("--json", action="store_true", help="print {\"findings\": [...], \"summary\": {...}}")


# --------------------------------------------------------------------------
# the hub's config


class HubConfigError(Exception):
    """The hub's config cannot be read; the message says what to fix."""


def _spawner_sections(config: Any) -> tuple[type, list[str]]:
    """The spawner class whose settings apply, and the config sections to
    merge for it, base classes first (as traitlets resolves them)."""
    from gpuspawner.hub.spawner import GPUSpawner

    klass: type = GPUSpawner
    extra: list[str] = []
    chosen = config.JupyterHub.get("spawner_class") if "JupyterHub" in config else None
    if isinstance(chosen, type) and issubclass(chosen, GPUSpawner):
        klass = chosen
    elif isinstance(chosen, str) and "." in chosen:
        extra.append(chosen.rsplit(".", 1)[1])  # a custom subclass named by import path
    names = klass.section_names()
    return klass, names + [n for n in extra if n not in names]


def load_hub_config(path: str, cuda_policy: str | None) -> tuple[Any, Any]:
    """(HubFacts, CapacityConfig) from the hub's ``jupyterhub_config.py``.

    Runs the file as JupyterHub does (``get_config()``/``load_subconfig()``
    work), so it executes the admin's code; blocking, call it in a thread.
    """
    from traitlets.config import LazyConfigValue
    from traitlets.config.loader import ConfigFileNotFound, PyFileConfigLoader

    from gpuspawner.cuda.custom import resolve_check  # as the spawner's cuda_check validator does
    from gpuspawner.doctor.facts import hub_facts_from_values
    from gpuspawner.hub.spawner import GPUSpawnerSettings

    full = os.path.abspath(path)
    if not os.path.isfile(full):
        raise HubConfigError(f"--config {path}: no such file")
    loader = PyFileConfigLoader(os.path.basename(full), path=os.path.dirname(full))
    try:
        config = loader.load_config()
    except ConfigFileNotFound:
        raise HubConfigError(f"--config {path}: no such file") from None
    except SystemExit as e:
        raise HubConfigError(f"--config {path}: the file called exit({e.code})") from None
    except Exception as e:  # the admin's code: any error is reported, never a traceback
        raise HubConfigError(f"--config {path}: loading it failed: {type(e).__name__}: {e}") from None
    try:
        klass, sections = _spawner_sections(config)
        traits = klass.class_traits()
        values: dict[str, Any] = {}
        for name in _HUB_TRAITS:
            value = traits[name].default()
            for section in sections:
                if section in config and name in config[section]:
                    raw = config[section][name]
                    value = raw.get_value(value) if isinstance(raw, LazyConfigValue) else raw
            values[name] = value
        # the servers' namespace (KubeSpawner computes its default at run time): only when set
        values["namespace"] = next((config[s]["namespace"] for s in reversed(sections)
                                    if s in config and "namespace" in config[s]), None)
        if callable(values["profile_list"]):
            values["profile_list"] = []  # a callable profile_list is resolved per user at spawn time
        hub = hub_facts_from_values(values, source=path, cuda_policy=cuda_policy,
                                    cuda_check=resolve_check(values["cuda_check"]))
        capacity = GPUSpawnerSettings.from_hub_config(config, klass).capacity_config()
    except Exception as e:  # TraitError, ValueError: the message names the setting
        raise HubConfigError(f"--config {path}: {e}") from None
    return hub, capacity


def default_hub(cuda_policy: str | None) -> tuple[Any, Any]:
    """Without ``--config``: gpuspawner's defaults (tolerated taint keys, GPU resources)."""
    from gpuspawner.capacity.config import CapacityConfig
    from gpuspawner.doctor.facts import HubFacts
    from gpuspawner.spawn.tolerations import DEFAULT_TOLERATED_TAINT_KEYS

    hub = HubFacts(tolerated_taint_keys=DEFAULT_TOLERATED_TAINT_KEYS, cuda_policy=cuda_policy or "minor")
    return hub, CapacityConfig()


# --------------------------------------------------------------------------
# running


def _fail(reason: str, as_json: bool, out: TextIO, err: TextIO) -> int:
    print(f"gpuspawner doctor: {reason}", file=err)
    if as_json:
        import json

        print(json.dumps({"findings": [], "summary": {"exit_code": EXIT_CANNOT_RUN, "ok": False,
                                                      "error": reason}}, indent=2), file=out)
    return EXIT_CANNOT_RUN


def _check_flags(args: argparse.Namespace) -> tuple[float, tuple[str, str] | None]:
    """``--pending-after`` in seconds and ``--hub-service-account``; ValueError says what to fix."""
    from gpuspawner.doctor.gather import parse_service_account
    from gpuspawner.kube.times import parse_duration

    pending_after = parse_duration(args.pending_after)
    service_account = parse_service_account(args.hub_service_account) if args.hub_service_account else None
    if args.page_size < 1:
        raise ValueError(f"--page-size must be at least 1, got {args.page_size}")
    if not args.timeout > 0:
        raise ValueError(f"--timeout must be a positive number of seconds, got {args.timeout}")
    if args.context and not args.kubeconfig and args.server:
        raise ValueError("--context needs --kubeconfig when --server is given")
    return pending_after, service_account


def _facts(args: argparse.Namespace, state: Any, hub: Any, capacity: Any, service_account: Any,
           pending_after: float) -> dict[str, Any]:
    """What the report says about the run itself: the server, the counts (DRA's too), whose rights."""
    from gpuspawner.doctor.checks import dra_gpu_nodes, gpu_evidence

    dra = state.dra
    dra_nodes = dra_gpu_nodes(dra, capacity)  # GPU nodes whose GPUs a DRA driver publishes
    return {
        "server": state.server,
        "nodes": None if state.nodes is None else len(state.nodes),
        "gpu_nodes": None if state.nodes is None else sum(
            1 for n in state.nodes if gpu_evidence(n, capacity).is_gpu_node
            or (n.get("metadata") or {}).get("name") in dra_nodes),
        "pods": None if state.pods is None else len(state.pods),
        "rbac_subject": state.rbac.subject + (
            "" if service_account or "service account" in state.rbac.subject
            else " (pass --hub-service-account NAMESPACE/NAME to check the hub's)"),
        "config": args.config,
        "cuda_policy": hub.cuda_policy,
        "pending_after_seconds": pending_after,
        "dra": None if dra is None or not dra.served else {
            k: None if getattr(dra, k) is None else len(getattr(dra, k)) for k in ("classes", "slices", "claims")},
    }


async def _cull_setup(args: argparse.Namespace) -> Any:
    """``checks.CullSetup`` when culling is configured (``--cull``, ``--prometheus-url``), else None."""
    from gpuspawner.doctor.checks import CullSetup
    from gpuspawner.doctor.prometheus import activity_series

    url = getattr(args, "prometheus_url", None)
    if url:
        return CullSetup(url, await activity_series(url, args.timeout))
    return CullSetup() if getattr(args, "cull", False) else None


async def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None,
              now: float | None = None) -> int:
    """The whole command, for callers that already run an event loop."""
    from gpuspawner.doctor import checks, gather, report
    from gpuspawner.doctor.findings import exit_code

    out = out or sys.stdout
    err = err or sys.stderr
    as_json = bool(getattr(args, "json", False))
    try:
        pending_after, service_account = _check_flags(args)
        if args.config:
            hub, capacity = await asyncio.to_thread(load_hub_config, args.config, args.cuda_policy)
        else:
            hub, capacity = default_hub(args.cuda_policy)
    except (ValueError, HubConfigError) as e:
        return _fail(str(e), as_json, out, err)
    try:
        state = await gather.gather(
            kubeconfig=args.kubeconfig, context=args.context, server=args.server,
            hub_service_account=service_account, page_size=args.page_size, timeout=args.timeout,
            kueue_namespace=hub.namespace if hub.kueue_queues else None, kueue=bool(hub.kueue_queues),
            kueue_queue=hub.kueue_queues[0].queue if hub.kueue_queues else None,
        )
    except gather.GatherError as e:
        return _fail(str(e), as_json, out, err)
    except Exception as e:  # e.g. an exec credential plugin failing: one line, not a traceback
        where = args.server or args.kubeconfig or "the cluster"
        return _fail(f"reading {where} failed: {type(e).__name__}: {e}", as_json, out, err)
    try:
        cull = await _cull_setup(args)
    except gather.GatherError as e:
        return _fail(str(e), as_json, out, err)
    findings = checks.run_checks(
        state.nodes, state.pods, config=capacity, hub=hub, rbac=state.rbac,
        now=time.time() if now is None else now, pending_after=pending_after, dra=state.dra, cull=cull,
        kueue=state.kueue,
    )
    facts = _facts(args, state, hub, capacity, service_account, pending_after)
    render = report.render_json if as_json else report.render_text
    print(render(findings, facts), file=out)
    return exit_code(findings)


def main(args: argparse.Namespace) -> int:
    try:
        return asyncio.run(run(args))
    except KeyboardInterrupt:
        print("gpuspawner doctor: interrupted", file=sys.stderr)
        return 130
