"""The bottom layer: Kubernetes conventions every other layer reads the same way.
Design notes: docs/architecture.md.
"""
