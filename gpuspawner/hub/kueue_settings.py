"""``KueueSettings``: the settings of queueing GPU servers through Kueue (a mixin of ``GPUSpawnerSettings``)."""

from __future__ import annotations

import asyncio
from traitlets import Float, List, TraitError, validate
from traitlets.config import Configurable

from gpuspawner.hub import parsed_config as frozen
from gpuspawner.hub.parsed_config import freeze, parsed, remember, thaw
from gpuspawner.queue.kube import KueueView
from gpuspawner.queue.rules import QueueRule, parse_rules


class KueueSettings(Configurable):
    """Which pools queue through Kueue, and how long a server may wait in a queue."""

    gpu_kueue_queues = frozen.List(
        config=True,
        help="""
        GPU pools whose servers queue through Kueue (docs/kueue.md): a list of rules, the first that
        matches a server's pool (``match``: a pool id or glob) and profile (``profiles``: slugs or
        globs; absent: every profile) puts its pod in the Kueue LocalQueue ``queue`` of the servers'
        namespace, with the WorkloadPriorityClass ``priority_class`` if given. The pod gets the
        labels ``kueue.x-k8s.io/queue-name`` and ``kueue.x-k8s.io/priority-class``; a full pool with
        a queue can still be chosen, and the user waits in line. Empty (the default): no queueing.

            c.GPUSpawner.gpu_kueue_queues = [
                {"match": "a100:*", "queue": "gpu-a100", "profiles": ["training"], "priority_class": "high"},
                {"match": "a100:*", "queue": "gpu-a100"},
            ]
        """,
    )
    gpu_kueue_queue_wait_limit = Float(
        3600.0,
        config=True,
        help="""
        Seconds a server may wait in its Kueue queue before it is admitted; the spawn then fails with
        a message saying so. While a server is queued, ``start_timeout`` does not run: it counts
        from Kueue's admission. The default is an hour.

            c.GPUSpawner.gpu_kueue_queue_wait_limit = 4 * 3600
        """,
    )

    @validate("gpu_kueue_queues")
    def _validate_kueue_queues(self, proposal):
        value = freeze(proposal.value, "gpu_kueue_queues")
        try:
            rules = parse_rules(thaw(value), "c.GPUSpawner.gpu_kueue_queues")
        except ValueError as e:
            raise TraitError(str(e)) from None
        remember(self, "gpu_kueue_queues", (value,), rules)
        return value

    @validate("gpu_kueue_queue_wait_limit")
    def _validate_queue_wait_limit(self, proposal):
        value = proposal.value
        if not value > 0 or value == float("inf"):
            raise TraitError(f"gpu_kueue_queue_wait_limit must be a positive number of seconds, not {value!r}; "
                             "e.g. c.GPUSpawner.gpu_kueue_queue_wait_limit = 3600")
        return value

    def queue_rules(self) -> tuple[QueueRule, ...]:
        """``gpu_kueue_queues``, parsed when assigned."""
        return parsed(self, "gpu_kueue_queues", ("gpu_kueue_queues",), lambda value: parse_rules(thaw(value)))

    def kueue_view(self, namespace: str | None = None) -> KueueView | None:
        """The shared view of Kueue in ``namespace`` (default: the first one a spawner started),
        started on first use from a running loop; None without queues or outside a loop."""
        if not self.gpu_kueue_queues:
            return None
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return None
        if namespace is None:
            return KueueView.find()
        return KueueView.shared(namespace)
