"""The MetaService's state API over the tsb metastore: :class:`MetaStore`.

:class:`MetaStore` is the one entry point through which the provider's operators, hooks,
sensors, triggers, REST API and the Spark apps' catalog read and write the metastore. It is a
facade over one module per FLIP-276 concept:

* :mod:`.registry`: registration (FLIP-276 "MetaService": ``/register/source``,
  ``/register/sink``, ``/unregister``), atomic across processes: the union of registered jobs
  stays acyclic and single-writer;
* :mod:`.barriers`: barrier generation (FLIP-276 "Timestamp Barrier"): strictly increasing ids
  per topology, recording the Delta version of every root table in the same transaction,
  idempotent per run key; final barriers (FLIP-147 end of input);
* :mod:`.table_states`: per (table, barrier) states PROCESSED / WRITTEN (docs/design.md
  "Vocabulary");
* :mod:`.resolution`: version resolution at the four levels of FLIP-276 "Data Consistency
  Type" with monotonic reads and leases; :mod:`.staleness`: bounded staleness reads over it;
* :mod:`.leases`: Delta versions pinned for readers;
* :mod:`.job_runs`: job heartbeats and per-barrier timings;
* :mod:`.delays`: the delay view; :mod:`.freshness`: lag of each table against its freshness
  target and the bottleneck job;
* :mod:`.revisions`: revision plans (rollbacks recorded before any table is touched).

Records and enums are in :mod:`.records`. All times are epoch milliseconds (UTC); versions are
Delta table versions; barrier ids are integers strictly increasing per topology.
"""

from __future__ import annotations

from sqlalchemy import Engine

from airflow_provider_tsb.metastore.barriers import BarrierManager
from airflow_provider_tsb.metastore.engine import create_metastore_engine
from airflow_provider_tsb.metastore.freshness import FreshnessManager
from airflow_provider_tsb.metastore.job_runs import JobRunManager
from airflow_provider_tsb.metastore.records import (
    LATEST,
    BarrierDelays,
    BarrierInfo,
    BarrierState,
    CommitState,
    JobBarrierTiming,
    JobDelay,
    JobInfo,
    JobStatus,
    Resolution,
    TableDelay,
    TableInfo,
    TableState,
    TableVersion,
    TsKind,
    now_ms,
)
from airflow_provider_tsb.metastore.revisions import RevisionManager
from airflow_provider_tsb.metastore.staleness import StalenessManager

__all__ = [
    "LATEST", "BarrierDelays", "BarrierInfo", "BarrierState", "CommitState", "JobBarrierTiming", "JobDelay",
    "JobInfo", "JobStatus", "MetaStore", "Resolution", "TableDelay", "TableInfo", "TableState", "TableVersion",
    "TsKind", "now_ms",
]


class MetaStore(StalenessManager, BarrierManager, JobRunManager, FreshnessManager, RevisionManager):
    """The metastore API (see module docstring).

    Args:
        url: SQLAlchemy URL of the metastore, or an existing :class:`~sqlalchemy.Engine`.

    Every method runs in its own transaction. Methods raise :class:`MetastoreError` when the
    schema is missing (run ``tsb db migrate``) and the ``Unknown*Error`` family when a name
    is not registered.

    Example::

        store = MetaStore("sqlite:////tmp/tsb.db")
        store.migrate()
        store.register_topology(topology)
        barrier = store.create_barrier("flights", {"tsb.raw.flights": 3})
        store.resolve(["tsb.flights.daily_delays"], "read-committed").versions
    """

    def __init__(self, url: str | Engine) -> None:
        self.engine: Engine = url if isinstance(url, Engine) else create_metastore_engine(url)
        self.url = self.engine.url.render_as_string(hide_password=False)

    # ------------------------------------------------------------------ schema
    def migrate(self) -> str:
        """Create or upgrade the schema to the newest Alembic revision; returns the revision."""
        from airflow_provider_tsb.metastore.migrate import upgrade

        return upgrade(self.engine)

    def check(self) -> str:
        """Return the current revision; raise :class:`MetastoreError` if not up to date."""
        from airflow_provider_tsb.metastore.migrate import check

        return check(self.engine)

    def dispose(self) -> None:
        """Close pooled connections."""
        self.engine.dispose()

