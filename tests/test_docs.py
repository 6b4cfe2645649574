"""The admin documentation stays true to the code.

* docs/jupyterhub_config.example.py loads as JupyterHub loads it (traitlets' PyFileConfigLoader),
  also the way the Zero to JupyterHub chart runs files from jupyterhub_config.d, and every
  setting it gives is a real trait that a GPUSpawner accepts;
* docs/traits.md is what scripts/gen_traits_doc.py writes from the traits;
* every ``c.GPUSpawner.<name>`` in the docs and README is a real trait;
* every relative link between the docs resolves (files and ``#anchors``);
* the values.yaml blocks of docs/zero-to-jupyterhub.md are valid YAML whose Python and settings
  load the way the chart loads them.

No cluster and no network: KubeSpawner's client setup is replaced where a spawner is built
(the ``no_kube_client`` fixture).
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from traitlets.config import Config
from traitlets.config.loader import PyFileConfigLoader

from gpuspawner import GPUSpawner

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
EXAMPLE = DOCS / "jupyterhub_config.example.py"
GEN = ROOT / "scripts" / "gen_traits_doc.py"
MARKDOWN = sorted(DOCS.glob("*.md")) + [ROOT / "README.md"]

TRAITS = set(GPUSpawner.class_trait_names(config=True))
# the mixin whose traits GET /hub/api/gpus reads, found by name (its module may move)
CAPACITY_CLASS = next(k for k in GPUSpawner.mro() if k.__name__ == "GPUSpawnerSettings")
CAPACITY_TRAITS = set(CAPACITY_CLASS.class_trait_names(config=True))
# GPUCapacitySettings: the settings class's former name, still a config section (docs/configuration.md)
SECTION_TRAITS = {"GPUSpawner": TRAITS, "KubeSpawner": TRAITS, "GPUSpawnerSettings": CAPACITY_TRAITS,
                  "GPUCapacitySettings": CAPACITY_TRAITS}


# what the config snippet registers: GET /hub/api/gpus, the spawn form's files and the GPU-hour ledger's two endpoints
ENDPOINTS = ["/api/gpus", r"/gpuspawner/static/(.*)", r"/api/users/([^/]+)/gpu-usage", "/api/gpu-usage"]


def load_example() -> Config:
    return PyFileConfigLoader(EXAMPLE.name, path=str(DOCS)).load_config()


@pytest.fixture
def make_spawner(no_kube_client):
    """A GPUSpawner built from a Config (``builders.make_spawner``; no cluster)."""
    from tests.builders import make_spawner as build_spawner

    def make(config: Config) -> GPUSpawner:
        return build_spawner("ada", config=config, server=False)

    return make


# --- the example config ------------------------------------------------------------------


def test_example_selects_gpuspawner_and_registers_the_endpoints():
    config = load_example()
    assert config.JupyterHub.spawner_class == "gpu"
    handlers = config.JupyterHub.extra_handlers.get_value([])
    assert [path for path, *_ in handlers] == ENDPOINTS


@pytest.mark.parametrize("section", sorted(SECTION_TRAITS))
def test_example_sets_only_real_traits(section):
    config = load_example()
    unknown = set(config[section]) - SECTION_TRAITS[section] if section in config else set()
    assert not unknown, f"docs/jupyterhub_config.example.py sets unknown {section} settings: {sorted(unknown)}"


def test_example_names_only_real_traits_in_its_text():
    names = set(re.findall(r"c\.GPUSpawner\.([A-Za-z_]\w*)", EXAMPLE.read_text(encoding="utf-8")))
    assert names, "the example sets no c.GPUSpawner settings"
    assert names <= TRAITS, sorted(names - TRAITS)


def test_example_is_accepted_by_a_spawner(make_spawner):
    spawner = make_spawner(load_example())  # every validator runs on assignment from config
    config = load_example()
    for name in config.GPUSpawner:
        assert getattr(spawner, name) is not None or config.GPUSpawner[name] is None, name
    # what the example promises in its comments
    specs = {spec.slug: spec for spec in spawner.gpu_profile_specs()}
    assert set(specs) == {"gpu", "gpu-small"}
    assert [r.match for r in spawner.pool_rules() if r.hide] == ["gpu-legacy-*"]
    access = spawner.access_rules()
    assert access.profiles == {"gpu-small": frozenset({"students", "gpu-users"})}
    (declared,) = spawner.capacity_config().declared_pools
    assert (declared.node_group, declared.gpus_per_node, declared.max_nodes) == ("gpu-h100", 8, 2)
    assert spawner.cuda_probe is True and spawner.cuda_policy == "minor"


def test_example_capacity_settings_are_what_the_endpoint_reads():
    # GET /hub/api/gpus has no spawner: it rebuilds the capacity settings from the hub's config
    config = load_example()
    settings = CAPACITY_CLASS.from_hub_config(config, GPUSpawner)
    assert settings.gpu_pool_rules == config.GPUSpawner.gpu_pool_rules
    assert settings.gpu_reservation_ttl == 600
    assert len(settings.gpu_declared_pools) == 1


def _chart_like_config(tmp_path: Path, config_d: dict[str, str], extra_config: dict[str, str]) -> Config:
    """Load config the way the Z2JH chart's jupyterhub_config.py does (main branch, commit
    cbdd5403): z2jh.get_config(key, default=None) imported over traitlets' get_config, then
    jupyterhub_config.d/*.py sorted and exec'd in the chart's namespace, then hub.extraConfig
    entries sorted by key and exec'd the same way."""
    conf_d = tmp_path / "jupyterhub_config.d"
    conf_d.mkdir(parents=True)
    for name, text in config_d.items():
        (conf_d / name).write_text(text, encoding="utf-8")
    main = tmp_path / "jupyterhub_config.py"
    main.write_text(
        textwrap.dedent(
            f"""
            import glob, os

            def get_config(key, default=None):  # z2jh.get_config shadows traitlets' get_config
                return default

            c.JupyterHub.spawner_class = "kubespawner.KubeSpawner"
            c.JupyterHub.services = []
            c.JupyterHub.load_roles = []
            config_dir = {str(conf_d)!r}
            for file_path in sorted(glob.glob(f"{{config_dir}}/*.py")):
                with open(file_path) as f:
                    exec(compile(source=f.read(), filename=os.path.basename(file_path), mode="exec"))
            for key, config_py in sorted({extra_config!r}.items()):
                exec(config_py)
            """
        ),
        encoding="utf-8",
    )
    return PyFileConfigLoader(main.name, path=str(tmp_path)).load_config()


def test_example_works_from_the_charts_jupyterhub_config_d(tmp_path, make_spawner):
    config = _chart_like_config(tmp_path, {"50-gpuspawner-site.py": EXAMPLE.read_text(encoding="utf-8")}, {})
    assert config.JupyterHub.spawner_class == "gpu"
    assert [path for path, *_ in config.JupyterHub.extra_handlers.get_value([])] == ENDPOINTS
    # appended to what the chart had put there, not replacing it
    assert isinstance(config.JupyterHub.services, list)
    assert config.GPUSpawner.gpu_profiles == load_example().GPUSpawner.gpu_profiles
    make_spawner(config)


# --- docs/zero-to-jupyterhub.md ------------------------------------------------------------


def _yaml_blocks(path: Path) -> list[dict]:
    text = path.read_text(encoding="utf-8")
    return [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", text, flags=re.S)]


def test_z2jh_values_are_yaml_and_load_like_the_chart(tmp_path, make_spawner, monkeypatch):
    blocks = _yaml_blocks(DOCS / "zero-to-jupyterhub.md")
    assert blocks, "docs/zero-to-jupyterhub.md has no values.yaml blocks"
    snippet = ROOT / "jupyterhub_config.d" / "gpuspawner.py"
    installed = "/usr/local/share/gpuspawner/jupyterhub_config.d/gpuspawner.py"
    loaded_extra = 0
    for i, values in enumerate(blocks):
        assert isinstance(values, dict) and set(values) <= {"hub", "singleuser"}, f"block {i}: {values!r}"
        hub = values.get("hub", {})
        extra = {k: v.replace(installed, str(snippet)) for k, v in hub.get("extraConfig", {}).items()}
        if not extra:
            continue
        loaded_extra += 1
        config = _chart_like_config(tmp_path / str(i), {}, extra)
        # hub.config is applied before jupyterhub_config.d and extraConfig: c[app].update(cfg)
        for app, cfg in hub.get("config", {}).items():
            for key, value in cfg.items():
                config[app].setdefault(key, value)
            assert set(cfg) <= SECTION_TRAITS.get(app, set(cfg)), f"block {i}: unknown {app} settings"
        assert config.JupyterHub.spawner_class == "gpu", f"block {i}"
        make_spawner(config)
    assert loaded_extra >= 2


def test_z2jh_doc_names_the_rbac_file_and_its_rules():
    text = (DOCS / "zero-to-jupyterhub.md").read_text(encoding="utf-8")
    rbac = list(yaml.safe_load_all((ROOT / "deploy" / "rbac.yaml").read_text(encoding="utf-8")))
    role = next(d for d in rbac if d["kind"] == "ClusterRole")
    rules = {rule["resources"][0]: ", ".join(rule["verbs"]) for rule in role["rules"]}
    for resource, verbs in rules.items():
        assert f"`{resource}: {verbs}`" in text, (resource, verbs)


# --- docs/traits.md ------------------------------------------------------------------------


def test_traits_doc_is_up_to_date():
    result = subprocess.run([sys.executable, str(GEN), "--check"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_traits_doc_check_fails_on_a_stale_file(tmp_path):
    stale = tmp_path / "traits.md"
    stale.write_text((DOCS / "traits.md").read_text(encoding="utf-8").replace("gpu_quota", "gpu_quota_old", 1))
    result = subprocess.run(
        [sys.executable, str(GEN), "--check", "--output", str(stale)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 1
    assert "stale" in result.stderr and "gen_traits_doc.py" in result.stderr


def test_traits_doc_lists_every_setting_gpuspawner_adds():
    from kubespawner import KubeSpawner

    base = KubeSpawner.class_traits(config=True)
    added = {n for n, t in GPUSpawner.class_traits(config=True).items() if n not in base or base[n] is not t}
    headings = set(re.findall(r"^### (\w+)$", (DOCS / "traits.md").read_text(encoding="utf-8"), flags=re.M))
    assert added <= headings, sorted(added - headings)
    assert headings <= TRAITS, sorted(headings - TRAITS)


# --- every doc -----------------------------------------------------------------------------


@pytest.mark.parametrize("path", MARKDOWN, ids=lambda p: str(p.relative_to(ROOT)))
def test_docs_mention_only_real_traits(path):
    text = path.read_text(encoding="utf-8")
    wrong = sorted(
        f"c.{section}.{name}"
        for section, name in re.findall(r"c\.(GPUSpawner|GPUSpawnerSettings|GPUCapacitySettings)\.([A-Za-z_]\w*)", text)
        if name not in SECTION_TRAITS[section]
    )
    assert not wrong, f"{path.name} names settings that do not exist: {wrong}"


def _anchors(path: Path) -> set[str]:
    """GitHub's heading ids: lowercased, punctuation but '-' and '_' dropped, spaces to '-'."""
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    ids = set()
    for heading in re.findall(r"^#{1,6} (.+)$", text, flags=re.M):
        ids.add("".join(ch for ch in heading.strip().lower() if ch.isalnum() or ch in " -_").replace(" ", "-"))
    return ids


def _links(path: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    return [t for t in re.findall(r"\]\(([^)\s]+)\)", text) if not re.match(r"^[a-z]+:", t)]


@pytest.mark.parametrize("path", MARKDOWN, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_between_docs_resolve(path):
    broken = []
    for target in _links(path):
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{target} (no such heading)")
    assert not broken, f"{path.name}: {broken}"


def test_link_checker_sees_a_broken_link(tmp_path):
    doc = tmp_path / "a.md"
    doc.write_text("# Title\n\nSee [b](b.md), [here](#title), [gone](#nope), [web](https://example.org).\n")
    assert _links(doc) == ["b.md", "#title", "#nope"]
    assert _anchors(doc) == {"title"}
