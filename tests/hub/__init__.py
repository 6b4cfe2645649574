"""Tests of gpuspawner.hub: the JupyterHub glue (builders: tests/builders/)."""
