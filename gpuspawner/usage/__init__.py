"""GPU-hours: the ledger of what each GPU server held, budgets per user and group, verdicts at launch.
Design notes: docs/usage.md.
"""
