"""Where a TSB job's newest Airflow task log is: the Airflow 3 UI URL of its task instance.

A job of a topology runs as an Airflow task whose outlet assets are the job's sink tables
(:class:`~airflow_provider_tsb.task_group.TsbTopologyTaskGroup`, :mod:`airflow_provider_tsb.assets`:
an asset is named after its table). The task of a job is found the way Airflow links a task to
an asset (``TaskOutletAssetReference``); its newest task instance (by start time) gives the URL
from Airflow's own :attr:`TaskInstance.log_url <airflow.models.taskinstance.TaskInstance.log_url>`:
``{[api] base_url}/dags/{dag_id}/runs/{run_id}/tasks/{task_id}[/mapped/{map_index}]?try_number=N``,
the page whose Logs tab shows that try's log.

Runs in the api-server only (it reads Airflow's metadata database through Airflow's ORM).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def task_log_urls(job_sinks: Mapping[str, Sequence[str]]) -> dict[str, str]:
    """{job id: Airflow UI URL of the newest task instance of the task that runs the job}.

    Args:
        job_sinks: {job id: its sink table names} (canonical ``catalog.db.table``).

    Returns:
        Only the jobs with a task instance in Airflow's metadata database (a job run outside
        Airflow, or whose DAG never ran, has none). Two tasks writing a job's sinks (two DAGs
        running one topology): the one started last.
    """
    sinks = sorted({s for names in job_sinks.values() for s in names})
    if not sinks:
        return {}
    from airflow.models.asset import AssetModel, TaskOutletAssetReference
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select, tuple_

    with create_session() as session:
        tasks: dict[str, set[tuple[str, str]]] = {}
        for name, dag_id, task_id in session.execute(
            select(AssetModel.name, TaskOutletAssetReference.dag_id, TaskOutletAssetReference.task_id)
            .join(TaskOutletAssetReference, TaskOutletAssetReference.asset_id == AssetModel.id)
            .where(AssetModel.name.in_(sinks))
        ):
            tasks.setdefault(name, set()).add((dag_id, task_id))
        urls: dict[str, str] = {}
        for job_id, names in job_sinks.items():
            keys = sorted(set().union(*(tasks.get(n, set()) for n in names)))
            if not keys:
                continue
            ti = session.scalars(
                select(TaskInstance)
                .where(tuple_(TaskInstance.dag_id, TaskInstance.task_id).in_(keys))
                .order_by(TaskInstance.start_date.desc().nulls_last(), TaskInstance.id.desc())
                .limit(1)
            ).first()
            if ti is not None:
                urls[job_id] = ti.log_url
        return urls
