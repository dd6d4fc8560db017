"""What a tsb job's ``spark-submit`` gets beyond the app's command line: :func:`configure_submit`.

* the Spark settings of the Spark connection's extra (cluster-wide resources: executor cores and
  memory, dynamic allocation, shuffle partitions; :func:`connection_conf`), under the job's
  declared conf and the operator's, and :data:`SUBMIT_DEFAULT_CONF` under all of them;
* for a cluster master, ``--py-files`` with the provider zipped
  (:func:`airflow_provider_tsb.spark.packaging.package_zip`), since executors have nothing of it
  (:func:`ships_package`);
* for a driver that runs on this machine, the class-data archive of Spark's classes
  (:func:`uses_class_data`, :mod:`airflow_provider_tsb.spark.class_data`), and for executors
  too when the cluster is this machine.

The Spark connection is Airflow's Spark provider's (``SparkSubmitHook``); its extra may hold
``conf``, ``tsb-ship-package`` and ``tsb-class-data``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from airflow.providers.common.compat.sdk import AirflowNotFoundException, BaseHook

#: Spark connection extra holding Spark properties, ``{"conf": {"spark.executor.memory": "2g"}}``
#: (top-level ``spark.*`` keys of the extra count too)
CONN_CONF_KEY = "conf"
#: Spark connection extra: ship the provider as ``--py-files`` (``true``/``false``; default: for
#: any master but ``local``)
CONN_SHIP_KEY = "tsb-ship-package"


def connection_conf(extra: Mapping[str, Any], conn_id: str) -> dict[str, str]:
    """Spark properties in a Spark connection's extra: ``extra["conf"]`` (a JSON object) updated
    with the extra's top-level ``spark.*`` keys; values as strings (``true``, ``2g``, ``8``).

    Raises:
        ValueError: ``conf`` is not a JSON object, or a property name does not start with
            ``spark.`` (names the connection and the key).
    """
    conf = extra.get(CONN_CONF_KEY) or {}
    if isinstance(conf, str):
        try:
            conf = json.loads(conf)
        except ValueError:
            conf = None
    if not isinstance(conf, Mapping):
        raise ValueError(
            f"Spark connection {conn_id!r}: extra {CONN_CONF_KEY!r} must be a JSON object of Spark properties, "
            f'e.g. {{"{CONN_CONF_KEY}": {{"spark.executor.memory": "2g"}}}}; got {extra.get(CONN_CONF_KEY)!r}'
        )
    merged = {**conf, **{k: v for k, v in extra.items() if k.startswith("spark.")}}
    bad = sorted(k for k in merged if not str(k).startswith("spark."))
    if bad:
        raise ValueError(f"Spark connection {conn_id!r}: {bad} in extra {CONN_CONF_KEY!r} are not Spark properties "
                         "(names start with 'spark.')")
    return {str(k): _conf_value(v) for k, v in merged.items()}


def _conf_value(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _connection_extra(conn_id: str) -> dict[str, Any]:
    """The extra of ``conn_id`` (``{}`` when the connection does not exist: ``spark-submit``'s
    own defaults apply, as in ``SparkSubmitHook``)."""
    try:
        return dict(BaseHook.get_connection(conn_id).extra_dejson)
    except AirflowNotFoundException:
        return {}


def ships_package(master: str, extra: Mapping[str, Any], ship_package: bool | None) -> bool:
    """Whether ``--py-files`` carries the provider: ``ship_package`` when given, else the
    connection's ``tsb-ship-package`` extra, else for every master but ``local[...]`` (a local
    master's executors are the driver's own process and interpreter)."""
    if ship_package is not None:
        return ship_package
    flag = extra.get(CONN_SHIP_KEY)
    if flag is not None:
        return str(flag).lower() in ("1", "true", "yes")
    return not master.startswith("local")


#: Spark settings of the tsb streaming source's Python workers on a busy machine, under every
#: other conf: a worker has this long to answer the driver's authentication once it has
#: connected back (Spark's ``spark.python.authenticate.socketTimeout``, default 15 s)
SUBMIT_DEFAULT_CONF: dict[str, str] = {"spark.python.authenticate.socketTimeout": "120s"}


#: Spark connection extra: map the class-data archive in local drivers (``true``/``false``;
#: default true; :mod:`airflow_provider_tsb.spark.class_data`)
CONN_CLASS_DATA_KEY = "tsb-class-data"


def uses_class_data(connection: Mapping[str, Any], extra: Mapping[str, Any]) -> bool:
    """Whether a ``spark-submit`` of this resolved connection (``SparkSubmitHook._connection``)
    gets the class-data archive: its driver runs on this machine (not ``deploy_mode`` cluster),
    it runs pyspark's own or ``$SPARK_HOME``'s ``spark-submit`` (no connection ``spark_home``),
    and the connection's ``tsb-class-data`` extra is not false."""
    flag = extra.get(CONN_CLASS_DATA_KEY)
    if flag is not None and str(flag).lower() in ("0", "false", "no"):
        return False
    return connection.get("deploy_mode") != "cluster" and not connection.get("spark_home") and (
        connection.get("spark_binary") in (None, "spark-submit")
    )


def configure_submit(
    hook: Any, conn_id: str, *, ship_package: bool | None = None, write_class_data: bool = False,
) -> Any:
    """Complete an Airflow ``SparkSubmitHook`` for a tsb job (in place; returns it).

    * Spark conf: :func:`connection_conf` of ``conn_id`` under the hook's own conf (the job's
      declared conf updated with the operator's), so the connection sets cluster-wide
      resources and a job overrides what it must; :data:`SUBMIT_DEFAULT_CONF` under all of them;
      Delta's jars, SQL extension and catalog added
      (:func:`~airflow_provider_tsb.spark.delta_jars.delta_conf`);
    * ``--py-files``: the provider's zip added to the hook's own when :func:`ships_package`;
    * the class-data archive of Spark's driver classes in ``spark.driver.extraJavaOptions`` when
      the driver runs here (:func:`uses_class_data`): a faster start
      (:class:`~airflow_provider_tsb.spark.class_data.ClassDataArchive`); with
      ``write_class_data`` (a submit about to run) a missing archive starts being written in the
      background, for the drivers after this one.

    Raises:
        ValueError: the connection's ``conf`` extra is malformed (see :func:`connection_conf`).
    """
    extra = _connection_extra(conn_id)
    from airflow_provider_tsb.spark.delta_jars import delta_conf

    hook._conf = delta_conf({**SUBMIT_DEFAULT_CONF, **connection_conf(extra, conn_id), **(hook._conf or {})},
                            fetch_missing=True)
    if uses_class_data(hook._connection, extra):
        from airflow_provider_tsb.spark.class_data import ClassDataArchive, with_class_data

        archive = ClassDataArchive()
        options = archive.ensure() if write_class_data else archive.java_options()
        hook._conf = with_class_data(hook._conf, options, str(hook._connection.get("master") or "local"))
    if ships_package(str(hook._connection.get("master") or ""), extra, ship_package):
        from airflow_provider_tsb.spark.packaging import package_zip

        shipped = package_zip()
        existing = [p for p in (hook._py_files or "").split(",") if p]
        if shipped not in existing:
            hook._py_files = ",".join([*existing, shipped])
    return hook
