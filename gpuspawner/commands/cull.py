"""``gpuspawner cull``: stop GPU servers whose GPUs and Jupyter activity have both been idle.
Design notes: docs/culling.md.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from dataclasses import replace

from gpuspawner.kube.times import format_duration, parse_duration

NAME = "cull"
HELP = "stop GPU servers whose GPUs and notebooks have both been idle"

log = logging.getLogger("gpuspawner.cull")


def _duration(text: str) -> float:
    try:
        seconds = parse_duration(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be longer than 0s")
    return seconds


def _age(text: str) -> float:
    return 0.0 if text.strip() in ("0", "0s") else _duration(text)


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a fraction from 0 up to 1, e.g. 0.01")
    return value


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 1")
    return int(text)


def _port(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (1-65535)")
    return int(text)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--prometheus-url", metavar="URL",
                   help="read GPU activity from this Prometheus (its HTTP API); without it the DCGM exporter "
                        "pods are found through the Kubernetes API and scraped directly")
    p.add_argument("--idle-timeout", type=_duration, metavar="DURATION",
                   help="stop a GPU server after its GPUs and its Jupyter activity were both idle this long "
                        "(90s, 5m, 2h; default: the config file's, else 1h)")
    p.add_argument("--cull-every", type=_duration, metavar="DURATION",
                   help="how often a pass runs (default: half the idle timeout, at most 5m)")
    p.add_argument("--once", action="store_true", help="run one pass and exit: 0 when it worked")
    p.add_argument("--dry-run", action="store_true", help="say what would be stopped, stop nothing")
    p.add_argument("--config", metavar="FILE",
                   help="rules file (YAML/JSON): per-profile and per-pool timeouts, max_age, exempt_groups, "
                        "noise_floor; flags override its defaults")
    p.add_argument("--max-age", type=_age, metavar="DURATION",
                   help="stop GPU servers this old even when busy (default: never)")
    p.add_argument("--exempt-group", action="append", default=[], metavar="GROUP",
                   help="never stop servers of this group's members (repeatable; needs read:users:groups)")
    p.add_argument("--noise-floor", type=_fraction, metavar="FRACTION",
                   help="GPU activity below this fraction counts as idle (default 0.01)")
    p.add_argument("--metrics-step", type=_duration, default=60.0, metavar="DURATION",
                   help="GPU samples must not be further apart than this for a window to count as covered; "
                        "at least twice the exporter's scrape interval (default 1m)")
    p.add_argument("--scrape-every", type=_duration, default=15.0, metavar="DURATION",
                   help="without --prometheus-url: how often the exporters are scraped (default 15s)")
    p.add_argument("--exporter-selector", default="app=nvidia-dcgm-exporter", metavar="SELECTOR",
                   help="label selector of the DCGM exporter pods (default app=nvidia-dcgm-exporter)")
    p.add_argument("--exporter-port", type=_port, default=9400, metavar="PORT", help="their port (default 9400)")
    p.add_argument("--namespace", metavar="NS",
                   help="namespace of the server pods (default: all namespaces)")
    p.add_argument("--kubeconfig", metavar="PATH",
                   help="Kubernetes credentials (default: in-cluster, else $KUBECONFIG or ~/.kube/config)")
    p.add_argument("--concurrency", type=_positive, default=10, metavar="N",
                   help="at most this many hub requests at once (default 10)")
    p.add_argument("--metrics-port", type=_port, metavar="PORT",
                   help="serve the culler's Prometheus metrics on this port (/metrics)")
    p.add_argument("--metrics-address", default="0.0.0.0", metavar="ADDR",
                   help="address for --metrics-port (default 0.0.0.0)")


def _rules(args: argparse.Namespace):
    from gpuspawner.cull.idle_timeouts import CullRules, load_rules

    rules = load_rules(args.config) if args.config else CullRules()
    if args.idle_timeout is not None:
        rules = replace(rules, idle_timeout=args.idle_timeout)
    if args.max_age is not None:
        rules = replace(rules, max_age=args.max_age)
    if args.noise_floor is not None:
        rules = replace(rules, noise_floor=args.noise_floor)
    if args.exempt_group:
        rules = replace(rules, exempt_groups=rules.exempt_groups | set(args.exempt_group))
    return rules


def _problems(args: argparse.Namespace) -> list[str]:
    problems = []
    if not os.environ.get("JUPYTERHUB_API_TOKEN"):
        problems.append("JUPYTERHUB_API_TOKEN is not set: run the culler as a JupyterHub service, or export a "
                        "service token (docs/culling.md)")
    if not args.prometheus_url and args.scrape_every * 2 > args.metrics_step:
        problems.append(f"--scrape-every {format_duration(args.scrape_every)} must be at most half of "
                        f"--metrics-step {format_duration(args.metrics_step)}: each step needs a sample")
    return problems


def main(args: argparse.Namespace) -> int:
    from gpuspawner.cull.idle_timeouts import RulesError

    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="[%(levelname)1.1s %(asctime)s %(name)s] %(message)s")
    try:
        rules = _rules(args)
    except RulesError as e:
        print(f"gpuspawner cull: {e}", file=sys.stderr)
        return 2
    problems = _problems(args)
    if problems:
        for p in problems:
            print(f"gpuspawner cull: {p}", file=sys.stderr)
        return 2
    try:
        return asyncio.run(_run(args, rules))
    except KeyboardInterrupt:
        return 0


async def _run(args: argparse.Namespace, rules) -> int:
    from gpuspawner.cull.culler import Culler
    from gpuspawner.cull.hub import HubClient
    from gpuspawner.cull.kube import KubeError, PodLister, load_config
    from gpuspawner.cull.culler_metrics import CullMetrics
    from gpuspawner.cull.prometheus import PrometheusSource
    from gpuspawner.cull.scrape import ScrapeSource

    pods: PodLister | None = None
    try:
        pods = PodLister(await load_config(args.kubeconfig))
    except KubeError as e:
        if not args.prometheus_url:
            print(f"gpuspawner cull: {e} (without --prometheus-url the exporters are found through Kubernetes)",
                  file=sys.stderr)
            return 2
        log.warning("%s: servers are matched to pods by the spawner's state only (admin:server_state)", e)
    hub = HubClient(os.environ.get("JUPYTERHUB_API_URL") or "http://127.0.0.1:8081/hub/api",
                    os.environ["JUPYTERHUB_API_TOKEN"])
    longest = max([rules.idle_timeout] + [x.idle_timeout or 0 for x in (*rules.profiles.values(),
                                                                        *rules.pools.values())])
    if args.prometheus_url:
        source = PrometheusSource(args.prometheus_url, step=args.metrics_step)
    else:
        source = ScrapeSource(lambda: pods.list(args.exporter_selector), port=args.exporter_port,
                              step=args.metrics_step, keep=longest, concurrency=args.concurrency)
    metrics = CullMetrics()
    if args.metrics_port:
        metrics.serve(args.metrics_port, args.metrics_address)
    culler = Culler(hub, source, rules, dry_run=args.dry_run, concurrency=args.concurrency, metrics=metrics,
                    list_server_pods=(lambda: pods.list("component=singleuser-server", args.namespace))
                    if pods else None)
    every = args.cull_every or min(rules.idle_timeout / 2, 300.0)
    log.info("culling GPU servers idle for %s (%s), every %s%s; GPU activity from %s", format_duration(
        rules.idle_timeout), "per-profile/pool rules from " + args.config if args.config else "one rule",
        format_duration(every), " (dry run)" if args.dry_run else "",
        args.prometheus_url or f"the DCGM exporter pods ({args.exporter_selector}), every "
                               f"{format_duration(args.scrape_every)}")
    try:
        return await _loop(culler, source, args, every)
    finally:
        for closable in (hub, source, pods):
            if closable is not None:
                await closable.close()


async def _collect(source) -> None:
    """One scrape round of the exporters; a round that fails is a gap (which keeps servers), never an end."""
    from gpuspawner.cull.kube import KubeError

    try:
        await source.collect()
    except KubeError as e:
        log.error("cannot find the DCGM exporters: %s", e)
    except Exception as e:
        log.error("scrape round skipped: %s: %s", type(e).__name__, e)


async def _loop(culler, source, args: argparse.Namespace, every: float) -> int:
    if args.once:
        if not args.prometheus_url:
            await _collect(source)
        return 0 if await culler.run_pass() else 1
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)

    async def sample() -> None:
        while not stop.is_set():
            await _collect(source)
            await _sleep(stop, args.scrape_every)
    sampler = None if args.prometheus_url else asyncio.create_task(sample())
    try:
        while not stop.is_set():
            await culler.run_pass()
            await _sleep(stop, every)
    finally:
        if sampler is not None:
            sampler.cancel()
    return 0


async def _sleep(stop: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except asyncio.TimeoutError:
        pass
