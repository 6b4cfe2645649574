"""Write docs/traits.md: every setting GPUSpawner adds to KubeSpawner, or whose default it changes.

    python scripts/gen_traits_doc.py            # (re)write docs/traits.md
    python scripts/gen_traits_doc.py --check    # exit 1 when docs/traits.md is stale (CI, tests/test_docs.py)

The traits are read from the class an admin configures (``from gpuspawner import GPUSpawner``),
not from module paths, so moving a trait between gpuspawner's modules changes nothing here.
A trait is listed when it is ``config=True`` and either

* GPUSpawner (or a gpuspawner mixin such as ``GPUSpawnerSettings``) defines it, or redefines a
  KubeSpawner trait with another trait object, or
* a gpuspawner class gives a KubeSpawner trait a new dynamic default (traitlets' ``@default``).

Its type comes from the trait object, its default from the trait (never computed on this machine:
``@default`` values depend on the install, so they are described instead), its help from the
trait's ``help`` (the single source: edit the help in the code, then rerun this script).
Output is deterministic: no dates, versions or paths of this machine.
"""

from __future__ import annotations

import argparse
import fnmatch
import inspect
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUTPUT = ROOT / "docs" / "traits.md"

# Groups, in page order: (title, intro, name globs). A trait goes to the first group one of
# whose globs matches its name; a trait no group names goes to "Other settings", so a new
# trait is never left out of the page.
GROUPS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (
        "GPU profiles and pools",
        "What the spawn page offers: the GPU profiles, how discovered pools are shown, the most GPUs "
        "one server may ask for, and which node taints a GPU server may tolerate "
        "(docs/configuration.md sections 2 and 3).",
        ("gpu_profiles", "gpu_pool_rules", "gpu_max_per_server", "gpu_allow_multiple_shares", "gpu_tolerated_taint_keys"),
    ),
    (
        "GPU capacity",
        "How GPU nodes, pools and free GPUs are counted from the cluster, pools that scale from "
        "zero, and what happens while capacity is unknown (docs/configuration.md sections 4, 6 "
        "and 8; docs/capacity.md; DRA GPUs: docs/dra.md).",
        ("gpu_resource*", "gpu_node_group_labels", "gpu_dra_drivers", "gpu_declared_pools", "gpu_reservation_ttl",
         "gpu_capacity_*", "gpu_admit_*"),
    ),
    (
        "GPU quotas",
        "How many GPUs a user may hold at once (docs/access.md).",
        ("gpu_quota*",),
    ),
    (
        "Server pods",
        "The sweep that deletes server pods no server of the hub owns, so no GPU stays held by "
        "nobody (docs/faults.md, \"Stalled watches, spawns and cancels\").",
        ("gpu_orphan_*",),
    ),
    (
        "GPU-hour budgets",
        "The GPU-hour ledger's weights, the budgets enforced when a GPU server starts, and whether a "
        "spent budget stops running servers (docs/usage.md).",
        ("gpu_hour_*",),
    ),
    (
        "CUDA compatibility",
        "Whether an image's CUDA runs on a pool's NVIDIA driver, and the opt-in check on the node "
        "(docs/configuration.md section 10; docs/cuda-compatibility.md).",
        ("cuda_*",),
    ),
)
OTHER_GROUP = ("Other settings", "Settings no group above names.")
OVERRIDE_GROUP = (
    "KubeSpawner settings with a new default",
    "KubeSpawner's own settings whose default GPUSpawner replaces; setting them yourself works as "
    "KubeSpawner documents (https://jupyterhub-kubespawner.readthedocs.io/en/latest/spawner.html).",
)

# Why GPUSpawner changes a KubeSpawner default: the default is computed at run time, so the
# page says what it is instead of a value of this machine. A new @default without a note here
# is still listed, with the name of the method that computes it.
OVERRIDE_NOTES = {
    "additional_profile_form_template_paths": (
        "gpuspawner's templates, `share/templates` (installed under `<prefix>/share/gpuspawner/templates`). "
        "Its `form.html` renders the GPU pools "
        "(docs/configuration.md section 9)."
    ),
    "apply_user_options": (
        "gpuspawner's `applied_in_load_user_options`, which applies nothing: GPUSpawner "
        "applies `profile`, `gpu_pool` and `gpus` itself in `load_user_options`, and this keeps "
        "JupyterHub 5.3+ from logging them as unhandled. Your own value replaces it and runs as "
        "JupyterHub documents (docs/configuration.md section 5)."
    ),
    "options_form": (
        "KubeSpawner's profile form when `gpu_profiles` is empty; otherwise gpuspawner's "
        "form with the live GPU pools (autoescaped Jinja2)."
    ),
}

# gpuspawner's own defaults behind the capacity traits whose trait default is None
# ("None keeps gpuspawner's default"), shown so an admin sees what None means.
_EFFECTIVE_DEFAULTS = {
    "gpu_resources": "DEFAULT_GPU_RESOURCES",
    "gpu_resource_prefixes": "DEFAULT_GPU_RESOURCE_PREFIXES",
    "gpu_node_group_labels": "DEFAULT_NODE_GROUP_LABELS",
    "gpu_dra_drivers": "DEFAULT_DRA_DRIVERS",
}

_TYPE_NAMES = {
    "Unicode": "str",
    "Bytes": "bytes",
    "Bool": "bool",
    "Int": "int",
    "Integer": "int",
    "Float": "float",
    "Dict": "dict",
    "List": "list",
    "Set": "set",
    "Tuple": "tuple",
    "Any": "any",
    "Callable": "callable",
    "Union": "union",
    "CaselessStrEnum": "str",
    "Enum": "value",
}


@dataclass(frozen=True)
class TraitDoc:
    name: str
    type: str
    default: str
    help: str
    defined_in: str  # the gpuspawner class that defines or overrides it
    overrides_default: bool  # a KubeSpawner trait whose default GPUSpawner replaces


def describe_type(trait) -> str:
    """A short type name: ``list[str]``, ``int or None``."""
    name = _TYPE_NAMES.get(type(trait).__name__, type(trait).__name__)
    inner = getattr(trait, "_trait", None)
    if name in ("list", "set", "tuple") and inner is not None:
        name = f"{name}[{describe_type(inner).removesuffix(' or None')}]"
    if name == "dict":
        value_trait = getattr(trait, "_value_trait", None)
        if value_trait is not None:
            name = f"dict[str, {describe_type(value_trait)}]"
    if name == "union":
        name = " or ".join(describe_type(t) for t in trait.trait_types)
    # Any accepts None as a value; the validators of gpuspawner's Any traits decide what fits
    if getattr(trait, "allow_none", False) and name != "any" and not name.endswith(" or None"):
        name += " or None"
    return name


def describe_default(trait) -> str:
    value = trait.default_value
    if callable(value) and not isinstance(value, type):
        # a function default (cuda_check): its import path, not a repr with an address
        return f"`{import_path(value)}`"
    # a container trait's default_value_repr() says [] for a default of None (traitlets 5.16)
    text = "None" if value is None else trait.default_value_repr()
    if text == "traitlets.Undefined":
        return "(none)"
    default = f"`{text}`"
    constant = _EFFECTIVE_DEFAULTS.get(trait.name)
    if value is None and constant:
        from gpuspawner.capacity import config as capacity_config

        effective = getattr(capacity_config, constant, None)
        if effective is None:
            raise SystemExit(
                f"gen_traits_doc: gpuspawner.capacity.config.{constant} is gone; update "
                f"_EFFECTIVE_DEFAULTS in {Path(__file__).name} for {trait.name}"
            )
        default += ", which means " + ", ".join(f"`{v}`" for v in effective)
    return default


def import_path(obj) -> str:
    """The shortest ``package.name`` that imports ``obj``: ``gpuspawner.cuda.decide`` rather than
    the submodule that defines it, so the page names the public path."""
    import importlib

    parts = obj.__module__.split(".")
    for i in range(1, len(parts) + 1):
        module_name = ".".join(parts[:i])
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        if getattr(module, obj.__qualname__, None) is obj:
            return f"{module_name}.{obj.__qualname__}"
    return f"{obj.__module__}.{obj.__qualname__}"


def _help(trait, *, first_paragraph: bool = False) -> str:
    text = inspect.cleandoc(trait.help or "").strip()
    if first_paragraph:
        text = text.split("\n\n", 1)[0]
    return text or "(no help text)"


def collect(spawner_class=None, base_class=None) -> list[TraitDoc]:
    """The settings ``spawner_class`` adds to ``base_class`` or whose default it replaces."""
    if spawner_class is None:
        from gpuspawner import GPUSpawner as spawner_class
    if base_class is None:
        from kubespawner import KubeSpawner as base_class
    from traitlets.traitlets import DefaultHandler

    base = base_class.class_traits(config=True)
    own = spawner_class.class_traits(config=True)
    # the classes between spawner_class and base_class in the MRO (GPUSpawner and its mixins)
    own_classes = [k for k in spawner_class.mro() if k not in base_class.mro()]
    defaults_in: dict[str, tuple[str, str]] = {}
    for klass in reversed(own_classes):  # the most derived class wins
        for value in vars(klass).values():
            if isinstance(value, DefaultHandler):
                defaults_in[value.trait_name] = (klass.__name__, value.func.__name__)

    docs = []
    for name, trait in sorted(own.items()):
        if name not in base or base[name] is not trait:
            docs.append(
                TraitDoc(name, describe_type(trait), describe_default(trait), _help(trait),
                         trait.this_class.__name__, overrides_default=False)
            )
        elif name in defaults_in:
            klass, method = defaults_in[name]
            note = OVERRIDE_NOTES.get(name, f"computed by `{klass}.{method}`")
            docs.append(
                TraitDoc(name, describe_type(trait), f"computed at start: {note}",
                         _help(trait, first_paragraph=True), klass, overrides_default=True)
            )
    return docs


def group_of(doc: TraitDoc) -> tuple[str, str]:
    if doc.overrides_default:
        return OVERRIDE_GROUP
    for title, intro, globs in GROUPS:
        if any(fnmatch.fnmatchcase(doc.name, g) for g in globs):
            return title, intro
    return OTHER_GROUP


def _anchor(title: str) -> str:
    # GitHub's heading ids: lowercase, punctuation dropped, spaces to hyphens
    return "".join(ch for ch in title.lower() if ch.isalnum() or ch in " -_").replace(" ", "-")


def render(docs: list[TraitDoc]) -> str:
    order = [(t, i) for t, i, _ in GROUPS] + [OTHER_GROUP, OVERRIDE_GROUP]
    grouped: dict[str, list[TraitDoc]] = {title: [] for title, _ in order}
    for doc in docs:
        grouped[group_of(doc)[0]].append(doc)

    out = [
        "# GPUSpawner settings",
        "",
        "<!-- Generated by scripts/gen_traits_doc.py from the traits' help texts; do not edit.",
        "     Edit the help in the code, then run: python scripts/gen_traits_doc.py -->",
        "",
        "Every setting `gpuspawner.GPUSpawner` adds to KubeSpawner, and the KubeSpawner settings whose",
        "default it changes. All of KubeSpawner's other settings keep working unchanged: set them",
        "on `c.KubeSpawner` or `c.GPUSpawner`, where `c.GPUSpawner` wins because it is the more",
        "specific class (traitlets applies a class's own section after its parents').",
        "A complete site config: [jupyterhub_config.example.py](jupyterhub_config.example.py);",
        "with the Helm chart: [zero-to-jupyterhub.md](zero-to-jupyterhub.md); the topics:",
        "[configuration.md](configuration.md).",
        "",
        "Settings marked *capacity* are also read by `GET /hub/api/gpus`, which has no spawner: it",
        "reads them from `c.GPUSpawner` (or the spawner class you configured) and from",
        "`c.GPUSpawnerSettings` (formerly `c.GPUCapacitySettings`, which still works).",
        "",
        "Every one of these settings is checked when the hub starts (the config snippet does it once",
        "the hub has read all of its configuration): a value of the wrong type or out of range, a",
        "string where a list is needed, a misspelt setting, or settings that contradict each other",
        "stop the hub before it serves anything, with one line per problem on stderr naming the",
        "setting, the value given and what to write instead (configuration.md, section 1).",
        "",
        "| setting | type | default | topic |",
        "|---|---|---|---|",
    ]
    for title, _ in order:
        for doc in grouped[title]:
            default = doc.default if not doc.overrides_default else "computed at start"
            out.append(f"| [`{doc.name}`](#{_anchor(doc.name)}) | {doc.type} | {default} | {title} |")
    for title, intro in order:
        if not grouped[title]:
            continue
        out += ["", f"## {title}", "", intro]
        for doc in grouped[title]:
            where = f"`c.GPUSpawner.{doc.name}`"
            if doc.defined_in == "GPUSpawnerSettings":
                where += f" (*capacity*; also `c.GPUSpawnerSettings.{doc.name}`)"
            out += [
                "",
                f"### {doc.name}",
                "",
                f"- set: {where}",
                f"- type: {doc.type}",
                f"- default: {doc.default}",
                "",
            ]
            if doc.overrides_default:
                out += ["KubeSpawner's help (first paragraph):", ""]
            out.append(doc.help)
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--check", action="store_true",
                        help="do not write; exit 1 when the file differs from what would be written")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT,
                        help=f"the file to write or check (default: {DEFAULT_OUTPUT.relative_to(ROOT)})")
    args = parser.parse_args(argv)

    if str(ROOT) not in sys.path:  # run from a checkout without installing
        sys.path.insert(0, str(ROOT))
    text = render(collect())
    if args.check:
        try:
            current = args.output.read_text(encoding="utf-8")
        except OSError as e:
            print(f"{args.output}: cannot be read ({e.strerror}); run: python scripts/gen_traits_doc.py",
                  file=sys.stderr)
            return 1
        if current != text:
            print(f"{args.output} is stale: GPUSpawner's traits changed. Run: python scripts/gen_traits_doc.py",
                  file=sys.stderr)
            return 1
        return 0
    try:
        args.output.write_text(text, encoding="utf-8")
    except OSError as e:
        print(f"{args.output}: cannot be written ({e.strerror})", file=sys.stderr)
        return 1
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
