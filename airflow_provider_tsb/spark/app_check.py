"""Does an app agree with its topology? Checked against the metastore before Spark starts.

An app (:class:`~airflow_provider_tsb.spark.model.TsbApp`) names its job id, sources and sinks
itself; the topology of the DAG file registers the same job in the metastore
(:meth:`RegistryManager.register_job <airflow_provider_tsb.metastore.registry.RegistryManager.register_job>`).
When the two disagree (a typo in either), the app would otherwise fail deep inside its run with
an error that names only one side (``job 'clean' is not registered; cannot record its
heartbeat``, ``no location for table 'raw.penguin'``). :func:`check_app_registration` names
both sides and what to change, in a few metastore queries and without a Spark session.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from airflow_provider_tsb.exceptions import TableLocationConflictError, UnknownJobError, UnknownTableError
from airflow_provider_tsb.names import normalize_table_name

if TYPE_CHECKING:
    from airflow_provider_tsb.metastore.store import MetaStore
    from airflow_provider_tsb.spark.model import TsbApp


def _names(names: Iterable[str]) -> str:
    return ", ".join(repr(n) for n in sorted(names)) or "(none)"


def check_app_registration(app: TsbApp, store: MetaStore) -> None:
    """Check that ``app`` is the job the metastore registered: same job id, and every source and
    sink of the app registered as a source or sink of that job.

    A registered job with no registered sources (or sinks) is not checked on them (a job created
    without its tables); the app may read fewer sources than the topology declares.

    Raises:
        UnknownJobError: ``app.job_id`` is not registered. The message names the app's job id,
            the job registered as the writer of the app's sinks (when there is one) and the jobs
            registered in that topology (or in every topology), and says what to change.
        UnknownTableError: a source or sink of the app is not one of the job's in its topology.
            The message names the app's table as declared, the job's registered sources (or
            sinks) and the topology.
    """
    registered = {job.id: job for job in store.registry.jobs()}
    job = registered.get(app.job_id)
    if job is None:
        writers = {sink: store.registry.writer_of(sink) for sink in sorted(app.sinks)}
        owners = sorted({w for w in writers.values() if w is not None})
        topologies = sorted({registered[w].topology for w in owners if w in registered})
        listed = [j for j in registered.values() if not topologies or j.topology in topologies]
        where = f"topology {_names(topologies)}" if topologies else "the metastore"
        written = (
            "; its sinks are registered as written by "
            + ", ".join(f"{sink!r} by job {w!r}" for sink, w in writers.items() if w is not None)
            if owners else f"; no registered job writes its sinks ({_names(app.sinks)})"
        )
        raise UnknownJobError(
            f"the app and the topology disagree: the app's job id is {app.job_id!r}, which is not a job "
            f"registered in the metastore{written}. Jobs registered in {where}: "
            f"{_names(j.id for j in listed)}. Give TsbApp(job_id=...) the job id of Topology.job(...) "
            "(or register the topology first: its DAG's barrier task, or `tsb barrier create TOPOLOGY --dags PATH`)"
        )
    for kind, declared, known in (("source", app.sources, job.sources), ("sink", app.sinks, job.sinks)):
        if not known:
            continue
        strangers = [name for name in sorted(declared) if normalize_table_name(name) not in known]
        if strangers:
            raise UnknownTableError(
                f"the app and the topology disagree: app {app.job_id!r} declares {kind}(s) {_names(strangers)}, "
                f"but the {kind}s of job {job.id!r} in topology {job.topology!r} are {_names(known)}. "
                f"Make the app's {kind}s (TsbApp({kind}s=...)) name the topology's tables, or fix Topology.job(...)"
            )


def check_app_locations(app: TsbApp, store: MetaStore, locations: Mapping[str, str]) -> None:
    """Check that the app reads and writes each table where the metastore registered it.

    The app's locations come from its command line (``--table NAME=LOCATION``, which the operator
    builds from the topology of the DAG file as the worker loads it) or its defaults; readers
    and the commit protocol go by the registered ones. A worker that resolves the topology's
    warehouse differently (another ``$TSB_WAREHOUSE`` or ``AIRFLOW_HOME`` than where the topology
    was registered) would otherwise commit barriers into other tables than the ones every
    reader resolves, and record their versions against the registered ones.

    Args:
        locations: ``{table name: location}`` of the app's sources and sinks, as resolved for
            the run (:meth:`TsbApp.resolve_locations`). A table the metastore does not know is
            left to :func:`check_app_registration`.

    Raises:
        TableLocationConflictError: a table's location differs from its registered one (compared
            as absolute paths or URIs); the message names the job, the table, both locations
            and what to change.
    """
    from airflow_provider_tsb.delta.log import normalize_location

    for name, location in sorted(locations.items()):
        info = store.registry.table(normalize_table_name(name), required=False)
        if info is None or not info.location or normalize_location(location) == normalize_location(info.location):
            continue
        raise TableLocationConflictError(
            f"job {app.job_id!r}: table {info.name!r} is registered at {info.location!r}, but this run would "
            f"read or write it at {location!r}. Give the job the registered location (--table "
            f"{info.name}={info.location}): the operator builds it from the topology's warehouse "
            "(Topology(warehouse=...), else $TSB_WAREHOUSE, else $AIRFLOW_HOME/tsb-warehouse), which must be "
            "the same on every worker as where the topology was registered"
        )
