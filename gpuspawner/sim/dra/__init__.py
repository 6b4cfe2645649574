"""Dynamic Resource Allocation (``resource.k8s.io/v1``) in the simulated cluster.
Design notes: docs/simulated-cluster.md.
"""
