"""The kubelet side of Dynamic Resource Allocation: NVIDIA's driver names and a container's devices."""
