"""The taint policy: which node taints a GPU server may tolerate.  Pure, stdlib only."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gpuspawner.capacity.model import PoolView, Taint
from gpuspawner.capacity.taintrule import (
    DEFAULT_TOLERATED_TAINT_KEYS,
    HARD_EFFECTS,
    NEVER_TOLERATED_PREFIXES,
    check_tolerated_keys,
    keeps_pods_off,
    taint_key_allowed,
    tolerates,
)

__all__ = ["NEVER_TOLERATED_PREFIXES", "DEFAULT_TOLERATED_TAINT_KEYS", "HARD_EFFECTS", "check_tolerated_keys",
           "taint_key_allowed",
           "toleration_for", "tolerates", "keeps_pods_off", "untolerated_taints", "taint_text",
           "refused_by_taint"]

def toleration_for(taint: Taint) -> dict[str, Any]:
    """The narrowest toleration of one taint: ``Equal`` on its value, or
    ``Exists`` with its key when the taint has no value."""
    tol: dict[str, Any] = {"key": taint.key, "effect": taint.effect}
    if taint.value:
        tol["operator"] = "Equal"
        tol["value"] = taint.value
    else:
        tol["operator"] = "Exists"
    return tol


def untolerated_taints(pool: PoolView, allowed_taint_keys: Iterable[str]) -> tuple[Taint, ...]:
    """Hard taints of the pool (other than Kubernetes' own node-condition
    taints) that the pod will not tolerate, so the scheduler keeps it off
    those nodes: logged for the admin, who may allow the key."""
    allowed = tuple(allowed_taint_keys)
    return tuple(t for t in pool.taints if keeps_pods_off(t) and not taint_key_allowed(t.key, allowed))


def taint_text(t: Taint) -> str:
    """A taint as ``kubectl taint`` writes it: ``sku=gpu:NoSchedule``, ``nvidia.com/gpu:NoSchedule``."""
    return f"{t.key}={t.value}:{t.effect}" if t.value else f"{t.key}:{t.effect}"


def refused_by_taint(pool: PoolView, allowed_taint_keys: Iterable[str]) -> str | None:
    """Why a pool gives no GPU at all when a hard taint on its nodes is one no server tolerates
    (kube-scheduler's TaintToleration filter keeps every server off them, so the capacity counts
    none of their GPUs): the taint and the fix, in words; None when that is not why."""
    if pool.total > 0 or pool.nodes > 0:
        return None
    hard = sorted(untolerated_taints(pool, allowed_taint_keys), key=lambda t: (t.key, t.value or "", t.effect))
    if not hard:
        return None
    shown = ", ".join(taint_text(t) for t in hard)
    add = " and ".join(repr(k) for k in dict.fromkeys(t.key for t in hard))
    s, them = ("s", "them") if len(hard) > 1 else ("", "it")
    return (f"its nodes carry the taint{s} {shown}, which this server does not tolerate; an administrator "
            f"can allow {them} with c.GPUSpawner.gpu_tolerated_taint_keys (add {add}) or remove the taint{s}")
