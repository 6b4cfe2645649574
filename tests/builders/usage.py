"""Builders for the GPU-hour tests: holdings at given times, rules, a database session."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from gpuspawner.usage.accounting import Holding
from gpuspawner.usage.budgets import BudgetRule

NOW = datetime(2026, 11, 27, 12, 0, tzinfo=timezone.utc)


def at(text: str) -> datetime:
    """``"2026-11-02 12:48"`` as aware UTC."""
    return datetime.strptime(text, "%Y-%m-%d %H:%M").replace(tzinfo=timezone.utc)


def holding(start: str | datetime, stop: str | datetime | None = None, *, gpus: int = 1, share: float = 1.0,
            weight: float = 1.0, user: str = "alice", server: str = "", pool: str = "a100:nvidia-a100:nvidia.com/gpu",
            product: str | None = "NVIDIA-A100", resource: str = "nvidia.com/gpu") -> Holding:
    start = at(start) if isinstance(start, str) else start
    stop = at(stop) if isinstance(stop, str) else stop
    return Holding(user=user, server=server, pool=pool, product=product, resource=resource, gpus=gpus,
                   share=share, weight=weight, start=start, stop=stop)


def rule(scope: str = "everyone", gpu_hours: float = 20, window: str = "30d") -> BudgetRule:
    return BudgetRule.from_config({"scope": scope, "gpu_hours": gpu_hours, "window": window}, "rule")


def hours(n: float) -> timedelta:
    return timedelta(hours=n)


def session(url: str):
    """A SQLAlchemy session on ``url`` as JupyterHub makes one (its engine, a plain Session)."""
    from sqlalchemy import create_engine
    from sqlalchemy.orm import Session

    return Session(create_engine(url, future=True))
