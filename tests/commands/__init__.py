"""Tests of gpuspawner.commands: the command line (builders and the fake NVML: tests/builders/)."""
