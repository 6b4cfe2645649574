"""Tests of gpuspawner.kube: the Kubernetes conventions at the bottom of the layers."""
