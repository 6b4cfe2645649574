"""The test cluster: Kubernetes' own control plane, and the simulated nodes that run on it."""
