import pytest

from gpuspawner.hub.form_choices import form_choices


@pytest.mark.parametrize(
    "options, expected",
    [
        ({"profile": "gpu", "gpu_pool": "a:b:c", "gpus": 2, "image": "torch"},
         {"profile": "gpu", "gpu_pool": "a:b:c", "gpus": "2", "image": "torch"}),
        ({"profile": "gpu", "gpus": True, "node_selector": {"x": "y"}, 3: "z", "long": "x" * 600}, {"profile": "gpu"}),
        (None, {}),
    ],
    ids=["kept", "odd-values-left-out", "none"],
)
def test_a_refused_requests_choices_for_the_form(options, expected):
    assert form_choices(options) == expected
