"""Stopping idle GPU servers: ``gpuspawner cull``.  Design notes: docs/culling.md."""
