"""What the Delta tables already know about a topology's barriers, checked at barrier generation.

A metastore that lost its history (a new database, a restore from an old backup) would number
new barriers from its own newest id: barrier 1 again, while the topology's tables carry the tags
of barriers 1, 2, ... from before. A job then skips the "new" barrier 1 as already committed
and REPEATABLE_READ mixes epochs (the FLIP-276 invariants no longer hold). Generation therefore
refuses an id at or below one that a table of the topology is tagged with (``tsb.barrier`` of
its newest tsb commit, :func:`~airflow_provider_tsb.delta.barriers.latest_written_barrier`) or
that the barrier log holds (:mod:`airflow_provider_tsb.delta.barrier_log`), and says to run
``tsb db rebuild``. Cost: per intermediate table one ``stat`` per commit since the last
generation and one log-file read (the snapshot is not advanced: beside jobs committing every
barrier, advancing it would read every new commit at each generation); for the log, the reads of
:func:`~airflow_provider_tsb.delta.barrier_log.logged_barrier`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from airflow_provider_tsb.exceptions import BarrierHistoryError, UnknownBarrierError
from airflow_provider_tsb.metastore.domains import domain_name, members
from airflow_provider_tsb.metastore.models import BarrierRow

if TYPE_CHECKING:
    from airflow_provider_tsb.delta.barrier_log import BarrierLogEntry

# The Delta helpers (deltalake, pyarrow: seconds to import on a loaded machine) are imported in
# the functions that read the logs, not here: a DAG file imports the metastore through the
# operators and never generates a barrier while it is parsed (docs/airflow.md, "DAG parsing").

REBUILD_HINT = "run `tsb db rebuild --dags PATH` to restore the metastore from the Delta logs and the barrier log"


def check_tables(topology: str, barrier: int, tables: Sequence[tuple[str, str]]) -> None:
    """Refuse ``barrier`` when an intermediate table of ``topology`` is tagged with it or a later one.

    Args:
        tables: ``[(table name, location)]`` of ``topology``'s intermediate tables, read by the
            caller in its transaction.

    Raises:
        BarrierHistoryError: names the table, its location, the barrier found and the fix.
    """
    from airflow_provider_tsb.delta.barriers import latest_written_barrier
    from airflow_provider_tsb.delta.log import normalize_location
    from airflow_provider_tsb.exceptions import DeltaLogError

    for name, location in tables:
        try:
            found = latest_written_barrier(location)
        except DeltaLogError:  # no tsb commit left in the retained log (cleaned up): nothing to collide with
            continue
        if found is not None and found[0] >= barrier:
            raise BarrierHistoryError(
                f"topology {topology!r}: the metastore would generate barrier {barrier}, but table {name!r} "
                f"at {normalize_location(location)!r} is already tagged with barrier {found[0]} (Delta version "
                f"{found[1]}): the metastore lost barriers, and a new barrier with an old id would be skipped "
                f"as committed; {REBUILD_HINT}",
                topology=topology, barrier=barrier, found=found[0], where=name,
            )


def log_barrier(location: str, entry: BarrierLogEntry, *, first: bool) -> None:
    """Write ``entry`` to the barrier log at ``location``, refusing an id the log already passed.

    Args:
        first: the metastore holds no barrier of the topology yet.

    A log row for exactly ``entry.barrier`` after at least one barrier is the leftover of a
    generation that crashed between its log commit and its metastore commit (no job saw it): it
    is replaced. With ``first``, any log row means the metastore lost its barriers.

    Raises:
        BarrierHistoryError: the log holds a later barrier (or any barrier while ``first``).
        DeltaLogError: the log commit failed.
    """
    from airflow_provider_tsb.delta.barrier_log import logged_barrier, write_barrier
    from airflow_provider_tsb.delta.log import normalize_location

    logged = logged_barrier(location, entry.topology)
    if logged is not None and (logged > entry.barrier or (first and logged >= entry.barrier)):
        raise BarrierHistoryError(
            f"topology {entry.topology!r}: the metastore would generate barrier {entry.barrier}, but the barrier "
            f"log at {normalize_location(location)!r} already holds barrier {logged}: the metastore lost "
            f"barriers; {REBUILD_HINT}",
            topology=entry.topology, barrier=entry.barrier, found=logged, where="barrier log",
        )
    write_barrier(location, entry, replace=logged == entry.barrier)


def check_version_in_log(table: str, location: str, version: int, barrier: int) -> bool:
    """Refuse WRITTEN at a Delta ``version`` the table's log does not hold.

    Checked when a Delta table exists at ``location`` (a metastore used without tables, e.g. in
    a unit test, cannot verify). Cost: one incremental update of the cached latest snapshot.

    Returns:
        Whether a Delta table exists at ``location``.

    Raises:
        DeltaLogError: ``version`` is above the table's newest version (names the table, its
            location, the barrier and the newest version).
    """
    from airflow_provider_tsb.delta.log import normalize_location
    from airflow_provider_tsb.delta.snapshots import latest_table_or_none
    from airflow_provider_tsb.exceptions import DeltaLogError

    snapshot = latest_table_or_none(location)
    if snapshot is not None and version > snapshot.version():
        raise DeltaLogError(
            f"table {table!r}, barrier {barrier}: Delta version {version} does not exist in the table's log at "
            f"{normalize_location(location)!r} (newest version: {snapshot.version()}); WRITTEN is recorded at "
            "the version of the barrier's commit"
        )
    return snapshot is not None


def unknown_barrier_error(s: Session, topology: str, barrier: int) -> UnknownBarrierError | None:
    """The error for an AS OF read of a ``barrier`` never generated in ``topology``'s barrier
    domain (:mod:`.domains`: ids are shared there), else ``None`` (such a read fails as "no such
    barrier", not as "not COMMIT")."""
    domain = domain_name(s, topology) or topology
    scope = members(s, domain) or [topology]
    if s.scalar(select(BarrierRow.barrier_id).where(BarrierRow.topology.in_(scope), BarrierRow.barrier_id == barrier)
                .limit(1)) is not None:
        return None
    newest = s.scalar(select(func.max(BarrierRow.barrier_id)).where(BarrierRow.topology.in_(scope)))
    where = f"topology {topology!r}" if scope == [topology] else f"barrier domain {domain!r} ({', '.join(scope)})"
    return UnknownBarrierError(
        f"no such barrier: barrier {barrier} was never generated in {where} (newest barrier: "
        f"{newest}); AS OF reads a generated barrier that is COMMIT over the tables"
    )
