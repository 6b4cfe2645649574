"""``gpuspawner probe``: check the GPUs and the driver from inside a server's pod.
Design notes: docs/architecture.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from gpuspawner.commands import nvml
from gpuspawner.cuda import compatibility
from gpuspawner.cuda.image import ImageCuda, ImageDeclarationError, image_cuda
from gpuspawner.cuda.require import NVML_BRANDS


DEFAULT_REPORT = "/dev/termination-log"
# Kubernetes keeps at most 4096 bytes of a container's termination message
# (core/v1 Container.terminationMessagePath documentation).
MAX_REPORT_BYTES = 4096

EXIT_OK, EXIT_FAIL, EXIT_INVALID = 0, 1, 2


def _nonnegative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is negative")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--expect-gpus",
        type=_nonnegative_int,
        metavar="N",
        default=None,
        help="GPUs the pod requested; fail when fewer are visible (0: do not "
        "check; default $GPUSPAWNER_EXPECT_GPUS, else 1)",
    )
    parser.add_argument("--cuda", metavar="X.Y", help="the CUDA version the image is built with")
    parser.add_argument(
        "--require",
        metavar="EXPR",
        action="append",
        default=[],
        help="an NVIDIA_REQUIRE_* value of the image (repeatable; ANDed)",
    )
    parser.add_argument(
        "--compat",
        metavar="X.Y",
        help="the version of the image's cuda-compat package, if it has one",
    )
    parser.add_argument(
        "--policy",
        choices=compatibility.POLICIES,
        default="minor",
        help="CUDA compatibility policy (default minor)",
    )
    parser.add_argument(
        "--enforce-require",
        action="store_true",
        help="fail, not warn, when NVIDIA_REQUIRE_* is unsatisfied although "
        "the compatibility rules accept the image",
    )
    parser.add_argument(
        "--report",
        metavar="PATH",
        default=DEFAULT_REPORT,
        help=f"where to write the JSON report (default {DEFAULT_REPORT})",
    )
    parser.add_argument(
        "--node",
        metavar="NAME",
        default=os.environ.get("NODE_NAME"),
        help="the node's name for messages (default $NODE_NAME)",
    )


def _trim(report: dict[str, Any]) -> str:
    """The report as JSON, at most MAX_REPORT_BYTES long."""
    body = json.dumps(report, sort_keys=True)
    if len(body.encode()) <= MAX_REPORT_BYTES:
        return body
    report = dict(report)
    report.pop("gpus", None)
    report.pop("verdict", None)
    body = json.dumps(report, sort_keys=True)
    if len(body.encode()) <= MAX_REPORT_BYTES:
        return body
    # the essentials, with the message cut until it fits (a node name or a
    # message can be long, and JSON escapes can grow a character to 12 bytes)
    keep = {k: report.get(k) for k in ("ok", "level", "check")}
    message = str(report.get("message", ""))
    while True:
        body = json.dumps({**keep, "message": message}, sort_keys=True)
        if len(body.encode()) <= MAX_REPORT_BYTES:
            return body
        message = message[: len(message) * 3 // 4]


def _write_report(path: str, body: str) -> None:
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(body)
    except OSError as e:
        print(
            f"probe: cannot write the report to {path} ({e.strerror}); here it is:", file=sys.stderr
        )
        print(body)


def _image(args: argparse.Namespace) -> ImageCuda:
    decl: dict[str, Any] = {}
    if args.cuda:
        decl["cuda"] = args.cuda
    if args.require:
        decl["require"] = list(args.require)
    if args.compat:
        decl["compat"] = args.compat
    return image_cuda(decl or None)


def _worst_verdict(image: ImageCuda, found: Any, node: str | None, args: argparse.Namespace) -> compatibility.Verdict:
    """The image's CUDA on each kind of GPU the container sees (architecture, brand, model): the
    worst verdict, since the server may use any of them."""
    facts = compatibility.Facts(enforce_require=True) if args.enforce_require else compatibility.DEFAULT_FACTS
    verdicts = []
    kinds = {(g.arch, g.brand, g.name) for g in found.gpus} or {(None, None, None)}
    for arch, brand, name in sorted(kinds, key=str):
        node_cuda = compatibility.NodeCuda(
            name=node,
            driver=found.driver,
            driver_cuda=found.cuda,
            arch=arch,
            brand=NVML_BRANDS.get(brand) if brand is not None else None,
            product=name,
        )
        verdicts.append(compatibility.decide(image, node_cuda, args.policy, facts))
    return compatibility.worst(verdicts) or verdicts[0]


def probe(args: argparse.Namespace, pynvml: Any | None = None) -> tuple[int, dict[str, Any]]:
    """Run the checks; returns the exit status and the report."""
    node = args.node or None
    expect = args.expect_gpus
    if expect is None:
        from_env = os.environ.get("GPUSPAWNER_EXPECT_GPUS")
        expect = 1 if from_env is None else _nonnegative_int(from_env)
    report: dict[str, Any] = {"node": node, "expected_gpus": expect}

    def done(code: int, level: str, check: str, message: str) -> tuple[int, dict[str, Any]]:
        report.update({"ok": code == EXIT_OK, "level": level, "check": check, "message": message})
        return code, report

    try:
        image = _image(args)
    except ImageDeclarationError as e:
        return done(EXIT_INVALID, "fail", "arguments", str(e))

    try:
        found = nvml.read(pynvml)
    except nvml.NvmlError as e:
        report["nvml_error"] = {"kind": e.kind, "code": e.code, "detail": e.detail}
        return done(EXIT_FAIL, "fail", "driver", e.explain(node))

    report.update(
        {
            "driver": found.driver,
            "cuda": found.cuda,
            "visible_gpus": len(found.gpus),
            "gpus": [g.to_json() for g in found.gpus],
        }
    )
    where = f"node {node}" if node else "this node"
    if len(found.gpus) < expect:
        return done(
            EXIT_FAIL,
            "fail",
            "gpu-count",
            f"the pod asked for {expect} GPU(s) but only {len(found.gpus)} are visible in the "
            f"container on {where}: check the NVIDIA device plugin and the GPU health on {where}",
        )

    if not image.has_cuda:
        return done(
            EXIT_OK,
            "ok",
            "cuda",
            f"{len(found.gpus)} GPU(s) visible on {where}, driver {found.driver}; "
            "the image declares no CUDA to check",
        )

    verdict = _worst_verdict(image, found, node, args)
    report["verdict"] = verdict.to_json()
    if verdict.level == "fail":
        return done(EXIT_FAIL, "fail", "cuda", verdict.message)
    return done(EXIT_OK, verdict.level, "cuda", verdict.message)


def main(args: argparse.Namespace, pynvml: Any | None = None) -> int:
    try:
        code, report = probe(args, pynvml)
    except argparse.ArgumentTypeError as e:
        code, report = EXIT_INVALID, {
            "ok": False,
            "level": "fail",
            "check": "arguments",
            "message": f"GPUSPAWNER_EXPECT_GPUS: {e}",
        }
    _write_report(args.report, _trim(report))
    word = {"ok": "ok", "warn": "ok with a warning", "skip": "ok"}.get(report["level"], "failed")
    print(f"gpuspawner probe: {word}: {report['message']}")
    return code
