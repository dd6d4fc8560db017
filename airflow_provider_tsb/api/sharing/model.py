"""What the Delta Sharing server shares: shares, schemas, tables, and barriers as table versions.

The mapping (docs/sharing.md), free of HTTP:

* a **share** is a topology, or a barrier domain of several topologies (its name); the share
  ``NAME--read-committed`` is the same share read at READ_COMMITTED (:data:`RC_SUFFIX`);
* a **schema** is a database (``catalog.database.table`` -> schema ``database``);
* a **table** is a registered table of the share's topologies;
* a shared **table version** is a **barrier**: a table reports the newest barrier COMMIT over
  the whole share (REPEATABLE_READ; PRECOMMIT on the read-committed share), and version ``N``
  reads each table AS OF barrier ``N``: every table read at one version is one consistent cut.

Errors are :class:`~airflow_provider_tsb.exceptions.TsbError` subclasses; the routes turn them
into the protocol's ``{"errorCode", "message"}`` answers (:mod:`airflow_provider_tsb.api.sharing.routes`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy.orm import Session

from airflow_provider_tsb.consistency import ConsistencyLevel
from airflow_provider_tsb.exceptions import BadRequestError, UnknownShareError
from airflow_provider_tsb.metastore import registry_reads
from airflow_provider_tsb.metastore.domains import domain_name, members
from airflow_provider_tsb.metastore.records import Resolution, TableInfo, now_ms
from airflow_provider_tsb.metastore.store import MetaStore
from airflow_provider_tsb.metastore.table_states import written_tables

#: suffix of the READ_COMMITTED variant of a share
RC_SUFFIX = "--read-committed"
#: most barriers one ``changes`` request may span
MAX_CHANGE_BARRIERS = 1000


@dataclass(frozen=True)
class Share:
    """A share: ``name`` as asked, its ``topologies`` and the consistency ``level`` it reads at."""

    name: str
    topologies: tuple[str, ...]
    level: ConsistencyLevel


@dataclass(frozen=True)
class SharedTable:
    """One shared table: protocol names (``share``, ``schema``, ``name``) and the tsb table."""

    share: str
    schema: str
    name: str
    info: TableInfo

    @property
    def full_name(self) -> str:
        """The tsb table name ``catalog.database.table``."""
        return self.info.name


def share_names_in(s: Session) -> list[str]:
    """Every share: each topology, and each barrier domain of several topologies, sorted, read
    in the caller's transaction ``s``."""
    names = set(registry_reads.topologies(s))
    for topology in list(names):
        domain = domain_name(s, topology)
        if domain is not None and len(members(s, domain)) > 1:
            names.add(domain)
    return sorted(names)


def resolve_share(store: MetaStore, name: str) -> Share:
    """The share called ``name`` (case-insensitive, as the protocol says).

    Raises:
        UnknownShareError: no topology or barrier domain has this name.
    """
    with store.core.transaction() as s:
        return share_in(s, name)


def share_in(s: Session, name: str) -> Share:
    """:func:`resolve_share` in the caller's read transaction ``s``."""
    topologies = registry_reads.topologies(s)
    level = ConsistencyLevel.REPEATABLE_READ
    base = name
    lowered = {t.lower(): t for t in topologies}
    if name.lower() not in lowered and name.lower().endswith(RC_SUFFIX):
        base, level = name[: -len(RC_SUFFIX)], ConsistencyLevel.READ_COMMITTED
    if base.lower() in lowered:
        topology = lowered[base.lower()]
        domain = domain_name(s, topology)
        return Share(name, tuple(members(s, topology) if domain == topology else (topology,)), level)
    for topology in topologies:
        domain = domain_name(s, topology)
        if domain is not None and domain.lower() == base.lower():
            return Share(name, tuple(members(s, domain)), level)
    raise UnknownShareError(f"share {name!r} does not exist (or you may not read it)")


def shared_tables(store: MetaStore, share: Share) -> list[SharedTable]:
    """The tables of ``share`` that have a WRITTEN barrier, sorted by schema and name.

    A table is shared from its first committed barrier on: a newly registered sink that has
    committed nothing yet would otherwise leave no barrier COMMIT over the share.
    """
    with store.core.transaction() as s:
        return tables_in(s, share)


def tables_in(s: Session, share: Share) -> list[SharedTable]:
    """:func:`shared_tables` in the caller's read transaction ``s``."""
    written: set[str] = set()
    for topology in share.topologies:
        written |= written_tables(s, topology)
    return [t for t in registered_tables(s, share) if t.full_name in written]


def registered_tables(s: Session, share: Share) -> list[SharedTable]:
    """Every registered table of ``share``'s topologies, WRITTEN or not, sorted by schema and
    name, each once (a root table the topologies of a barrier domain share is listed by each),
    in the caller's read transaction ``s``."""
    out: dict[str, SharedTable] = {}
    for topology in share.topologies:
        for info in registry_reads.tables(s, topology):
            _catalog, database, table = info.name.split(".")
            out.setdefault(info.name, SharedTable(share.name, database, table, info))
    return sorted(out.values(), key=lambda t: (t.schema, t.name))


def schemas_of(tables: list[SharedTable]) -> list[str]:
    """The schema names of ``tables``, sorted, without duplicates."""
    return sorted({t.schema for t in tables})


def find_table(tables: list[SharedTable], schema: str, name: str | None = None) -> SharedTable | None:
    """The table ``schema.name`` (case-insensitive); with ``name=None`` any table of ``schema``.

    Raises:
        UnknownShareError: no such schema or table.
    """
    for t in tables:
        if t.schema.lower() == schema.lower() and (name is None or t.name.lower() == name.lower()):
            return t
    what = f"schema {schema!r}" if name is None else f"table {schema}.{name}"
    raise UnknownShareError(f"{what} does not exist in share {tables[0].share if tables else '?'!r}")


def share_version(store: MetaStore, share: Share, tables: list[SharedTable]) -> int:
    """The share's version: the newest barrier COMMIT (PRECOMMIT for the read-committed share)
    over every table of the share.

    Raises:
        InconsistentReadError: no barrier is COMMIT over the share yet.
    """
    res = store.resolution.resolve([t.full_name for t in tables], share.level)
    assert res.barrier is not None
    return res.barrier


def parse_version(raw: object, what: str = "version") -> int:
    """A barrier id from a request (``int`` or digits), at least 1.

    Raises:
        BadRequestError: not an integer, or below 1 (barrier ids start at 1).
    """
    if isinstance(raw, bool) or not isinstance(raw, int | str):
        raise BadRequestError(f"{what} must be an integer barrier id, got {str(raw)[:40]!r}")
    try:
        value = int(raw)
    except ValueError:
        raise BadRequestError(f"{what} must be an integer barrier id, got {str(raw)[:40]!r}") from None
    if value < 1 or value > 2**62:
        raise BadRequestError(f"{what}={value} is not a barrier: shared table versions are barrier ids, from 1")
    return value


def parse_timestamp(raw: object) -> int:
    """Epoch ms of a protocol timestamp (ISO 8601 in UTC, e.g. ``2022-01-01T00:00:00Z``).

    Raises:
        BadRequestError: not such a timestamp.
    """
    try:
        parsed = datetime.fromisoformat(str(raw))
    except ValueError:
        raise BadRequestError(f"timestamp {str(raw)[:40]!r} is not ISO 8601 UTC like 2022-01-01T00:00:00Z") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return (parsed - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)  # floored before 1970 too


def barrier_at(store: MetaStore, share: Share, ts_ms: int, newest: int) -> int:
    """The newest barrier of the share at or before ``ts_ms`` (barrier timestamp ``ts_ms``) and at
    most ``newest`` (the share's version, so it is COMMIT over the share).

    Raises:
        BadRequestError: every barrier is later than ``ts_ms`` (names the first barrier's time).
    """
    topology = share.topologies[0]
    before = newest + 1
    first_ts = None
    while True:
        page = store.barriers.list(topology, limit=500, before=before)
        for b in page:
            if b.ts_ms <= ts_ms:
                return b.barrier
            first_ts = b.ts_ms
        if len(page) < 500:
            break
        before = page[-1].barrier
    when = datetime.fromtimestamp(first_ts / 1000, UTC).isoformat() if first_ts is not None else "none"
    raise BadRequestError(f"no barrier of share {share.name!r} is at or before that timestamp (first barrier: {when})")


def barrier_from(store: MetaStore, share: Share, ts_ms: int, newest: int) -> int:
    """The first barrier of the share at or after ``ts_ms`` (and at most ``newest``).

    Raises:
        BadRequestError: no barrier up to ``newest`` is that late.
    """
    after = None
    while True:
        page = store.barriers.list(share.topologies[0], limit=500, after=after, ascending=True)
        for b in page:
            if b.barrier > newest:
                break
            if b.ts_ms >= ts_ms:
                return b.barrier
        if len(page) < 500 or page[-1].barrier >= newest:
            break
        after = page[-1].barrier
    raise BadRequestError(f"no barrier of share {share.name!r} up to version {newest} is at or after that timestamp")


def resolve_table(
    store: MetaStore, share: Share, table: SharedTable, barrier: int, *, lease_seconds: float | None,
    holder: str | None = None,
) -> Resolution:
    """What to read of ``table`` at share version ``barrier``, leased for ``lease_seconds`` by
    ``holder`` (default ``delta-sharing SHARE``).

    At REPEATABLE_READ: AS OF ``barrier``. On the read-committed share, the share's own version
    is its newest PRECOMMIT barrier, resolved over every table of the share (so the staged files
    of a PROCESSED table are served); an older version is AS OF (COMMIT) as on the plain share.

    Raises:
        UnknownBarrierError, InconsistentReadError, ExpiredVersionError: as
        :meth:`~airflow_provider_tsb.metastore.resolution.ResolutionManager.resolve`.
    """
    holder = holder or f"delta-sharing {share.name}"
    if share.level is ConsistencyLevel.READ_COMMITTED:
        names = [t.full_name for t in shared_tables(store, share)]
        res = store.resolution.resolve(names, share.level, lease_seconds=lease_seconds, lease_holder=holder)
        if res.barrier == barrier:
            return res
    return store.resolution.resolve(
        [table.full_name], ConsistencyLevel.REPEATABLE_READ, as_of=barrier, lease_seconds=lease_seconds,
        lease_holder=holder,
    )


@dataclass(frozen=True)
class BarrierSteps:
    """The Delta versions of one table at barriers ``first - 1`` .. ``last`` (``changes``).

    Attributes:
        location: the table root.
        versions: ``{barrier: Delta version}``; barrier ``0`` (before the first) maps to ``None``.
        ts_ms: ``{barrier: barrier timestamp, epoch ms}`` for ``first`` .. ``last``.
        lease_expires_ms: when the leases on the versions end, or the URLs expire when none
            was taken (epoch ms).
    """

    location: str
    versions: dict[int, int | None]
    ts_ms: dict[int, int]
    lease_expires_ms: int


def barrier_versions(store: MetaStore, table: SharedTable, first: int, last: int, seconds: float, *,
                     lease: bool = True, holder: str | None = None) -> BarrierSteps:
    """Resolve ``table`` AS OF every barrier ``first - 1`` .. ``last``; with ``lease`` (a reader
    with the lease right), lease exactly the Delta versions served (one lease each, in one
    transaction: not the versions between them) for ``seconds``, held by ``holder`` within its
    principal's budget (:func:`~airflow_provider_tsb.api.lease_budget.check_lease_budget`).

    Raises:
        BadRequestError: ``first > last`` or more than :data:`MAX_CHANGE_BARRIERS` barriers.
        LeaseLimitError: the lease would pass ``holder``'s principal's limit.
        UnknownBarrierError, InconsistentReadError, ExpiredVersionError: a barrier of the range
            cannot be read AS OF (never generated, not WRITTEN in the table, or expired).
        DeltaLogIntegrityError: a version of the range does not give the live files its
            barrier's commit recorded (:func:`~airflow_provider_tsb.read.version_reads.verify_served`).
    """
    from airflow_provider_tsb.read.version_reads import verify_served

    if first > last:
        raise BadRequestError(f"startingVersion {first} is after endingVersion {last}")
    if last - first + 1 > MAX_CHANGE_BARRIERS:
        raise BadRequestError(f"a changes request spans at most {MAX_CHANGE_BARRIERS} barriers; "
                              f"{first}..{last} is {last - first + 1}: read it in parts")
    versions: dict[int, int | None] = {}
    for k in range(max(first - 1, 0), last + 1):
        if k == 0:
            versions[0] = None
            continue
        resolved = store.resolution.resolve([table.full_name], as_of=k).tables[table.full_name]
        verify_served(resolved)  # as a query verifies what it serves
        versions[k] = resolved.version
    ts = {k: store.barriers.get(table.info.topology, k).ts_ms for k in range(first, last + 1)}
    pinned = sorted({v for v in versions.values() if v is not None})
    expires = now_ms() + int(seconds * 1000)
    if pinned and lease:
        if holder is not None:
            from airflow_provider_tsb.api.lease_budget import check_lease_budget

            check_lease_budget(store, holder, len(pinned))
        expires = lease_each(store, table.full_name, pinned, seconds, holder or f"delta-sharing changes {table.share}")
    return BarrierSteps(table.info.location, versions, ts, expires)


def lease_each(store: MetaStore, table: str, versions: list[int], seconds: float, holder: str) -> int:
    """Lease each of ``versions`` of ``table`` for ``seconds`` (one lease per version, one
    transaction); returns when they end (epoch ms).

    Raises:
        ExpiredVersionError: a version is already expired.
    """
    from airflow_provider_tsb.metastore.base import table_id_of
    from airflow_provider_tsb.metastore.leases import lease_versions

    expires = now_ms()
    with store.core.transaction(write=True) as s:
        table_id = table_id_of(s, table)
        for version in versions:
            _lease, expires = lease_versions(s, {table_id: version}, seconds, holder)
    return expires
