"""gpuspawner's tables in the hub's database (SQLAlchemy Core, SQLite and PostgreSQL) and their schema
versions: the ledger of GPU holdings, written through the hub's own session."""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import (
    Column,
    DateTime,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    and_,
    func,
    insert,
    inspect,
    or_,
    select,
    update,
)
from sqlalchemy.engine import Connection

from gpuspawner.usage.accounting import Holding
from gpuspawner.usage.clock import utc

log = logging.getLogger(__name__)

COMPONENT = "gpu-holdings"
#: the schema this gpuspawner writes; MIGRATIONS[n] brings a database from n - 1 to n
SCHEMA_VERSION = 1

metadata = MetaData()

schema_versions = Table(
    "gpuspawner_schema",
    metadata,
    Column("component", String(64), primary_key=True),
    Column("version", Integer, nullable=False),
)

holdings = Table(
    "gpuspawner_gpu_holdings",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("user_name", String(255), nullable=False),
    Column("server_name", String(255), nullable=False),
    Column("pool", String(255), nullable=False),
    Column("product", String(255)),
    Column("resource", String(255), nullable=False),
    Column("gpus", Integer, nullable=False),
    Column("share", Float, nullable=False),
    Column("weight", Float, nullable=False),
    Column("namespace", String(255)),
    Column("pod_name", String(255)),
    Column("pod_uid", String(64)),
    Column("start", DateTime, nullable=False),  # naive UTC, as JupyterHub's own tables keep times
    Column("stop", DateTime),
    Column("stop_reason", String(64)),
    Index("ix_gpuspawner_gpu_holdings_user_stop", "user_name", "stop"),
    Index("ix_gpuspawner_gpu_holdings_stop", "stop"),
    Index("ix_gpuspawner_gpu_holdings_pod_uid", "pod_uid"),
)

MIGRATIONS: dict[int, Callable[[Connection], None]] = {}


class SchemaError(RuntimeError):
    """The database holds a schema this gpuspawner cannot use."""


def ensure_schema(conn: Connection) -> int:
    """Create gpuspawner's tables, or bring them to :data:`SCHEMA_VERSION`, in ``conn``'s transaction.
    Returns the version found (0: none)."""
    names = set(inspect(conn).get_table_names())
    if schema_versions.name not in names:
        schema_versions.create(conn)
    found = conn.execute(select(schema_versions.c.version).where(schema_versions.c.component == COMPONENT)).scalar()
    if found is None:
        holdings.create(conn, checkfirst=True)
        conn.execute(insert(schema_versions).values(component=COMPONENT, version=SCHEMA_VERSION))
        return 0
    if found > SCHEMA_VERSION:
        raise SchemaError(
            f"the hub's database holds gpuspawner's GPU-hour tables at schema {found}, written by a newer "
            f"gpuspawner than this one (schema {SCHEMA_VERSION}): upgrade gpuspawner"
        )
    for version in range(found + 1, SCHEMA_VERSION + 1):
        MIGRATIONS[version](conn)
        conn.execute(update(schema_versions).where(schema_versions.c.component == COMPONENT).values(version=version))
    return found


def _naive(t: datetime) -> datetime:
    return t.astimezone(timezone.utc).replace(tzinfo=None)


def _holding(row: Any) -> Holding:
    return Holding(
        user=row.user_name, server=row.server_name, pool=row.pool, product=row.product, resource=row.resource,
        gpus=row.gpus, share=row.share, weight=row.weight, start=utc(row.start),
        stop=utc(row.stop) if row.stop is not None else None, id=row.id,
    )


# databases whose schema this process has checked (by engine), so it is checked once per hub
_ready: set[int] = set()
_ready_lock = threading.Lock()

#: how long a user's holdings read for a page may be shown again without a new read, when this
#: process has written nothing since (a write through any UsageStore here makes them stale at once;
#: this bounds what another process, or a hand-made change to the table, takes to be seen)
RECENT_MAX_AGE = 30.0
#: the users whose recent holdings are kept (the least recently read are forgotten first)
RECENT_USERS = 1024
# every write through a UsageStore of this process (and every database it starts to use) moves this on
_writes = 0
# (engine id, user) -> (_writes then, monotonic time of the read, its ``since``, the holdings)
_recent: OrderedDict[tuple[int, str], tuple[int, float, datetime | None, tuple[Holding, ...]]] = OrderedDict()


def _written() -> None:
    global _writes
    _writes += 1


def _since_filter(found: Iterable[Holding], since: datetime | None) -> list[Holding]:
    # the read's own rule (for_user): open, or stopped after ``since``
    return [h for h in found if since is None or h.stop is None or h.stop > since]


class UsageStore:
    """The ledger, read and written through ``db`` (a SQLAlchemy ``Session``: the hub's own, so its
    writes go through the connection and transactions JupyterHub uses). Each write commits."""

    def __init__(self, db: Any):
        self.db = db

    def ready(self) -> "UsageStore":
        engine = self.db.get_bind()
        key = id(engine)
        with _ready_lock:
            if key in _ready:
                return self
            try:
                ensure_schema(self.db.connection())
                self.db.commit()
            except Exception:
                self.db.rollback()
                raise
            _ready.add(key)
            _written()  # an engine at a forgotten engine's address reads nothing of the old one's
        return self

    def _write(self, statement: Any) -> Any:
        try:
            result = self.db.execute(statement)
            self.db.commit()
            return result
        except Exception:
            self.db.rollback()
            raise
        finally:
            _written()

    def open(self, h: Holding, *, namespace: str | None = None, pod_name: str | None = None,
             pod_uid: str | None = None) -> int:
        """Record a holding as it starts (or a finished one, with its stop); a pod already recorded (by
        its uid, open or closed) is never recorded twice. Returns the holding's id."""
        if pod_uid:
            found = self.db.execute(
                select(holdings.c.id).where(holdings.c.pod_uid == pod_uid).order_by(holdings.c.id)
            ).scalar()
            if found is not None:
                return found
        result = self._write(insert(holdings).values(
            user_name=h.user, server_name=h.server, pool=h.pool, product=h.product, resource=h.resource,
            gpus=h.gpus, share=h.share, weight=h.weight, namespace=namespace, pod_name=pod_name, pod_uid=pod_uid,
            start=_naive(h.start), stop=_naive(max(h.stop, h.start)) if h.stop is not None else None,
        ))
        return result.inserted_primary_key[0]

    def close(self, holding_id: int, stop: datetime, reason: str) -> bool:
        """Close one holding at ``stop`` (never before its start); False when it was closed already."""
        row = self.db.execute(select(holdings.c.start).where(holdings.c.id == holding_id)).first()
        if row is None:
            return False
        end = max(_naive(stop), row.start)
        result = self._write(
            update(holdings).where(and_(holdings.c.id == holding_id, holdings.c.stop.is_(None)))
            .values(stop=end, stop_reason=reason[:64])
        )
        return result.rowcount == 1

    def has_pod(self, pod_uid: str) -> bool:
        """Whether the pod ``pod_uid`` has a holding (open or closed)."""
        return self.db.execute(select(holdings.c.id).where(holdings.c.pod_uid == pod_uid).limit(1)).first() is not None

    def open_for_server(self, user: str, server: str) -> list[tuple[int, str | None, str | None, str | None]]:
        """The open holdings of one server: (id, namespace, pod name, pod uid)."""
        rows = self.db.execute(
            select(holdings.c.id, holdings.c.namespace, holdings.c.pod_name, holdings.c.pod_uid).where(and_(
                holdings.c.user_name == user, holdings.c.server_name == server, holdings.c.stop.is_(None)))
        ).all()
        return [tuple(r) for r in rows]

    def open_holdings(self) -> list[tuple[Holding, str | None, str | None, str | None]]:
        """Every open holding with its pod: (holding, namespace, pod name, pod uid)."""
        rows = self.db.execute(select(holdings).where(holdings.c.stop.is_(None)).order_by(holdings.c.id)).all()
        return [(_holding(r), r.namespace, r.pod_name, r.pod_uid) for r in rows]

    def for_user(self, user: str, since: datetime | None) -> list[Holding]:
        """The user's holdings that were held at some time after ``since`` (None: all)."""
        q = select(holdings).where(holdings.c.user_name == user)
        if since is not None:
            q = q.where(or_(holdings.c.stop.is_(None), holdings.c.stop > _naive(since)))
        return [_holding(r) for r in self.db.execute(q.order_by(holdings.c.start)).all()]

    def recent_for_user(self, user: str, since: datetime | None, max_age: float = RECENT_MAX_AGE) -> list[Holding]:
        """:meth:`for_user` for a page (the spawn page's and home page's GPU-hours, on every view):
        the holdings read for an earlier view when this process has written none since, that read
        was at most ``max_age`` seconds ago and reached back at least as far as ``since``. A launch's
        budget check reads :meth:`for_user` itself."""
        key = (id(self.db.get_bind()), user)
        now = time.monotonic()
        hit = _recent.get(key)
        if hit is not None:
            writes, read_at, read_since, found = hit
            if (writes == _writes and now - read_at <= max_age
                    and (read_since is None or (since is not None and read_since <= since))):
                _recent.move_to_end(key)
                return _since_filter(found, since)
        writes = _writes
        found = tuple(self.for_user(user, since))
        _recent[key] = (writes, now, since, found)
        _recent.move_to_end(key)
        while len(_recent) > RECENT_USERS:
            _recent.popitem(last=False)
        return list(found)

    def for_users(self, users: Iterable[str] | None, since: datetime | None) -> list[Holding]:
        """The holdings of ``users`` (None: everyone's) held at some time after ``since``."""
        q = select(holdings)
        if users is not None:
            names = sorted(set(users))
            if not names:
                return []
            q = q.where(holdings.c.user_name.in_(names))
        if since is not None:
            q = q.where(or_(holdings.c.stop.is_(None), holdings.c.stop > _naive(since)))
        return [_holding(r) for r in self.db.execute(q.order_by(holdings.c.user_name, holdings.c.start)).all()]

    def for_ids(self, ids: Iterable[int]) -> list[Holding]:
        ids = list(ids)
        if not ids:
            return []
        return [_holding(r) for r in self.db.execute(select(holdings).where(holdings.c.id.in_(ids))).all()]

    def count_open(self) -> int:
        return self.db.execute(select(func.count()).select_from(holdings).where(holdings.c.stop.is_(None))).scalar()
