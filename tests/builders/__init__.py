"""The builders the tests share, in one place: ``tests.builders.kubelet`` (pods, containers and
nodes for the simulated kubelet's tests, the real kubectl's environment, finding a pod's
processes on the machine)."""
