"""The rules for one spawn: pure functions over capacity snapshots and user options."""
