"""FLIP-276 registration through the REST API (``/register/source``, ``/register/sink``) with
its authorization and the checks that keep a topology runnable.

In order, before anything is written:

1. the user needs edit access (``PUT``) to the job's topology and to the table's topology
   (:mod:`airflow_provider_tsb.api.access`; 403 names nothing);
2. a job reads and writes tables of its own topology only (409 ``TopologyError``);
3. a table not registered yet: a DAG that declares it (an outlet asset of that name) must run
   the job's topology (its own tasks register it; 409 otherwise), and its location must lie
   under the allowed roots (``[tsb] allowed_location_roots``, default the warehouse; 422
   ``LocationNotAllowedError``); a registered table given again with another ``location`` is
   refused (409 ``TableLocationConflictError``, naming both locations: a re-registration never
   moves a table silently);
4. ``root=true`` creates a root table only where the policy allows it (the standalone app, for a
   topology with no barrier yet): in Airflow, root tables come from the topology's DAG file,
   and a root table the declaration lacks would make every barrier generation fail.
"""

from __future__ import annotations

from airflow_provider_tsb.api.access import EDIT, TopologyAccess
from airflow_provider_tsb.api.schemas import JobOut, RegisterBody
from airflow_provider_tsb.exceptions import BadRequestError, TopologyError, UnknownJobError
from airflow_provider_tsb.metastore.locations import check_location, check_same_location
from airflow_provider_tsb.metastore.store import JobInfo, MetaStore
from airflow_provider_tsb.names import validate_job_id
from airflow_provider_tsb.topology import Table


def job_out(info: JobInfo, stale_after_s: float | None = None) -> JobOut:
    """The API shape of a job."""
    return JobOut(
        id=info.id, topology=info.topology, application=info.application, status=info.status,
        registered_at_ms=info.registered_at_ms, last_heartbeat_ms=info.last_heartbeat_ms,
        current_barrier=info.current_barrier, sources=list(info.sources), sinks=list(info.sinks),
        stale=info.is_stale(stale_after_s) if stale_after_s is not None else False,
    )


def _check_new_table(
    store: MetaStore, access: TopologyAccess, kind: str, topology: str, name: str, body: RegisterBody
) -> None:
    declared = access.dags_of_tables([name]).get(name)
    if declared and not declared <= access.dags_of(topology):
        raise TopologyError(
            f"table {name!r} is declared by a DAG file that does not run topology {topology!r}; "
            "that DAG's tasks register it"
        )
    root = kind == "source" and body.root
    check_location(Table(name, "root" if root else "intermediate", body.location).resolved_location(),
                   access.location_roots)
    if not root:
        return
    if not access.api_root_tables:
        raise TopologyError(
            f"the REST API does not create root tables ({name!r}): declare it with "
            "Topology.root_table() in the DAG file; the barrier task registers it"
        )
    if store.barriers.latest(topology) is not None:
        raise TopologyError(
            f"topology {topology!r} has barriers already; a new root table {name!r} would make its "
            "barrier generation fail (every root table's version is recorded at each barrier)"
        )


def register(
    store: MetaStore, access: TopologyAccess, kind: str, job_id: str, name: str, body: RegisterBody | None
) -> JobOut:
    """Add table ``name`` as a source (``kind="source"``) or sink of job ``job_id`` (module docstring).

    Raises:
        AccessDeniedError (403), UnknownJobError / UnknownTableError (404), TopologyError,
        DoubleWriterError, CycleError, TableLocationConflictError (409), BadRequestError /
        LocationNotAllowedError / InvalidLocationError (422).
    """
    validate_job_id(job_id)
    body = body or RegisterBody()
    if body.topology is not None:
        validate_job_id(body.topology)
    table = store.registry.table(name, required=False)
    try:
        job: JobInfo | None = store.registry.job(job_id)
    except UnknownJobError:
        job = None
    topology = job.topology if job is not None else (body.topology or (table.topology if table else None))
    if topology is None:
        access.require_all_dags(EDIT)
    access.require(EDIT, [topology, body.topology, table.topology if table else None])
    if job is None and kind == "source" and table is None and not body.root:
        raise UnknownJobError(
            f"cannot register source {name!r} for job {job_id!r}: neither the job nor the table is "
            "registered; register the table's writer first or pass root=true to create a root table"
        )
    if topology is None:
        raise BadRequestError(
            f"job {job_id!r} is not registered and table {name!r} is unknown: give 'topology' in the "
            "body to create the job"
        )
    if job is not None and body.topology is not None and body.topology != job.topology:
        raise TopologyError(f"job {job_id!r} is registered in topology {job.topology!r}, not {body.topology!r}")
    if table is not None and table.topology != topology:
        raise TopologyError(
            f"table {name!r} belongs to topology {table.topology!r}: job {job_id!r} of topology {topology!r} "
            "cannot read or write it (a job reads and writes the tables of its own topology)"
        )
    if table is None:
        _check_new_table(store, access, kind, topology, name, body)
    else:  # a registered table keeps its location: another one is a conflict, not a silent no-op
        check_same_location(name, table.location, body.location)
    created = False
    if job is None:
        job = store.registry.create_job(topology, job_id, body.application or "")
        created = True
    try:
        if kind == "source":
            if table is None and body.root:
                store.registry.register_table(job.topology, Table(name, "root", body.location))
            info = store.registry.register_source(job_id, name)
        else:
            info = store.registry.register_sink(job_id, name, location=body.location)
    except Exception:
        if created:
            store.registry.unregister_job(job_id)
        raise
    return job_out(info)
