"""``gpuspawner check-cuda``: does an image's CUDA fit a node's NVIDIA driver?
Design notes: docs/cuda-compatibility.md.
"""

from __future__ import annotations

import argparse

from gpuspawner.cuda import compatibility, require, table
from gpuspawner.cuda.image import ImageCuda
from gpuspawner.cuda.versions import VersionError, fmt_cuda, parse_arch, parse_cuda, parse_driver


EXIT_FITS, EXIT_NO_FIT, EXIT_INVALID = 0, 1, 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--driver",
        required=True,
        metavar="VERSION",
        help="the node's NVIDIA driver version, e.g. 535.183.01",
    )
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--cuda", metavar="X.Y", help="the CUDA version the image is built with")
    what.add_argument(
        "--require",
        metavar="EXPR",
        help="the image's NVIDIA_REQUIRE_CUDA expression, decided alone",
    )
    parser.add_argument(
        "--driver-cuda",
        metavar="X.Y",
        help="the newest CUDA the driver supports (nvidia-smi's 'CUDA Version'); "
        "default: from NVIDIA's driver table",
    )
    parser.add_argument("--arch", metavar="M.m", help="the GPU's compute capability, e.g. 8.0")
    parser.add_argument(
        "--brand",
        metavar="NAME",
        help="the GPU's NVML brand, e.g. GeForce, Tesla, NVIDIA (case-insensitive)",
    )
    parser.add_argument(
        "--policy",
        choices=compatibility.POLICIES,
        default="minor",
        help="strict: backward compatibility only; minor (default): also "
        "minor-version compatibility, with a warning; forward: also "
        "forward compatibility (assumes the image carries cuda-compat)",
    )


class _Invalid(Exception):
    pass


def _checked(args: argparse.Namespace):
    """Parse every value up front so bad input is exit 2 with the reason."""
    try:
        driver = parse_driver(args.driver)
        driver_cuda = parse_cuda(args.driver_cuda) if args.driver_cuda is not None else None
        arch = parse_arch(args.arch) if args.arch is not None else None
        cuda = parse_cuda(args.cuda) if args.cuda is not None else None
    except VersionError as e:
        raise _Invalid(str(e)) from None
    brand = None
    if args.brand is not None:
        try:
            brand = require.brand_key(args.brand)
        except require.RequireError as e:
            raise _Invalid(str(e)) from None
    return driver, driver_cuda, arch, cuda, brand


def _print(verdict_word: str, text: str) -> None:
    print(f"{verdict_word}: {' '.join(text.split())}")


def main(args: argparse.Namespace) -> int:
    try:
        driver, driver_cuda, arch, cuda, brand = _checked(args)
    except _Invalid as e:
        _print("invalid", str(e))
        return EXIT_INVALID
    driver_text = args.driver.strip()
    if args.require is not None:
        return _main_require(args.require, driver_text, driver, driver_cuda, arch, brand)
    return _main_cuda(cuda, driver_text, driver_cuda, arch, brand, args.policy)


def _main_cuda(cuda, driver_text, driver_cuda, arch, brand, policy) -> int:
    datacenter = None
    if policy == "forward":
        dc = compatibility.datacenter_from_node(compatibility.NodeCuda(brand=brand)) if brand else None
        datacenter = dc is not False
    node = compatibility.NodeCuda(
        driver=driver_text,
        driver_cuda=fmt_cuda(driver_cuda) if driver_cuda else None,
        arch=fmt_cuda(arch) if arch else None,
        brand=brand,
        datacenter=datacenter,
    )
    image = ImageCuda(cuda=cuda, compat=cuda if policy == "forward" else None)
    verdict = compatibility.decide(image, node, policy)
    if verdict.level == "ok":
        _print("fits", verdict.reason)
        return EXIT_FITS
    if verdict.level == "warn":
        _print("fits with a warning", verdict.reason)
        if verdict.fix:
            print(f"warning: {verdict.fix}")
        return EXIT_FITS
    if verdict.level == "fail":
        _print("does not fit", verdict.message)
        return EXIT_NO_FIT
    _print("invalid", verdict.message)
    return EXIT_INVALID


def _main_require(expr, driver_text, driver, driver_cuda, arch, brand) -> int:
    note = ""
    if driver_cuda is None:
        found = table.cuda_for_driver(driver)
        if found:
            driver_cuda = found[0]
            note = f" (CUDA {fmt_cuda(driver_cuda)} from NVIDIA's driver table)"
        else:
            note = (
                " (its CUDA is unknown: the driver is older than every release in NVIDIA's "
                "table, so cuda factors pass, as libnvidia-container treats an unknown value)"
            )
    props = require.Properties(
        cuda=fmt_cuda(driver_cuda) if driver_cuda else None,
        driver=driver_text,
        arch=fmt_cuda(arch) if arch else None,
        brand=require.lnc_brand(brand) if brand else None,
    )
    try:
        outcome = require.check([expr], [props])
    except require.RequireError as e:
        _print("invalid", f"{e}.")
        return EXIT_INVALID
    node = f"driver {driver_text}{note}"
    if props.arch:
        node += f", compute capability {props.arch}"
    if props.brand:
        node += f", brand {props.brand}"
    if outcome.satisfied:
        _print("fits", f"the requirement {expr!r} is satisfied by {node}.")
        return EXIT_FITS
    _print("does not fit", f"{outcome.message} (on {node}).")
    return EXIT_NO_FIT
