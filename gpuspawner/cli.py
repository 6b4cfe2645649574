"""The ``gpuspawner`` command.  Design notes: docs/architecture.md."""

from __future__ import annotations

import argparse
import importlib
import sys

# subcommand name -> (module under gpuspawner.commands, one-line help)
COMMANDS = {
    "sim": ("sim", "run the test cluster (Kubernetes' control plane, simulated GPU nodes) alone"),
    "demo": ("demo", "run the test cluster with a real JupyterHub"),
    "check-cuda": ("check_cuda", "decide whether an image's CUDA fits a node's NVIDIA driver"),
    "probe": ("probe", "check the GPUs and driver from inside a server's pod (init container)"),
    "label-node": ("label_node", "label a node with GPU Feature Discovery labels read through NVML"),
    "doctor": ("doctor", "report what breaks GPU notebooks on a cluster, and how to fix it"),
    "cull": ("cull", "stop GPU servers whose GPUs and notebooks have both been idle"),
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpuspawner",
        description="gpuspawner: JupyterHub on GPU clusters",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if only is None or only == name:
            module = importlib.import_module(f"gpuspawner.commands.{module_name}")
            module.add_arguments(p)
            p.set_defaults(_module=module)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    only = argv[0] if argv and argv[0] in COMMANDS else None
    parser = build_parser(only)
    args = parser.parse_args(argv)
    if not getattr(args, "_module", None):
        parser.print_help()
        return 2
    return int(args._module.main(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
