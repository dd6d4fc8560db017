"""The MetaService's state API over the tsb metastore: :class:`MetaStore`.

:class:`MetaStore` is the one entry point through which the provider's operators, hooks,
sensors, triggers, REST API and the Spark apps' catalog read and write the metastore. It is a
plain class composing one standalone manager per FLIP-276 concept, all built on one
:class:`~.base.MetastoreCore` (the engine and its guarded transactions), each taking the
managers it uses in its constructor (Apache Paimon's ``TagManager(fileIO, path)`` pattern;
no manager inherits another):

* ``store.registry`` (:mod:`.registry`, :mod:`.registry_reads`): registration (FLIP-276
  "MetaService": ``/register/source``, ``/register/sink``, ``/unregister``), atomic across
  processes: the union of registered jobs stays acyclic and single-writer;
* ``store.domains`` (:mod:`.domains`): barrier domains, topologies sharing root tables;
* ``store.barriers`` (:mod:`.barriers`): barrier generation (FLIP-276 "Timestamp Barrier"):
  strictly increasing ids per topology, recording the Delta version of every root table in the
  same transaction, idempotent per run key; final barriers (FLIP-147 end of input);
* ``store.table_states`` (:mod:`.table_states`): per (table, barrier) states PROCESSED / WRITTEN
  (docs/design.md "Vocabulary");
* ``store.resolution`` (:mod:`.resolution`, :mod:`.staleness`): version resolution at the four
  levels of FLIP-276 "Data Consistency Type" with monotonic reads, leases and bounded staleness;
* ``store.leases`` (:mod:`.leases`): Delta versions pinned for readers;
  ``store.expiry`` (:mod:`.expiry`): the marks snapshot expiry writes before it vacuums;
* ``store.job_runs`` (:mod:`.job_runs`): job heartbeats, per-barrier timings, fencing tokens;
* ``store.delays`` (:mod:`.delays`): the delay view; ``store.freshness`` (:mod:`.freshness`):
  lag of each table against its freshness target and the bottleneck job;
* ``store.revisions`` (:mod:`.revisions`): revision plans (rollbacks recorded before any table
  is touched);
* ``store.recipients`` (:mod:`.recipients`): Delta Sharing recipients, bearer tokens scoped to
  one share.

Records and enums are in :mod:`.records`. All
times are epoch milliseconds (UTC); versions are Delta table versions; barrier ids are integers
strictly increasing per topology.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Engine

from airflow_provider_tsb.metastore.barriers import BarrierManager
from airflow_provider_tsb.metastore.base import MetastoreCore
from airflow_provider_tsb.metastore.delays import DelayManager
from airflow_provider_tsb.metastore.domains import DomainManager
from airflow_provider_tsb.metastore.emitters import EmitterManager
from airflow_provider_tsb.metastore.engine import create_metastore_engine
from airflow_provider_tsb.metastore.expiry import ExpiryManager
from airflow_provider_tsb.metastore.freshness import FreshnessManager
from airflow_provider_tsb.metastore.job_runs import JobRunManager
from airflow_provider_tsb.metastore.leases import LeaseManager
from airflow_provider_tsb.metastore.recipients import RecipientManager
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
from airflow_provider_tsb.metastore.registry import RegistryManager
from airflow_provider_tsb.metastore.resolution import ResolutionManager
from airflow_provider_tsb.metastore.retry import retry_budget_s
from airflow_provider_tsb.metastore.retrying import retrying
from airflow_provider_tsb.metastore.revisions import RevisionManager
from airflow_provider_tsb.metastore.staleness import StalenessResolver
from airflow_provider_tsb.metastore.table_states import TableStateManager

__all__ = [
    "LATEST", "BarrierDelays", "BarrierInfo", "BarrierState", "CommitState", "JobBarrierTiming", "JobDelay",
    "JobInfo", "JobStatus", "MetaStore", "Resolution", "TableDelay", "TableInfo", "TableState", "TableVersion",
    "TsKind", "now_ms",
]


class MetaStore:
    """The metastore API (see module docstring): one manager per concept, on one core.

    Args:
        url: SQLAlchemy URL of the metastore, or an existing :class:`~sqlalchemy.Engine`.
        retry_s: seconds each manager call is retried while the database is unreachable
            (:mod:`.retrying`; default ``$TSB_METASTORE_RETRY_SECONDS`` or 90 s, ``0``: off).
        location_roots: roots ``registry.register_table`` places tables under, as the REST API's
            ``[tsb] allowed_location_roots`` (default ``None``: anywhere).

    Attributes:
        engine: the SQLAlchemy engine.
        url: the engine's URL (password included).
        core: the :class:`~.base.MetastoreCore` every manager shares.
        registry: registration and its reads (:class:`~.registry.RegistryManager`).
        domains: barrier domains (:class:`~.domains.DomainManager`).
        barriers: barrier generation and lookup (:class:`~.barriers.BarrierManager`).
        table_states: PROCESSED / WRITTEN per (table, barrier) (:class:`~.table_states.TableStateManager`).
        resolution: version resolution with bounded staleness (:class:`~.staleness.StalenessResolver`
            around :class:`~.resolution.ResolutionManager`).
        leases: pinned Delta versions (:class:`~.leases.LeaseManager`).
        expiry: snapshot expiry marks (:class:`~.expiry.ExpiryManager`).
        job_runs: fencing tokens, heartbeats, timings (:class:`~.job_runs.JobRunManager`).
        delays: the delay view (:class:`~.delays.DelayManager`).
        freshness: lag against freshness targets (:class:`~.freshness.FreshnessManager`).
        revisions: revision plans (:class:`~.revisions.RevisionManager`).
        recipients: Delta Sharing recipients (:class:`~.recipients.RecipientManager`).
        emitters: the one barrier emitter of each topology (:class:`~.emitters.EmitterManager`).

    Every manager method runs in its own transaction. Methods raise :class:`MetastoreError`
    when the schema is missing (run ``tsb db migrate``) and the ``Unknown*Error`` family when
    a name is not registered.

    Example::

        store = MetaStore("sqlite:////tmp/tsb.db")
        store.migrate()
        store.registry.register_topology(topology)
        barrier = store.barriers.create("flights", {"tsb.raw.flights": 3})
        store.resolution.resolve(["tsb.flights.daily_delays"], "read-committed").versions
    """

    registry: RegistryManager
    domains: DomainManager
    barriers: BarrierManager
    table_states: TableStateManager
    resolution: StalenessResolver
    leases: LeaseManager
    expiry: ExpiryManager
    job_runs: JobRunManager
    delays: DelayManager
    freshness: FreshnessManager
    revisions: RevisionManager
    recipients: RecipientManager
    emitters: EmitterManager

    def __init__(self, url: str | Engine, *, retry_s: float | None = None,
                 location_roots: Sequence[str] | None = None) -> None:
        self.engine: Engine = url if isinstance(url, Engine) else create_metastore_engine(url)
        self.url = self.engine.url.render_as_string(hide_password=False)
        self.core = core = MetastoreCore(self.engine)
        budget = retry_budget_s() if retry_s is None else retry_s
        registry = RegistryManager(core, location_roots)
        table_states, leases = TableStateManager(core), LeaseManager(core)
        resolver = ResolutionManager(core, registry, table_states, leases)
        managers = {
            "registry": registry, "domains": DomainManager(core), "barriers": BarrierManager(core),
            "table_states": table_states, "leases": leases, "expiry": ExpiryManager(core),
            "job_runs": JobRunManager(core), "resolution": StalenessResolver(core, resolver),
            "delays": DelayManager(core), "freshness": FreshnessManager(core, registry),
            "revisions": RevisionManager(core), "recipients": RecipientManager(core), "emitters": EmitterManager(core),
        }
        for label, manager in managers.items():
            setattr(self, label, retrying(manager, core, budget, label))

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
