"""The core every metastore manager shares (:class:`MetastoreCore`) and lookups taking a session."""

from __future__ import annotations

import operator
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from sqlalchemy import Engine, select
from sqlalchemy.exc import DataError, OperationalError, ProgrammingError
from sqlalchemy.orm import Session

from airflow_provider_tsb.exceptions import MetastoreError, OutOfRangeError, UnknownTableError
from airflow_provider_tsb.metastore.engine import transaction
from airflow_provider_tsb.metastore.models import TableBarrierRow, TableRow
from airflow_provider_tsb.metastore.records import TableState
from airflow_provider_tsb.names import normalize_table_name


class MetastoreCore:
    """What every manager of the metastore shares: the engine and its guarded transactions.

    Built once per :class:`~airflow_provider_tsb.metastore.store.MetaStore` and passed to each
    manager's constructor (docs/design.md "Metastore"). Holds no state of its own beyond the
    engine: managers built on one core see the same database.

    Args:
        engine: the SQLAlchemy engine of the metastore.

    Attributes:
        engine: the SQLAlchemy engine of the metastore.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._joined = threading.local()

    def transaction(self, write: bool = False) -> AbstractContextManager[Session]:
        """A session in one transaction, committed on exit (rolled back on an error); inside
        :meth:`one_transaction` (same thread), that transaction's session instead.

        Args:
            write: take the write lock up front (SQLite ``BEGIN IMMEDIATE``; on PostgreSQL a
                plain transaction).

        Raises:
            MetastoreError: the schema is missing (run ``tsb db migrate``) or the database failed.
            OutOfRangeError: a number does not fit a ``BIGINT`` column.
        """
        joined: Session | None = getattr(self._joined, "session", None)
        if joined is not None:
            return _joined_session(joined)
        return _GuardedTransaction(self.engine, write)

    @property
    def in_one_transaction(self) -> bool:
        """True inside :meth:`one_transaction` on this thread."""
        return getattr(self._joined, "session", None) is not None

    @contextmanager
    def one_transaction(self) -> Iterator[None]:
        """One write transaction that every :meth:`transaction` this thread opens inside joins:
        several managers' writes (a barrier's WRITTEN, its job's ``succeeded`` record, the next
        barrier's start) commit together, or not at all. Already inside one: joins it.

        Raises:
            MetastoreError, OutOfRangeError: as :meth:`transaction`; any error of the body (the
                transaction is rolled back).
        """
        if self.in_one_transaction:
            yield
            return
        with self.transaction(write=True) as session:
            self._joined.session = session
            try:
                yield
            finally:
                self._joined.session = None

    def shown_url(self) -> str:
        """The metastore URL with its password hidden (for messages)."""
        return self.engine.url.render_as_string(hide_password=True)


def table_id_of(s: Session, table: str) -> int:
    """Id of registered table ``table`` (any spelling :func:`normalize_table_name` accepts).

    Raises:
        UnknownTableError: the table is not registered.
    """
    canonical = normalize_table_name(table)
    found = s.scalar(select(TableRow.id).where(TableRow.name == canonical))
    if found is None:
        raise UnknownTableError(
            f"table {canonical!r} is not registered in the tsb metastore; check the name or "
            "register the topology that declares it"
        )
    return found


@contextmanager
def _joined_session(session: Session) -> Iterator[Session]:
    """The session of the enclosing :meth:`MetastoreCore.one_transaction`, flushed on exit."""
    yield session
    session.flush()


class _GuardedTransaction(AbstractContextManager[Session]):
    """:func:`transaction` that turns a missing schema into an actionable MetastoreError."""

    def __init__(self, engine: Engine, write: bool) -> None:
        self._cm = transaction(engine, write=write)
        self._engine = engine

    def __enter__(self) -> Session:
        try:
            return self._cm.__enter__()
        except OperationalError as exc:
            raise _metastore_error(self._engine, exc) from exc

    def __exit__(self, *exc_info: Any) -> bool | None:
        try:
            suppressed = self._cm.__exit__(*exc_info)
        except (OperationalError, ProgrammingError) as exc:
            raise _metastore_error(self._engine, exc) from exc
        except (DataError, OverflowError) as exc:
            raise _range_error(exc) from exc
        if isinstance(exc_info[1], OperationalError | ProgrammingError):
            raise _metastore_error(self._engine, exc_info[1]) from exc_info[1]
        if isinstance(exc_info[1], DataError | OverflowError):  # SQLite: OverflowError; PostgreSQL: DataError
            raise _range_error(exc_info[1]) from exc_info[1]
        return suppressed


#: largest integer a metastore column holds (``BIGINT``)
MAX_INT = 2**63 - 1
#: smallest: barrier timestamps span the whole signed range (event time before 1970 included)
MIN_INT = -(2**63)


def _range_error(exc: Exception) -> OutOfRangeError:
    text = str(getattr(exc, "orig", exc)).strip().splitlines()[0]
    return OutOfRangeError(
        f"a number given to the tsb metastore is out of range ({text}): barrier ids, Delta versions and limits "
        f"are integers from 0 to {MAX_INT}, epoch-millisecond times from {MIN_INT} to {MAX_INT}"
    )


def checked_int(value: Any, what: str, *, minimum: int = 0) -> int:
    """``value`` as an int in ``minimum..MAX_INT`` (bools, NaN, infinities and fractions refused).

    Raises:
        OutOfRangeError: names ``what`` and the value.
    """
    number: int | None = None
    if not isinstance(value, bool):
        try:
            number = operator.index(value)
        except TypeError:
            if isinstance(value, float) and value.is_integer():
                number = int(value)
    if number is None or not minimum <= number <= MAX_INT:
        raise OutOfRangeError(f"{what} must be an integer from {minimum} to {MAX_INT}, got {value!r}")
    return number


def _metastore_error(engine: Engine, exc: Exception) -> MetastoreError:
    shown = engine.url.render_as_string(hide_password=True)
    text = str(getattr(exc, "orig", exc))
    if "no such table" in text or "does not exist" in text and "relation" in text:
        return MetastoreError(
            f"the tsb metastore at {shown} has no schema (or an old one): run `tsb db migrate` "
            f"(database said: {text.strip()})"
        )
    return MetastoreError(f"the tsb metastore at {shown} failed: {text.strip()}")


def table_state_of(name: str, row: TableBarrierRow) -> TableState:
    return TableState(
        table=name,
        barrier=row.barrier_id,
        state=row.state,
        version=row.version,
        job_id=row.job_id,
        processed_at_ms=row.processed_at_ms,
        written_at_ms=row.written_at_ms,
        manifest=row.manifest,
        inputs=row.inputs,
        file_count=row.file_count,
        size_bytes=row.size_bytes,
    )
