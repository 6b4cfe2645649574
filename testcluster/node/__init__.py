"""What a simulated node gets from outside Kubernetes: its kubelet, fake GPUs, DCGM and its exporter,
the DRA kubelet side, and the cluster-file loader.  Docs: docs/test-cluster.md."""
