"""The simulated Kubernetes GPU cluster: API server, scheduler, controllers, kubelet.
Design notes: docs/simulated-cluster.md.
"""
