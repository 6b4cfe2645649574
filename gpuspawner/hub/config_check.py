"""The hub's GPUSpawner settings, checked once when the hub starts: one line per problem."""

from __future__ import annotations

import asyncio
import copy
import difflib
import re
import sys
from typing import Any

from traitlets import Container, TraitError
from traitlets.config import Config, DeferredConfig, LazyConfigValue

from gpuspawner.hub.settings import LEGACY_SECTION, GPUSpawnerSettings

__all__ = ["check_at_hub_start", "config_problems", "gpu_trait_names"]

# traitlets' own words for a value of the wrong type: "The 'x' trait of a C instance expected ..."
_TRAITLETS_WORDS = re.compile(r"^The '\w+' trait of an? \w+ instance ", re.S)


def gpu_trait_names(spawner_class: type) -> list[str]:
    """The spawner class's own settings: its config traits that KubeSpawner does not have."""
    from kubespawner import KubeSpawner

    base = set(KubeSpawner.class_trait_names(config=True))
    return sorted(n for n in spawner_class.class_trait_names(config=True) if n not in base)


def _own_sections(spawner_class: type) -> list[str]:
    from kubespawner import KubeSpawner

    base = set(KubeSpawner.section_names())
    return [s for s in spawner_class.section_names() if s not in base]


def _given(config: Config, spawner_class: type, names: set[str]) -> dict[str, tuple[str, Any]]:
    """name -> (section, value) of each of ``names`` the config sets, as traitlets resolves
    them: the class's sections from the base to the class itself, the last one winning."""
    traits = spawner_class.class_traits()
    out: dict[str, tuple[str, Any]] = {}
    for section in spawner_class.section_names():
        if section not in config:
            continue
        for name, value in config[section].items():
            if name not in names:
                continue
            if isinstance(value, LazyConfigValue):  # c.GPUSpawner.x.append(...): applied to the default
                value = value.get_value(copy.deepcopy(traits[name].default()))
            elif isinstance(value, DeferredConfig):  # from the command line: read as the trait reads it
                value = value.get_value(traits[name])
            out[name] = (section, value)
    return out


def _example(trait: Any, name: str) -> str:
    """The one-line example in a trait's help (``c.GPUSpawner.<name> = ...``), else where to find one."""
    for line in (trait.help or "").splitlines():
        line = line.strip()
        if line.startswith(f"c.GPUSpawner.{name} ="):
            opened = sum(line.count(c) for c in "[{(") - sum(line.count(c) for c in "]})")
            if opened == 0:
                return f"write e.g. {line}"
            break
    return f"see c.GPUSpawner.{name} in docs/traits.md"


def _shown(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _line(section: str, name: str, value: Any, error: str, trait: Any) -> str:
    message = _TRAITLETS_WORDS.sub("", str(error).strip())
    for prefix in (f"c.{section}.{name}: ", f"c.GPUSpawner.{name}: ", f"{name}: "):
        if message.startswith(prefix):
            message = message[len(prefix):]
    message = " ".join(message.split()).rstrip(".")  # one line
    example = _example(trait, name)
    if "write" in message and example.startswith("write "):
        example = example[len("write "):]
    fix = "" if "c.GPUSpawner." in message else f"; {example}"
    return f"c.{section}.{name} = {_shown(value)}: {message}{fix}"


def config_problems(config: Config, spawner_class: type) -> list[str]:
    """Every problem of the GPU settings ``config`` gives ``spawner_class`` (a ``GPUSpawnerSettings``
    subclass), one line each: what is set, the value, what is wrong and what to write instead."""
    names = set(gpu_trait_names(spawner_class))
    known = set(spawner_class.class_trait_names())
    problems: list[str] = []
    for section in dict.fromkeys(_own_sections(spawner_class) + [LEGACY_SECTION]):
        if section in config:
            for name in sorted(set(config[section]) - known):
                close = difflib.get_close_matches(name, sorted(names), n=1)
                hint = f"did you mean {close[0]}?" if close else "see docs/traits.md for the settings"
                problems.append(f"c.{section}.{name}: there is no such setting; {hint}")
    traits = spawner_class.class_traits()
    given = _given(config, spawner_class, names)
    # the spawner's traits and validators without KubeSpawner's set-up (which makes a cluster client)
    probe = spawner_class.__new__(spawner_class)
    for name, (section, value) in sorted(given.items()):
        if isinstance(traits[name], Container) and isinstance(value, (str, bytes)):
            # traitlets' List would take a string as a list of that one string: say so rather than guess
            problems.append(_line(section, name, value, f"expected a list, not the string {value!r}: write "
                                                        f"[{value!r}]", traits[name]))
            continue
        try:
            setattr(probe, name, value)
        except TraitError as e:
            problems.append(_line(section, name, value, str(e), traits[name]))
    if problems:
        return problems
    return _together(config, spawner_class, probe)


def _together(config: Config, spawner_class: type, probe: Any) -> list[str]:
    """What only the settings together can say (a declared pool's resource must be a GPU resource...):
    the objects the hub builds from them, built once here."""
    settings = GPUSpawnerSettings.from_hub_config(config, spawner_class)
    builders = (("gpu_declared_pools with gpu_resources", settings.capacity_config),
                ("gpu_pool_rules", settings.pool_rules), ("gpu_profiles", settings.gpu_profile_specs),
                ("gpu_profiles with gpu_pool_rules (allowed_groups)", settings.access_rules))
    if hasattr(probe, "gpu_quota_policy"):
        builders += (("gpu_quota with gpu_quota_by_group and gpu_quota_admin", probe.gpu_quota_policy),)
    problems = []
    for what, build in builders:
        try:
            build()
        except (ValueError, TypeError, TraitError) as e:
            problems.append(f"c.GPUSpawner.{what}: {' '.join(str(e).split())}")
    return problems + _overrides(spawner_class, probe)


def _overrides(spawner_class: type, probe: Any) -> list[str]:
    """Each GPU profile's ``kubespawner_override``: names of the spawner's settings, with values they take
    (KubeSpawner applies them with ``setattr`` when the profile is chosen, at the user's spawn)."""
    known = spawner_class.class_trait_names()
    problems = []
    for i, profile in enumerate(getattr(probe, "gpu_profiles", None) or []):
        where = f"c.GPUSpawner.gpu_profiles[{i}] (slug {profile.get('slug')!r}) kubespawner_override"
        for key, value in (profile.get("kubespawner_override") or {}).items():
            if key not in known:
                close = difflib.get_close_matches(str(key), known, n=1)
                hint = f"did you mean {close[0]}?" if close else "see KubeSpawner's settings"
                problems.append(f"{where}: {key!r} is no setting of the spawner; {hint}")
                continue
            if callable(value):  # KubeSpawner calls it with the spawner at the spawn: its value is known then
                continue
            try:
                setattr(spawner_class.__new__(spawner_class), key, value)
            except TraitError as e:
                message = " ".join(_TRAITLETS_WORDS.sub("", str(e)).split()).rstrip(".")
                problems.append(f"{where}: {key} = {_shown(value)}: {message}")
    return problems


def _check_app(app: Any) -> None:
    spawner_class = app.spawner_class
    if not (isinstance(spawner_class, type) and issubclass(spawner_class, GPUSpawnerSettings)):
        return
    problems = config_problems(app.config, spawner_class)
    if not problems:
        return
    print(f"gpuspawner: the hub does not start: {len(problems)} problem{'s' if len(problems) > 1 else ''} "
          "in its GPUSpawner configuration:", file=sys.stderr)
    for problem in problems:
        print(f"  {problem}", file=sys.stderr)
    sys.stderr.flush()
    raise SystemExit(1)


def check_at_hub_start() -> None:
    """Check the GPUSpawner settings once the hub has read all of its configuration.

    Called from the config snippet while JupyterHub reads its config files (inside its event loop,
    ``JupyterHub.initialize``), which may go on to read more files: the check is scheduled on the
    loop, and runs at the hub's first wait, before it starts its proxy or serves a request (JupyterHub
    5 and 6: while its spawners are initialised). A problem stops the hub (exit 1) with one line each
    and no traceback. Outside a starting hub (a tool that reads the config), nothing is checked."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return
    from jupyterhub.app import JupyterHub

    if JupyterHub.initialized():
        loop.call_soon(_check_app, JupyterHub.instance())
