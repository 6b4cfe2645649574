"""Fault scenarios, each a script that exits non-zero when an invariant breaks.

* ``api_outage.py``: the Kubernetes API server unreachable for minutes, then back;
* ``stalled_watch.py``: every watch stalled while lists answer, with spawns cancelled while pending
  and a pod no server owns; nothing admitted on stale figures, no pod left behind;
* ``watch_fuzz.py``: random watch events, dropped watches, 410 Gone and restarts; incremental counts
  against a recount from scratch;
* ``concurrent_spawns.py``: 64 concurrent REST spawns against a pool with fewer free GPUs;
* ``hostile_bodies.py``: generated hostile REST bodies through the real hub.

Run from the repository root, e.g. ``python -m scripts.faults.watch_fuzz --events 1000000``.
They talk to loopback only (the demo's hub on Kubernetes' own control plane behind the fault proxy;
``watch_fuzz --sim`` the simulated API server) and are bounded in time.
What they share (the report, the demo hub they run under, the exit) is ``scenario.py``.
The tests (``tests/capacity/test_faults.py``, ``tests/e2e/test_faults.py``,
``tests/e2e/test_stalled_watch.py``) run the same code
with smaller sizes.
"""
