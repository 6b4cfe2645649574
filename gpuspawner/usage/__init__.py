"""GPU-hours: the ledger of what each GPU server held, budgets per user and group, verdicts at launch.

Pure modules (``clock``, ``windows``, ``weights``, ``budgets``, ``accounting``) and the SQLAlchemy
``store``; the hub glue that records and enforces is ``gpuspawner.hub.usage`` (docs/usage.md).
"""
