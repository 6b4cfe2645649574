"""An admin's own CUDA decision (gpuspawner.cuda.custom): resolved from a callable or an import
string, and called without trusting it."""

from __future__ import annotations

import pytest

from gpuspawner.cuda import NodeCuda, Verdict, decide, image_cuda
from gpuspawner.cuda.custom import resolve_check, safe_verdict

IMAGE = image_cuda("12.4", name="pt:cu124")
NODE = NodeCuda(name="gpu-0", driver="550.54.15", driver_cuda="12.4")


@pytest.mark.parametrize("value", [decide, "gpuspawner.cuda:decide", "gpuspawner.cuda.decide"],
                         ids=["callable", "colon", "dotted"])
def test_resolve_check(value):
    assert resolve_check(value) is decide


@pytest.mark.parametrize(
    "value, words",
    [("gpuspawner.cuda:nope", "cannot be imported"), ("nowhere.at.all", "cannot be imported"),
     ("", "cannot be imported"), (42, "must be a callable")],
    ids=["no-attribute", "no-module", "empty", "not-callable"],
)
def test_resolve_check_says_what_to_give(value, words):
    with pytest.raises(ValueError, match=words):
        resolve_check(value)


def test_a_good_check_is_called_with_image_node_and_policy():
    seen = []

    def check(image, node, policy):
        seen.append((image, node, policy))
        return decide(image, node, policy)

    assert safe_verdict(check, IMAGE, NODE, "strict").level == "ok"
    assert seen == [(IMAGE, NODE, "strict")]


@pytest.mark.parametrize(
    "check, words",
    [(lambda i, n, p: 1 / 0, "The CUDA check raised ZeroDivisionError: division by zero."),
     (lambda i, n, p: "ok", "The CUDA check returned str, not a Verdict"),
     (lambda i, n, p: Verdict("maybe", "r", "m"), "The CUDA check returned Verdict, not a Verdict with level")],
    ids=["raises", "not-a-verdict", "bad-level"],
)
def test_a_broken_check_is_a_skip_that_says_so(check, words):
    v = safe_verdict(check, IMAGE, NODE, "minor")
    assert (v.level, v.rule) == ("skip", "check-error")
    assert v.reason.startswith(words)
    assert v.fix == "Fix c.GPUSpawner.cuda_check."
