"""Tests of gpuspawner.cuda (builders and the fake NVML: tests/builders/)."""
