"""Tests of gpuspawner.spawn: the pure rules of one spawn (builders: tests/builders/)."""
