"""Per (table, barrier) states PROCESSED and WRITTEN (docs/design.md "Vocabulary").

A PROCESSED row serves its staged-file manifest to READ_COMMITTED readers; a manifest no
longer served is withdrawn, and its attempt directories are deleted by the writer job after
the staging grace period (:mod:`airflow_provider_tsb.metastore.withdrawn`,
:meth:`TableStateManager.due_withdrawn_staging`).
"""

from __future__ import annotations

import operator
import posixpath
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import and_, delete, exists, func, select
from sqlalchemy.orm import Session

from airflow_provider_tsb.exceptions import OutOfRangeError, TopologyError, UnknownBarrierError
from airflow_provider_tsb.metastore.barrier_history import check_version_in_log
from airflow_provider_tsb.metastore.base import MetastoreCore, checked_int, table_id_of, table_state_of
from airflow_provider_tsb.metastore.job_runs import check_fencing_token
from airflow_provider_tsb.metastore.models import (
    BarrierRow,
    TableBarrierRow,
    TableRow,
    WithdrawnStagingRow,
)
from airflow_provider_tsb.metastore.records import (
    BarrierState,
    TableState,
    now_ms,
)
from airflow_provider_tsb.metastore.withdrawn import due_rows, has_withdrawn, manifest_dirs, withdraw
from airflow_provider_tsb.names import normalize_table_name

if TYPE_CHECKING:
    from airflow_provider_tsb.delta.integrity import TableFigures


class TableStateManager:
    """What each table holds of each barrier: PROCESSED (staged files) or WRITTEN (a Delta version)."""

    def __init__(self, core: MetastoreCore) -> None:
        self._core = core

    def record_processed(
        self,
        table: str,
        barrier: int,
        job_id: str,
        manifest: Mapping[str, Any],
        inputs: Mapping[str, int] | None = None,
        *,
        fencing_token: int | None = None,
    ) -> None:
        """Mark barrier ``barrier`` PROCESSED in ``table`` with its staged-file manifest.

        A WRITTEN row is never downgraded (a replay after the commit is a no-op). A manifest
        replacing another withdraws the older one (its files stay for the staging grace period).

        Args:
            fencing_token: the reporting attempt's token (``store.job_runs.begin_attempt``); ``None``
                skips the fencing check (callers outside a job run).

        Raises:
            FencedError: a newer attempt of ``job_id`` started (checked under the same lock).
            OutOfRangeError: ``barrier`` is not a barrier id (an integer from 1 to 2**63-1).
        """
        barrier = checked_int(barrier, f"table {table!r}: the barrier PROCESSED", minimum=1)
        ts = now_ms()
        with self._core.transaction(write=True) as s:
            if fencing_token is not None:
                check_fencing_token(s, job_id, fencing_token, barrier, f"report {table} PROCESSED")
            table_id = table_id_of(s, table)
            row = s.get(TableBarrierRow, (table_id, barrier))
            if row is None:
                s.add(
                    TableBarrierRow(
                        table_id=table_id, barrier_id=barrier, state=BarrierState.PROCESSED, version=None,
                        job_id=job_id, processed_at_ms=ts, manifest=dict(manifest),
                        inputs=dict(inputs or {}),
                    )
                )
            elif row.state == BarrierState.PROCESSED:
                withdraw(s, table_id, row, ts, keep=manifest_dirs(manifest))
                row.manifest = dict(manifest)
                row.processed_at_ms = ts
                row.job_id = job_id
                row.inputs = dict(inputs or {})

    def record_written(
        self,
        table: str,
        barrier: int,
        version: int,
        job_id: str | None = None,
        *,
        inputs: Mapping[str, int] | None = None,
        written_at_ms: int | None = None,
        attempt: str | None = None,
        fencing_token: int | None = None,
        figures: TableFigures | None = None,
    ) -> bool:
        """Mark barrier ``barrier`` WRITTEN in ``table`` at Delta ``version``. Idempotent.

        The live-file figures of ``version`` are recorded with it, for readers to verify:
        ``figures``, else the commit's ``tsb.files`` / ``tsb.bytes`` (one log-file read), else (a
        commit by Delta's own writer, which records none) the version's live files read from the
        log now.

        Args:
            attempt: the attempt id committed at ``version`` (the Delta tag's ``tsb.attempt``):
                its staged directory is now the table's and is not withdrawn with the manifest.
            fencing_token: as :meth:`record_processed` (requires ``job_id``).
            figures: the live data files at ``version`` and their bytes (default: the commit's).

        Returns:
            Whether withdrawn attempt directories of ``table`` are waiting for deletion (due or
            not; :meth:`due_withdrawn_staging`), read in the same transaction, so that a writer
            asks for the due ones only when there are any.

        Raises:
            FencedError: a newer attempt of ``job_id`` started.
            TopologyError: the barrier is WRITTEN already at another version (the Delta log
                and the metastore disagree; rebuild the index from the log).
            UnknownBarrierError: ``barrier`` was never generated for the table's topology.
            DeltaLogError: the Delta table exists and its log has no ``version``.
            ValueError: ``version`` is negative.
        """
        version = _checked_version(table, barrier, version)
        ts = written_at_ms or now_ms()
        with self._core.transaction(write=True) as s:
            if fencing_token is not None and job_id is not None:
                check_fencing_token(s, job_id, fencing_token, barrier, f"report {table} WRITTEN")
            table_id, location, topology = _table_row(s, table)
            _check_generated(s, table, topology, barrier)
            if check_version_in_log(normalize_table_name(table), location, version, barrier) and figures is None:
                from airflow_provider_tsb.delta import integrity, log  # deltalake: not at DAG parse time
                from airflow_provider_tsb.delta.conventions import written_by_delta
                info = log.commit_info(location, version)
                figures = integrity.recorded_figures(info)
                if figures is None and written_by_delta(info):  # its commit can hold no figures: read them now
                    figures = integrity.live_figures(location, version)
            row = _written_row(s, table, table_id, barrier, version, ts, job_id, inputs, attempt)
            if figures is not None and row.file_count is None:
                row.file_count, row.size_bytes = figures.files, figures.size_bytes
            s.flush()
            return has_withdrawn(s, table_id)

    def clear_processed(self, table: str, barrier: int | None = None) -> int:
        """Forget PROCESSED (uncommitted) rows of ``table`` (all, or one barrier) after a failure.

        Returns:
            Number of rows removed.
        """
        with self._core.transaction(write=True) as s:
            table_id = table_id_of(s, table)
            query = select(TableBarrierRow).where(
                TableBarrierRow.table_id == table_id, TableBarrierRow.state == BarrierState.PROCESSED
            )
            if barrier is not None:
                query = query.where(TableBarrierRow.barrier_id == barrier)
            rows = s.scalars(query).all()
            ts = now_ms()
            for row in rows:
                withdraw(s, table_id, row, ts)
                s.delete(row)
            return len(rows)

    def rollback(self, table: str, to_barrier: int) -> int:
        """Forget every state of ``table`` above ``to_barrier`` (after a Delta restore).

        Returns:
            Number of rows removed.

        Raises:
            OutOfRangeError: ``to_barrier`` is not an integer from 0 to 2**63-1 (0: forget every state).
        """
        to_barrier = checked_int(to_barrier, f"table {table!r}: to_barrier")
        with self._core.transaction(write=True) as s:
            table_id = table_id_of(s, table)
            ts = now_ms()
            for row in s.scalars(
                select(TableBarrierRow).where(
                    TableBarrierRow.table_id == table_id, TableBarrierRow.barrier_id > to_barrier,
                    TableBarrierRow.state == BarrierState.PROCESSED,
                )
            ):
                withdraw(s, table_id, row, ts)
            return s.execute(
                delete(TableBarrierRow).where(
                    TableBarrierRow.table_id == table_id, TableBarrierRow.barrier_id > to_barrier
                )
            ).rowcount or 0

    # ------------------------------------------------------------------ staged attempt directories
    def held_staging(self, table: str, barrier: int, grace_s: float) -> set[str]:
        """Attempt directories of (``table``, ``barrier``) a READ_COMMITTED reader may read.

        Those of the PROCESSED manifest served now, and those withdrawn less than ``grace_s``
        seconds ago or pinned by a lease taken before their withdrawal (paths relative to the
        table root). Every other attempt directory of the barrier is an orphan no reader holds.
        """
        with self._core.transaction() as s:
            table_id = table_id_of(s, table)
            row = s.get(TableBarrierRow, (table_id, barrier))
            held = manifest_dirs(row.manifest) if row is not None and row.state == BarrierState.PROCESSED else set()
            withdrawn = s.scalars(
                select(WithdrawnStagingRow).where(
                    WithdrawnStagingRow.table_id == table_id, WithdrawnStagingRow.barrier_id == barrier
                )
            ).all()
            due = {r.path for r in due_rows(s, table_id, grace_s, None)}
            return held | {r.path for r in withdrawn if r.path not in due}

    def due_withdrawn_staging(self, table: str, grace_s: float, limit: int = 100) -> list[tuple[str, int]]:
        """Withdrawn attempt directories of ``table`` no reader can hold any more.

        Due: withdrawn more than ``grace_s`` seconds ago, and no live lease created before the
        withdrawal pins a version of ``table`` (a READ_COMMITTED reader with ``lease_seconds``
        keeps them as long as its lease).

        Returns:
            [(path relative to the table root, barrier id)], oldest withdrawal first.
        """
        with self._core.transaction() as s:
            table_id = table_id_of(s, table)
            return [(r.path, int(r.barrier_id)) for r in due_rows(s, table_id, grace_s, limit)]

    def forget_withdrawn_staging(self, table: str, paths: Sequence[str]) -> int:
        """Drop the records of withdrawn directories once deleted (or kept as committed)."""
        if not paths:
            return 0
        with self._core.transaction(write=True) as s:
            table_id = table_id_of(s, table)
            return s.execute(
                delete(WithdrawnStagingRow).where(
                    WithdrawnStagingRow.table_id == table_id, WithdrawnStagingRow.path.in_(list(paths))
                )
            ).rowcount or 0

    def get(self, table: str, barrier: int) -> TableState | None:
        """State of ``barrier`` in ``table``, or ``None`` if neither PROCESSED nor WRITTEN."""
        with self._core.transaction() as s:
            table_id = table_id_of(s, table)
            row = s.get(TableBarrierRow, (table_id, barrier))
            return table_state_of(normalize_table_name(table), row) if row is not None else None

    def version_at(self, table: str, barrier: int) -> int | None:
        """Delta version of ``table`` WRITTEN at ``barrier`` (``None`` if not WRITTEN). One seek."""
        state = self.get(table, barrier)
        return state.version if state is not None and state.state == BarrierState.WRITTEN else None

    def newest_written(self, table: str) -> TableState | None:
        """The newest WRITTEN barrier of ``table`` (``None`` if none). One index seek."""
        with self._core.transaction() as s:
            table_id = table_id_of(s, table)
            row = s.scalar(
                select(TableBarrierRow)
                .where(TableBarrierRow.table_id == table_id, TableBarrierRow.state == BarrierState.WRITTEN)
                .order_by(TableBarrierRow.barrier_id.desc()).limit(1)
            )
            return table_state_of(normalize_table_name(table), row) if row is not None else None

    def history(
        self, table: str, *, limit: int = 100, before: int | None = None
    ) -> list[TableState]:
        """Barrier states of ``table``, newest first, at most ``limit`` (paged by ``before``).

        Raises:
            OutOfRangeError: ``limit`` is not an integer from 0 to 2**63-1.
        """
        limit = checked_int(limit, "limit (the most states listed)")
        with self._core.transaction() as s:
            table_id = table_id_of(s, table)
            query = select(TableBarrierRow).where(TableBarrierRow.table_id == table_id)
            if before is not None:
                query = query.where(TableBarrierRow.barrier_id < before)
            query = query.order_by(TableBarrierRow.barrier_id.desc()).limit(limit)
            name = normalize_table_name(table)
            return [table_state_of(name, row) for row in s.scalars(query)]

    def written_versions(self, tables: Sequence[str], barriers: Sequence[int]) -> dict[tuple[str, int], int]:
        """Delta versions WRITTEN for every (table, barrier) pair that has one, in one query.

        Returns:
            {(canonical table name, barrier id): Delta version}; missing pairs are not WRITTEN.
        """
        return {key: version for key, (version, _) in self.written_entries(tables, barriers).items()}

    def written_entries(
        self, tables: Sequence[str], barriers: Sequence[int]
    ) -> dict[tuple[str, int], tuple[int, int | None]]:
        """Delta version and WRITTEN time of every (table, barrier) pair that has one, in one query.

        Returns:
            {(canonical table name, barrier id): (Delta version, written_at epoch ms)}.
        """
        names = [normalize_table_name(t) for t in tables]
        if not names or not barriers:
            return {}
        with self._core.transaction() as s:
            rows = s.execute(
                select(
                    TableRow.name, TableBarrierRow.barrier_id, TableBarrierRow.version, TableBarrierRow.written_at_ms
                )
                .join(TableBarrierRow, TableBarrierRow.table_id == TableRow.id)
                .where(
                    TableRow.name.in_(names),
                    TableBarrierRow.barrier_id.in_(list(barriers)),
                    TableBarrierRow.state == BarrierState.WRITTEN,
                )
            ).all()
            return {(name, int(b)): (int(v), w) for name, b, v, w in rows if v is not None}

    def states_at(self, topology: str, barriers: Sequence[int]) -> list[TableState]:
        """Every table state of ``topology`` at the given barriers (for delay views)."""
        if not barriers:
            return []
        with self._core.transaction() as s:
            rows = s.execute(
                select(TableRow.name, TableBarrierRow)
                .join(TableBarrierRow, TableBarrierRow.table_id == TableRow.id)
                .where(TableRow.topology == topology, TableBarrierRow.barrier_id.in_(list(barriers)))
            ).all()
            return [table_state_of(name, row) for name, row in rows]

    def barriers_at_versions(self, versions: Mapping[str, int | None]) -> dict[str, int | None]:
        """The barrier each (table, Delta version) is tagged with in the metastore.

        Args:
            versions: {table name: Delta version} (``None`` versions map to ``None``).

        Returns:
            {canonical table name: newest barrier WRITTEN at exactly that version, or ``None``}.
            A root table holds the same version at several barriers when nothing was ingested
            between them; the newest one is returned. One index seek per table
            (``ix_tsb_table_barrier_version``).

        Raises:
            UnknownTableError: a table is not registered.
            OutOfRangeError: a version is not an integer from 0 to 2**63-1.
        """
        names = {normalize_table_name(k): v for k, v in versions.items()}
        out: dict[str, int | None] = {}
        with self._core.transaction() as s:
            for name, version in names.items():
                table_id = table_id_of(s, name)
                if version is None:
                    out[name] = None
                    continue
                out[name] = s.scalar(
                    select(func.max(TableBarrierRow.barrier_id)).where(
                        TableBarrierRow.table_id == table_id,
                        TableBarrierRow.version == checked_int(version, f"the Delta version of table {name!r}"),
                        TableBarrierRow.state == BarrierState.WRITTEN,
                    )
                )
        return out

    def written_tables(self, topology: str) -> set[str]:
        """Names of the tables of ``topology`` that have at least one WRITTEN barrier
        (:func:`written_tables` in a transaction of its own)."""
        with self._core.transaction() as s:
            return written_tables(s, topology)

    def newest_written_by_table(self, topology: str) -> dict[str, TableState]:
        """The newest WRITTEN state of every table of ``topology`` that has one.

        Returns:
            {table name: :class:`TableState`} (tables without a WRITTEN barrier are absent).
            Cost: one index seek per table (max over the ``(table_id, state, barrier_id)``
            prefix) plus one primary-key lookup per table, independent of the history length.
        """
        from sqlalchemy.orm import aliased

        inner = aliased(TableBarrierRow)
        with self._core.transaction() as s:
            newest = (
                select(func.max(inner.barrier_id))
                .where(inner.table_id == TableRow.id, inner.state == BarrierState.WRITTEN)
                .correlate(TableRow)
                .scalar_subquery()
            )
            # one join: per table an index seek for its newest WRITTEN barrier, then a primary-key
            # lookup (a row-value IN list would make SQLite scan the whole state table)
            rows = s.execute(
                select(TableRow.name, TableBarrierRow)
                .join(
                    TableBarrierRow,
                    and_(TableBarrierRow.table_id == TableRow.id, TableBarrierRow.barrier_id == newest),
                )
                .where(TableRow.topology == topology)
            ).all()
            return {name: table_state_of(name, row) for name, row in rows}


def written_tables(s: Session, topology: str) -> set[str]:
    """Names of the tables of ``topology`` that have at least one WRITTEN barrier, in the
    caller's transaction ``s``.

    Cost: one statement, an index probe per table (the ``(table_id, state, barrier_id)``
    prefix); no state row is loaded, whatever the history length.
    """
    has_written = exists().where(TableBarrierRow.table_id == TableRow.id, TableBarrierRow.state == BarrierState.WRITTEN)
    return set(s.scalars(select(TableRow.name).where(TableRow.topology == topology, has_written)))


# ---------------------------------------------------------------- the steps of record_written
def _checked_version(table: str, barrier: int, version: int) -> int:
    """``version`` as an int; OutOfRangeError unless it is an integer >= 0."""
    given = version
    try:
        version = operator.index(version)
    except TypeError:
        version = -1
    if version < 0 or isinstance(given, bool):
        raise OutOfRangeError(
            f"table {table!r}, barrier {barrier}: a Delta version is an integer >= 0, got {given!r}"
        )
    return version


def _table_row(s: Session, table: str) -> tuple[int, str, str]:
    """``(id, location, topology)`` of registered table ``table``, in one query.

    Raises:
        UnknownTableError: the table is not registered (as :func:`table_id_of`).
    """
    row = s.execute(select(TableRow.id, TableRow.location, TableRow.topology)
                    .where(TableRow.name == normalize_table_name(table))).first()
    if row is None:
        table_id_of(s, table)  # raises the registry's error
    assert row is not None
    return int(row.id), str(row.location), str(row.topology)


def _check_generated(s: Session, table: str, topology: str, barrier: int) -> None:
    """UnknownBarrierError unless ``barrier`` was generated for ``topology``, that of ``table``."""
    generated = s.scalar(
        select(BarrierRow.barrier_id).where(
            BarrierRow.topology == topology, BarrierRow.barrier_id == barrier
        )
    )
    if generated is None:
        raise UnknownBarrierError(
            f"barrier {barrier} was never generated for topology {topology!r} (table "
            f"{normalize_table_name(table)!r}); only generated barriers can be WRITTEN"
        )


def _written_row(
    s: Session, table: str, table_id: int, barrier: int, version: int, ts: int, job_id: str | None,
    inputs: Mapping[str, int] | None, attempt: str | None,
) -> TableBarrierRow:
    """The (table, barrier) row made WRITTEN at ``version``: a new one, the PROCESSED one
    committed (:func:`_commit_processed`), or the WRITTEN one when it is at ``version``."""
    row = s.get(TableBarrierRow, (table_id, barrier))
    if row is None:
        row = TableBarrierRow(
            table_id=table_id, barrier_id=barrier, state=BarrierState.WRITTEN, version=version,
            job_id=job_id, processed_at_ms=ts, written_at_ms=ts, inputs=dict(inputs or {}) or None,
        )
        s.add(row)
    elif row.state == BarrierState.WRITTEN:
        _check_same_version(table, barrier, row, version)
    else:
        _commit_processed(s, table_id, row, version, ts, job_id, inputs, attempt)
    return row


def _check_same_version(table: str, barrier: int, row: TableBarrierRow, version: int) -> None:
    """TopologyError if WRITTEN row ``row`` is at another Delta version than ``version``."""
    if row.version != version:
        raise TopologyError(
            f"barrier {barrier} of table {normalize_table_name(table)!r} is WRITTEN at "
            f"Delta version {row.version} in the metastore but {version} was reported"
        )


def _commit_processed(
    s: Session, table_id: int, row: TableBarrierRow, version: int, ts: int, job_id: str | None,
    inputs: Mapping[str, int] | None, attempt: str | None,
) -> None:
    """PROCESSED row ``row`` becomes WRITTEN at ``version``: its staged files are withdrawn but
    the committed attempt's directory, which is now the table's."""
    committed = {d for d in manifest_dirs(row.manifest) if attempt and posixpath.basename(d) == attempt}
    withdraw(s, table_id, row, now_ms(), keep=committed)
    row.state = BarrierState.WRITTEN
    row.version = version
    row.written_at_ms = ts
    row.manifest = None
    row.job_id = job_id or row.job_id
    if inputs:
        row.inputs = dict(inputs)
