"""The GPU-hour traits are validated when assigned, with messages that say what to fix."""

import pytest
from traitlets import TraitError

from tests.builders import make_spawner


@pytest.mark.parametrize("trait, value, says", [
    ("gpu_hour_budgets", [{"scope": "everyone", "gpu_hours": 20}], r"gpu_hour_budgets\[0\] must have exactly the keys"),
    ("gpu_hour_budgets", [{"scope": "all", "gpu_hours": 20, "window": "30d"}], '"group:NAME"'),
    ("gpu_hour_budgets", [{"scope": "everyone", "gpu_hours": 20, "window": "4 weeks"}], '"<N>d"'),
    ("gpu_hour_weights", {"NVIDIA H100 80GB HBM3": -2}, "0 or more"),
    ("gpu_hour_budget_groups", "max", "most_generous"),
    ("gpu_hour_minimum_minutes", -1.0, "0 or more minutes"),
    ("gpu_hour_warn_minutes", float("nan"), "0 or more minutes"),
], ids=["missing-window", "bad-scope", "bad-window", "negative-weight", "bad-combine", "negative-minimum",
        "nan-warning"])
def test_bad_settings_are_refused_with_what_to_fix(no_kube_client, trait, value, says):
    with pytest.raises(TraitError, match=says):
        make_spawner(**{trait: value})


def test_good_settings(no_kube_client):
    s = make_spawner(gpu_hour_budgets=[{"scope": "group:research", "gpu_hours": 200, "window": "month"}],
                     gpu_hour_weights={"NVIDIA H100 80GB HBM3": 2}, gpu_hour_minimum_minutes=0,
                     gpu_hour_budget_groups="least_generous")
    assert [r.scope for r in s.gpu_hour_budget_rules()] == ["group:research"]
    assert s.gpu_hour_weights_rules().weight("h100:x:nvidia.com/gpu", "NVIDIA-H100-80GB-HBM3") == 2
