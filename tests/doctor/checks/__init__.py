"""Tests of gpuspawner.doctor.checks: one module per check (builders: tests/builders/)."""
