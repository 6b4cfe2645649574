"""Tests of gpuspawner.capacity (builders: tests/builders/)."""
