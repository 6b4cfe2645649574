"""Query-string spawns (``/hub/spawn/<user>?profile=gpu&gpu_pool=...&gpus=2``): the REST names and the
form's are read, nothing is dropped silently.  Pure: ``spawn.options``."""

from __future__ import annotations

import pytest

from gpuspawner.spawn.options import OptionError
from gpuspawner.spawn.option_sources import dropped_query_names, options_from_query


@pytest.mark.parametrize(
    "query, options",
    [
        ({"profile": ["gpu"], "gpu_pool": ["a100:x:nvidia.com/gpu"], "gpus": ["3"]},
         {"profile": "gpu", "gpu_pool": "a100:x:nvidia.com/gpu", "gpus": "3"}),
        ({"profile": ["gpu"], "profile-option-gpu--gpus": ["2"], "profile-option-gpu--gpu_pool": ["p"]},
         {"profile": "gpu", "gpus": "2", "gpu_pool": "p"}),
        # unknown names are kept, so that validation refuses them by name
        ({"profile": ["gpu"], "node_selector": ["x"]}, {"profile": "gpu", "node_selector": "x"}),
        ({}, {}),
    ],
    ids=["rest-names", "form-names", "unknown-kept-for-validation", "empty"],
)
def test_both_spellings_are_read(query, options):
    assert options_from_query(query) == options


@pytest.mark.parametrize(
    "query, words",
    [
        ({"profile": ["gpu"], "gpus": ["1", "2"]}, "give each option once in the query; given more than once: `gpus`"),
        ({"profile": ["cpu"], "profile-option-gpu--gpus": ["2"]},
         "`profile-option-gpu--gpus` is an option of profile 'gpu', but the query chooses profile 'cpu'; "
         "add profile=gpu or drop it"),
        ({"profile-option-gpu--gpus": ["2"]}, "but the query chooses no profile; add profile=gpu"),
        ({"profile": ["gpu"], "profile-option-gpu": ["2"]}, "`profile-option-gpu` is not an option name"),
        ({"profile": ["gpu"], "gpus": ["1"], "profile-option-gpu--gpus": ["2"]},
         "option `gpus` is given twice in the query"),
    ],
    ids=["repeated", "other-profile", "no-profile", "not-a-form-name", "both-spellings"],
)
def test_what_cannot_be_read_is_refused_not_dropped(query, words):
    with pytest.raises(OptionError) as e:
        options_from_query(query)
    assert e.value.status == 400 and words in str(e.value)


@pytest.mark.parametrize(
    "raw, dropped",
    [
        (["profile", "gpus"], []),
        (["opt-profile", "opt-gpus"], []),
        (["opt-profile", "gpus", "gpu_pool", "next"], ["gpu_pool", "gpus"]),
        (["next", "display_name", "opt-profile"], []),
        (["next", "profile"], []),
    ],
)
def test_names_jupyterhub_drops_from_a_mixed_query(raw, dropped):
    """JupyterHub reads only the ``opt-`` names of a query that mixes them with plain ones."""
    assert dropped_query_names(raw) == dropped
