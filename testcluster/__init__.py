"""The test cluster: Kubernetes' own control plane (the Go program ``gpuspawner-cluster``) and a
launcher that starts and stops it.  Not part of the ``gpuspawner`` package a hub installs."""

from testcluster.launcher import ControlPlane, ControlPlaneError, find_binary

__all__ = ["ControlPlane", "ControlPlaneError", "find_binary"]
