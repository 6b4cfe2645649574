"""Warm GPU images per pool: one pre-pull DaemonSet per pool, with only the images that can run there."""
