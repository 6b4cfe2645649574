"""The bottom layer: Kubernetes conventions every other layer reads the same way.

``times`` (RFC 3339 timestamps as the API writes them, durations as admins type them),
``objects`` (reading API objects and a pod's scheduling state from plain dicts) and
``apierrors`` (a failed API call in plain words, for users, logs and ``doctor``; the
ClusterRole rules the hub needs).  Stdlib only.
"""
